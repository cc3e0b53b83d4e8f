// Rows written into an MLX array's own buffer: the paged KV store's arrays (write_rows).
//
// MLX's scatter (a[rows] = v) writes into its input's buffer only when nothing else holds that
// buffer at the moment the main thread encodes the scatter; otherwise it copies the whole array
// first. On the CPU every op keeps its inputs' buffers until the stream thread has run it
// (backend/cpu/eval.cpp), and the engine encodes a decode step while the last one still runs
// (overlapped decode), so a step's first write into a layer's array often finds the last
// step's attention still holding it: a 32 MiB copy into fresh pages for the Qwen3 bench
// model's K8V4 float tail, several per step at 32 rows once the step's timing shifts
// (bench/README.md, "Keep page writes in place"). Those holders have been encoded already and the stream thread
// runs tasks in order, so they read the old rows before any later task writes. WriteRows
// therefore writes in place whenever no array still to be encoded refers to the old version
// (the array's descriptor has no other owner): a reader built but not yet encoded (MLX may
// encode independent branches of a graph in any order) makes it copy, as MLX would. Views of
// the array (a reshape) share its buffer without its descriptor: an encoded view must not wait
// for a reader that is encoded after a later write (the store's views are read by the next op).
// Build: worker/cpu/native/build.py.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <nanobind/nanobind.h>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace nb = nanobind;
namespace mx = mlx::core;

// MLX keeps an array's descriptor private; an explicit instantiation may name a private member
// (the standard waives access checks there), which gives this one reader of its owner count
long desc_owners(const mx::array& a);
template <auto Member>
struct DescOwners {
  friend long desc_owners(const mx::array& a) { return (a.*Member).use_count(); }
};
template struct DescOwners<&mx::array::array_desc_>;

namespace {

std::atomic<long> written_in_place{0}, copied{0};  // writes so far (tests, the worker status)

// byte offset of A's element FLAT (row-major over its shape) from its data pointer
int64_t offset_of(const mx::array& a, int64_t flat) {
  int64_t off = 0;
  for (int d = static_cast<int>(a.ndim()) - 1; d >= 0; d--) {
    const int64_t n = a.shape(d);
    off += (flat % n) * static_cast<int64_t>(a.strides()[d]);
    flat /= n;
  }
  return off * static_cast<int64_t>(a.itemsize());
}

// A's elements in row-major order into OUT (an input that is not row-contiguous)
void pack(const mx::array& a, char* out) {
  const size_t item = a.itemsize();
  const char* src = a.data<char>();
  for (size_t i = 0; i < a.size(); i++) {
    std::memcpy(out + i * item, src + offset_of(a, static_cast<int64_t>(i)), item);
  }
}

int64_t row_at(const mx::array& rows, int64_t i) {
  const char* p = rows.data<char>() + offset_of(rows, i);
  switch (rows.dtype()) {
    case mx::int32: return *reinterpret_cast<const int32_t*>(p);
    case mx::uint32: return *reinterpret_cast<const uint32_t*>(p);
    case mx::int64: return *reinterpret_cast<const int64_t*>(p);
    default: return static_cast<int64_t>(*reinterpret_cast<const uint64_t*>(p));
  }
}

// what a WriteRows node writes at dst[rows[r]]: values[r]; with GATHER (inputs {dst, rows,
// src, src_rows}) src[src_rows[r]] (a gather and a write in one node); with CENTER (inputs
// {dst, rows, values, center}, float32) values[r] - center[r % C], MLX's subtraction's bits
enum class Mode { plain, gather, center };

// float32 rows minus a cycling center: out row r = v row r - c row (r % cr), WIDTH floats each
void subtract_rows(float* o, const float* v, const float* c, int64_t cr, int64_t r,
                   int64_t width) {
  const float* cc = c + (r % cr) * width;
  for (int64_t j = 0; j < width; j++) o[j] = v[j] - cc[j];
}

class WriteRows : public mx::UnaryPrimitive {
 public:
  explicit WriteRows(mx::Stream stream, Mode mode = Mode::plain)
      : mx::UnaryPrimitive(stream), mode_(mode) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& dst = inputs[0];
    // in place: a dense buffer of its own, and no other array (a reader still to be encoded,
    // a handle kept elsewhere) refers to this version; this node's inputs hold the one owner
    const bool own = dst.flags().row_contiguous && dst.data_size() == dst.size() &&
                     desc_owners(dst) == 1;
    (own ? written_in_place : copied)++;
    if (own) {
      out.copy_shared_buffer(dst);
    } else {
      out.set_data(mx::allocator::malloc(out.nbytes()));
    }
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& in : inputs) encoder.set_input_array(in);
    encoder.set_output_array(out);
    const bool gather = mode_ == Mode::gather, center = mode_ == Mode::center;
    encoder.dispatch([dst = mx::array::unsafe_weak_copy(dst),
                      rows = mx::array::unsafe_weak_copy(inputs[1]),
                      values = mx::array::unsafe_weak_copy(inputs[2]),
                      src_rows = mx::array::unsafe_weak_copy(inputs[gather ? 3 : 1]),
                      shift = mx::array::unsafe_weak_copy(inputs[center ? 3 : 1]),
                      out = mx::array::unsafe_weak_copy(out), own, gather, center]() mutable {
      char* o = out.data<char>();
      if (!own) pack(dst, o);
      const int64_t n = out.shape(0);
      const size_t width = out.nbytes() / static_cast<size_t>(n > 0 ? n : 1);
      std::vector<char> buf;
      const char* v = values.data<char>();
      if (!values.flags().row_contiguous) {
        buf.resize(values.nbytes());
        pack(values, buf.data());
        v = buf.data();
      }
      const int64_t count = static_cast<int64_t>(rows.size());
      const int64_t m = values.shape(0);
      std::vector<char> shift_buf;
      const char* c = shift.data<char>();
      if (center && !shift.flags().row_contiguous) {
        shift_buf.resize(shift.nbytes());
        pack(shift, shift_buf.data());
        c = shift_buf.data();
      }
      const int64_t cr = center ? shift.shape(0) : 1;
      const int64_t floats = static_cast<int64_t>(width / sizeof(float));
      for (int64_t r = 0; r < count; r++) {
        int64_t i = row_at(rows, r);
        if (i < 0) i += n;
        if (i < 0 || i >= n) continue;  // MLX's scatter does not check either; skip, never stray
        int64_t j = r;
        if (gather) {
          j = row_at(src_rows, r);
          if (j < 0) j += m;
          if (j < 0 || j >= m) continue;
        }
        if (center) {
          subtract_rows(reinterpret_cast<float*>(o + i * width),
                        reinterpret_cast<const float*>(v + j * width),
                        reinterpret_cast<const float*>(c), cr, r, floats);
        } else {
          std::memcpy(o + i * width, v + j * width, width);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[WriteRows] CPU only");
  }

  const char* name() const override { return "WriteRows"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return mode_ == static_cast<const WriteRows&>(other).mode_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  Mode mode_;
};

bool is_index(mx::Dtype t) {
  return t == mx::int32 || t == mx::uint32 || t == mx::int64 || t == mx::uint64;
}

// DST (N, C) with rows ROWS (R,) set to VALUES (R, C), written into DST's buffer on the CPU
mx::array write_rows(const mx::array& dst, const mx::array& rows, const mx::array& values) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  if (stream.device != mx::Device::cpu) throw std::invalid_argument("write_rows: CPU only");
  if (dst.ndim() != 2 || rows.ndim() != 1 || values.ndim() != 2 ||
      values.shape(0) != rows.shape(0) || values.shape(1) != dst.shape(1)) {
    throw std::invalid_argument("write_rows: dst (N, C), rows (R,), values (R, C)");
  }
  if (values.dtype() != dst.dtype() || !is_index(rows.dtype())) {
    throw std::invalid_argument("write_rows: values in dst's dtype, integer rows");
  }
  return mx::array(dst.shape(), dst.dtype(), std::make_shared<WriteRows>(stream),
                   {dst, rows, values});
}

// DST (N, C) with rows ROWS (R,) set to SRC's rows SRC_ROWS (R,) (SRC (M, C)), in DST's buffer
mx::array copy_rows(const mx::array& dst, const mx::array& rows, const mx::array& src,
                    const mx::array& src_rows) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  if (stream.device != mx::Device::cpu) throw std::invalid_argument("copy_rows: CPU only");
  if (dst.ndim() != 2 || rows.ndim() != 1 || src.ndim() != 2 || src_rows.ndim() != 1 ||
      src_rows.shape(0) != rows.shape(0) || src.shape(1) != dst.shape(1)) {
    throw std::invalid_argument("copy_rows: dst (N, C), rows (R,), src (M, C), src_rows (R,)");
  }
  if (src.dtype() != dst.dtype() || !is_index(rows.dtype()) || !is_index(src_rows.dtype())) {
    throw std::invalid_argument("copy_rows: src in dst's dtype, integer rows");
  }
  return mx::array(dst.shape(), dst.dtype(), std::make_shared<WriteRows>(stream, Mode::gather),
                   {dst, rows, src, src_rows});
}

// DST (N, C) float32 with rows ROWS (R,) set to VALUES (R, C) minus CENTER (K, C) (row r minus
// center row r % K), in DST's buffer: the K8V4 tail's centered write without a Subtract node
mx::array write_rows_centered(const mx::array& dst, const mx::array& rows,
                              const mx::array& values, const mx::array& center) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  if (stream.device != mx::Device::cpu) {
    throw std::invalid_argument("write_rows_centered: CPU only");
  }
  if (dst.ndim() != 2 || rows.ndim() != 1 || values.ndim() != 2 || center.ndim() != 2 ||
      values.shape(0) != rows.shape(0) || values.shape(1) != dst.shape(1) ||
      center.shape(1) != dst.shape(1) || center.shape(0) < 1) {
    throw std::invalid_argument(
        "write_rows_centered: dst (N, C), rows (R,), values (R, C), center (K, C)");
  }
  if (dst.dtype() != mx::float32 || values.dtype() != mx::float32 ||
      center.dtype() != mx::float32 || !is_index(rows.dtype())) {
    throw std::invalid_argument("write_rows_centered: float32 arrays, integer rows");
  }
  return mx::array(dst.shape(), dst.dtype(), std::make_shared<WriteRows>(stream, Mode::center),
                   {dst, rows, values, center});
}

}  // namespace

#ifndef BUILT_FOR_MLX
#define BUILT_FOR_MLX "unknown"
#endif
const char* const kBuiltFor = "rapid-mlx built for mlx " BUILT_FOR_MLX;

NB_MODULE(_rows, m) {
  m.attr("built_for") = BUILT_FOR_MLX;
  m.attr("_tag") = kBuiltFor;
  m.doc() = "row writes into an MLX array's own buffer (the paged KV store's arrays)";
  m.def("write_rows", &write_rows, nb::arg("dst"), nb::arg("rows"), nb::arg("values"),
        "dst (N, C) with rows (R,) set to values (R, C), written in dst's buffer even when "
        "earlier readers still hold it (CPU only)");
  m.def("copy_rows", &copy_rows, nb::arg("dst"), nb::arg("rows"), nb::arg("src"),
        nb::arg("src_rows"),
        "dst (N, C) with rows (R,) set to src's rows src_rows (R,), in dst's buffer as "
        "write_rows (CPU only)");
  m.def("write_rows_centered", &write_rows_centered, nb::arg("dst"), nb::arg("rows"),
        nb::arg("values"), nb::arg("center"),
        "float32 dst (N, C) with rows (R,) set to values (R, C) minus center (K, C) (row r "
        "minus center row r % K), in dst's buffer as write_rows (CPU only)");
  m.def("counts", []() { return nb::make_tuple(written_in_place.load(), copied.load()); },
        "(writes made in place, writes into a copy) so far");
}
