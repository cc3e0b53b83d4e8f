// K8V4 page completions in one MLX node per layer (complete_pages, worker/kv/pages.py).
//
// When a decode step's token fills a row's page, the page's centered keys/values move from the
// row's full-precision tail page into the K8V4 pool (keys 8-bit, values 4-bit, affine groups,
// float16 scales and biases) and, for the working set, a float copy of what reading the pool
// back gives is written into a slot of the tail arrays. In MLX ops that is two gathers, two
// quantizes, eight casts, two dequantize chains and eight row writes per layer (~35 graph nodes,
// each costing the main thread and the stream thread a few microseconds): at 8-32 rows some row
// fills a page on most steps. CompletePages does it all in one node: per row it reads the tail
// row, quantizes it with MLX's CPU algorithm (mlx/backend/cpu/quantized.cpp: the group's min and
// max, the scale rounded so that an edge is exact, rint), stores the packed words, the scales and
// biases as float16, and writes q * scale + bias (the float16 scale and bias, two roundings: the
// same floats as worker.kv.paged_kv.dequantize) into the copy rows. worker/kv/pages.py bit-compares
// it with MLX's own ops at first use and keeps those ops when they differ.
//
// Outputs are the eight arrays written (pool keys' packed/scales/biases, values' same, the key
// and value tail arrays), each in its input's buffer when no other array refers to that version
// (as rows.cpp's WriteRows decides; MLX gives every output of a node its own copy of the
// inputs, so here eight owners mean none besides this node), else into a copy. Without copy
// rows (a compiled decode step's completions, whose tail arrays are the step's outputs: read
// here, not written) the outputs are the six pool arrays. LoadPages writes pool rows' float
// copies into tail rows the same way (the working set's page loads).
// Build: worker/cpu/native/build.py.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <stdexcept>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace nb = nanobind;
namespace mx = mlx::core;

// the owner count of an array's descriptor (rows.cpp has the same reader; see there why)
long page_desc_owners(const mx::array& a);
template <auto Member>
struct PageDescOwners {
  friend long page_desc_owners(const mx::array& a) { return (a.*Member).use_count(); }
};
template struct PageDescOwners<&mx::array::array_desc_>;

namespace {

long in_place = 0, copied = 0;  // outputs so far (tests, the worker status); main thread

int64_t index_at(const mx::array& rows, int64_t i) {  // rows: 1-D, any stride
  const char* p = rows.data<char>() +
                  i * static_cast<int64_t>(rows.strides()[0]) * static_cast<int64_t>(rows.itemsize());
  switch (rows.dtype()) {
    case mx::int32: return *reinterpret_cast<const int32_t*>(p);
    case mx::uint32: return *reinterpret_cast<const uint32_t*>(p);
    case mx::int64: return *reinterpret_cast<const int64_t*>(p);
    default: return static_cast<int64_t>(*reinterpret_cast<const uint64_t*>(p));
  }
}

// MLX's affine quantize of one group of G floats (bits 4 or 8) into packed words, and the
// float copy its float16 scale and bias give back
void quantize_group(const float* w, int group, int bits, uint32_t* packed, mx::float16_t* scale16,
                    mx::float16_t* bias16, float* copy) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (int j = 0; j < group; j++) {
    w_max = std::max(w_max, w[j]);
    w_min = std::min(w_min, w[j]);
  }
  const bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  const float edge = mask ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  const int per_word = 32 / bits;
  uint8_t q[256];
  for (int j = 0; j < group; j += per_word) {
    uint64_t word = 0;
    for (int k = 0; k < per_word; k++) {
      float el = std::rint((w[j + k] - bias) / scale);
      el = std::min(std::max(el, 0.0f), n_bins);
      q[j + k] = static_cast<uint8_t>(el);
      word |= static_cast<uint64_t>(el) << (k * bits);
    }
    packed[j / per_word] = static_cast<uint32_t>(word);
  }
  *scale16 = static_cast<mx::float16_t>(scale);
  *bias16 = static_cast<mx::float16_t>(bias);
  const float s = static_cast<float>(*scale16), b = static_cast<float>(*bias16);
  for (int j = 0; j < group; j++) {
    const float scaled = static_cast<float>(q[j]) * s;  // two roundings, as MLX's ops
    copy[j] = scaled + b;
  }
}

// OUT gets DST's buffer when nothing but this node's OURS outputs refers to DST's version
// (true: written in place), else a buffer of its own (the caller copies DST into it first)
bool place_output(const mx::array& dst, mx::array& out, long ours) {
  const bool own = dst.flags().row_contiguous && dst.data_size() == dst.size() &&
                   page_desc_owners(dst) == ours;
  (own ? in_place : copied)++;
  if (own) {
    out.copy_shared_buffer(dst);
  } else {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  return own;
}

// Encodes a node writing OUTPUTS: output i in the buffer of input FROM[i] (place_output: each
// output keeps its own copy of the inputs until the node is encoded, so as many descriptor
// owners as outputs are the node's and one more is another reader's), else in a copy of it
// made first; then RUN(ins, outs) on the stream
template <typename Run>
void encode_writes(const mx::Stream& stream, const std::vector<mx::array>& inputs,
                   std::vector<mx::array>& outputs, const int* from, Run run) {
  const long ours = static_cast<long>(outputs.size());
  std::vector<bool> owned;
  for (size_t i = 0; i < outputs.size(); i++) {
    owned.push_back(place_output(inputs[from[i]], outputs[i], ours));
  }
  auto& encoder = mx::cpu::get_command_encoder(stream);
  for (const auto& in : inputs) encoder.set_input_array(in);
  for (auto& out : outputs) encoder.set_output_array(out);
  std::vector<mx::array> ins, outs;
  for (const auto& in : inputs) ins.push_back(mx::array::unsafe_weak_copy(in));
  for (const auto& out : outputs) outs.push_back(mx::array::unsafe_weak_copy(out));
  std::vector<int> sources(from, from + outputs.size());
  encoder.dispatch([ins = std::move(ins), outs = std::move(outs), owned = std::move(owned),
                    sources = std::move(sources), run]() mutable {
    for (size_t i = 0; i < outs.size(); i++) {
      if (!owned[i]) std::memcpy(outs[i].data<char>(), ins[sources[i]].data<char>(),
                                 outs[i].nbytes());
    }
    run(ins, outs);
  });
}

class CompletePages : public mx::Primitive {
 public:
  CompletePages(mx::Stream stream, int group, bool copies)
      : mx::Primitive(stream), group_(group), copies_(copies) {}

  // inputs: k_tail, v_tail, tail_rows, kw, ks, kb, vw, vs, vb, pool_rows[, copy_rows]
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    static const int kDst[8] = {3, 4, 5, 6, 7, 8, 0, 1};  // the input each output rewrites
    encode_writes(stream(), inputs, outputs, kDst,
                  [group = group_](std::vector<mx::array>& ins, std::vector<mx::array>& outs) {
                    run(ins, outs, group);
                  });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[CompletePages] CPU only");
  }

  const char* name() const override { return "CompletePages"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const CompletePages&>(other);
    return group_ == o.group_ && copies_ == o.copies_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    std::vector<mx::Shape> shapes = {inputs[3].shape(), inputs[4].shape(), inputs[5].shape(),
                                     inputs[6].shape(), inputs[7].shape(), inputs[8].shape()};
    if (copies_) {
      shapes.push_back(inputs[0].shape());
      shapes.push_back(inputs[1].shape());
    }
    return shapes;
  }

 private:
  int group_;
  bool copies_;

  static void run(std::vector<mx::array>& ins, std::vector<mx::array>& outs, int group) {
    const int64_t d = ins[0].shape(1);
    const int64_t tail_n = ins[0].shape(0), pool_n = ins[3].shape(0);
    const int64_t count = static_cast<int64_t>(ins[2].size());
    const int64_t groups = d / group;
    const bool copies = outs.size() == 8;  // else the tails are only read: no copy rows
    float* k_tail = copies ? outs[6].data<float>() : nullptr;
    float* v_tail = copies ? outs[7].data<float>() : nullptr;
    std::vector<float> row(static_cast<size_t>(d)), scratch(static_cast<size_t>(d));
    for (int64_t r = 0; r < count; r++) {
      const int64_t src = index_at(ins[2], r), dst = index_at(ins[9], r),
                    copy = copies ? index_at(ins[10], r) : 0;
      if (src < 0 || src >= tail_n || dst < 0 || dst >= pool_n || copy < 0 || copy >= tail_n) {
        continue;  // never stray (the planner never sends such rows)
      }
      for (int part = 0; part < 2; part++) {  // keys 8-bit, values 4-bit
        const int bits = part == 0 ? 8 : 4;
        const float* source = copies ? (part == 0 ? k_tail : v_tail) : ins[part].data<float>();
        float* copied_to = copies ? (part == 0 ? k_tail : v_tail) + copy * d : scratch.data();
        std::memcpy(row.data(), source + src * d, static_cast<size_t>(d) * sizeof(float));
        const int64_t words = d * bits / 32;
        uint32_t* packed = outs[3 * part].data<uint32_t>() + dst * words;
        mx::float16_t* scales = outs[3 * part + 1].data<mx::float16_t>() + dst * groups;
        mx::float16_t* biases = outs[3 * part + 2].data<mx::float16_t>() + dst * groups;
        for (int64_t g = 0; g < groups; g++) {
          quantize_group(row.data() + g * group, group, bits, packed + g * group * bits / 32,
                         scales + g, biases + g, copied_to + g * group);
        }
      }
    }
  }
};

// The float copies of pool rows (what worker.kv.paged_kv.dequantize gives: q * scale + bias with the
// float16 scale and bias, two roundings) written into tail rows: the working set's page loads.
class LoadPages : public mx::Primitive {
 public:
  LoadPages(mx::Stream stream, int group) : mx::Primitive(stream), group_(group) {}

  // inputs: k_tail, v_tail, kw, ks, kb, vw, vs, vb, pool_rows, copy_rows
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    static const int kDst[2] = {0, 1};  // the tails
    encode_writes(stream(), inputs, outputs, kDst,
                  [group = group_](std::vector<mx::array>& ins, std::vector<mx::array>& outs) {
                    run(ins, outs, group);
                  });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[LoadPages] CPU only");
  }

  const char* name() const override { return "LoadPages"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return group_ == static_cast<const LoadPages&>(other).group_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape(), inputs[1].shape()};
  }

 private:
  int group_;

  static void run(std::vector<mx::array>& ins, std::vector<mx::array>& outs, int group) {
    const int64_t d = ins[0].shape(1);
    const int64_t tail_n = ins[0].shape(0), pool_n = ins[2].shape(0);
    const int64_t count = static_cast<int64_t>(ins[8].size());
    const int64_t groups = d / group;
    for (int64_t r = 0; r < count; r++) {
      const int64_t src = index_at(ins[8], r), dst = index_at(ins[9], r);
      if (src < 0 || src >= pool_n || dst < 0 || dst >= tail_n) {
        continue;  // never stray (the planner never sends such rows)
      }
      for (int part = 0; part < 2; part++) {  // keys 8-bit, values 4-bit
        const int bits = part == 0 ? 8 : 4;
        const int64_t words = d * bits / 32;
        const uint32_t* packed = ins[2 + 3 * part].data<uint32_t>() + src * words;
        const mx::float16_t* scales = ins[3 + 3 * part].data<mx::float16_t>() + src * groups;
        const mx::float16_t* biases = ins[4 + 3 * part].data<mx::float16_t>() + src * groups;
        float* out = outs[part].data<float>() + dst * d;
        const int per_word = 32 / bits;
        const uint32_t field = (1u << bits) - 1;
        for (int64_t j = 0; j < d; j++) {
          const uint32_t word = packed[j / per_word];
          const float q = static_cast<float>((word >> ((j % per_word) * bits)) & field);
          const float sc = static_cast<float>(scales[j / group]);
          const float scaled = q * sc;  // two roundings, as MLX's ops
          out[j] = scaled + static_cast<float>(biases[j / group]);
        }
      }
    }
  }
};

bool is_index(mx::Dtype t) {
  return t == mx::int32 || t == mx::uint32 || t == mx::int64 || t == mx::uint64;
}

// The CPU stream, after checking the float32 tails, the K8V4 pool arrays (packed, scales,
// biases of keys and values) and the 1-D index ROWS of equal length; else invalid_argument
mx::Stream checked_stream(const char* who, const mx::array& k_tail, const mx::array& v_tail,
                          const std::vector<mx::array>& keys,
                          const std::vector<mx::array>& values,
                          std::initializer_list<const mx::array*> rows, int group) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  const std::string name(who);
  if (stream.device != mx::Device::cpu) throw std::invalid_argument(name + ": CPU only");
  if (keys.size() != 3 || values.size() != 3) {
    throw std::invalid_argument(name + ": (packed, scales, biases) of keys and values");
  }
  const int64_t d = k_tail.ndim() == 2 ? k_tail.shape(1) : 0;
  bool ok = k_tail.dtype() == mx::float32 && v_tail.dtype() == mx::float32 &&
            v_tail.shape() == k_tail.shape() && (group == 32 || group == 64 || group == 128) &&
            d > 0 && d % group == 0;
  const int bits[2] = {8, 4};
  const std::vector<mx::array>* parts[2] = {&keys, &values};
  for (int p = 0; ok && p < 2; p++) {
    const auto& q = *parts[p];
    ok = q[0].dtype() == mx::uint32 && q[0].ndim() == 2 && q[0].shape(1) == d * bits[p] / 32 &&
         q[1].dtype() == mx::float16 && q[2].dtype() == mx::float16 && q[1].ndim() == 2 &&
         q[1].shape(1) == d / group && q[2].shape() == q[1].shape() &&
         q[1].shape(0) == q[0].shape(0) && q[0].shape(0) == keys[0].shape(0);
  }
  const size_t count = (*rows.begin())->size();
  for (const mx::array* r : rows) {
    ok = ok && r->ndim() == 1 && is_index(r->dtype()) && r->size() == count;
  }
  if (!ok) throw std::invalid_argument(name + ": unsupported shapes or dtypes");
  return stream;
}

// the eight arrays (kw, ks, kb, vw, vs, vb, k_tail, v_tail) with the pages completed; without
// COPY_ROWS the six pool arrays (the tails only read)
std::vector<mx::array> complete_pages(const mx::array& k_tail, const mx::array& v_tail,
                                      const mx::array& tail_rows,
                                      const std::vector<mx::array>& keys,
                                      const std::vector<mx::array>& values,
                                      const mx::array& pool_rows,
                                      const std::optional<mx::array>& copy_rows, int group) {
  const mx::Stream stream = checked_stream("complete_pages", k_tail, v_tail, keys, values,
                                           {&tail_rows, &pool_rows,
                                            copy_rows ? &*copy_rows : &tail_rows},
                                           group);
  std::vector<mx::array> inputs = {k_tail, v_tail, tail_rows, keys[0], keys[1], keys[2],
                                   values[0], values[1], values[2], pool_rows};
  if (copy_rows) inputs.push_back(*copy_rows);
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (int i : {3, 4, 5, 6, 7, 8, 0, 1}) {
    if (i < 2 && !copy_rows) break;
    shapes.push_back(inputs[i].shape());
    dtypes.push_back(inputs[i].dtype());
  }
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<CompletePages>(stream, group, copy_rows.has_value()), inputs);
}

// (k_tail, v_tail) with the pool rows POOL_ROWS' float copies written at the tail rows COPY_ROWS
std::vector<mx::array> load_pages(const mx::array& k_tail, const mx::array& v_tail,
                                  const std::vector<mx::array>& keys,
                                  const std::vector<mx::array>& values,
                                  const mx::array& pool_rows, const mx::array& copy_rows,
                                  int group) {
  const mx::Stream stream = checked_stream("load_pages", k_tail, v_tail, keys, values,
                                           {&pool_rows, &copy_rows}, group);
  std::vector<mx::array> inputs = {k_tail, v_tail, keys[0], keys[1], keys[2],
                                   values[0], values[1], values[2], pool_rows, copy_rows};
  return mx::array::make_arrays({k_tail.shape(), v_tail.shape()}, {k_tail.dtype(), v_tail.dtype()},
                                std::make_shared<LoadPages>(stream, group), inputs);
}

}  // namespace

#ifndef BUILT_FOR_MLX
#define BUILT_FOR_MLX "unknown"
#endif
const char* const kBuiltFor = "rapid-mlx built for mlx " BUILT_FOR_MLX;

NB_MODULE(_pages, m) {
  m.attr("built_for") = BUILT_FOR_MLX;
  m.attr("_tag") = kBuiltFor;
  m.doc() = "K8V4 page completions and loads in one node (the paged KV store's pool and working set)";
  m.def("complete_pages", &complete_pages, nb::arg("k_tail"), nb::arg("v_tail"),
        nb::arg("tail_rows"), nb::arg("keys"), nb::arg("values"), nb::arg("pool_rows"),
        nb::arg("copy_rows").none(), nb::arg("group"),
        "(kw, ks, kb, vw, vs, vb, k_tail, v_tail) with the tail rows quantized into the pool "
        "rows and their read-back floats in the copy rows (CPU, float32 tails); with no copy "
        "rows, the six pool arrays");
  m.def("load_pages", &load_pages, nb::arg("k_tail"), nb::arg("v_tail"), nb::arg("keys"),
        nb::arg("values"), nb::arg("pool_rows"), nb::arg("copy_rows"), nb::arg("group"),
        "(k_tail, v_tail) with the pool rows' float copies (dequantized) at the copy rows "
        "(CPU, float32 tails)");
  m.def("counts", []() { return nb::make_tuple(in_place, copied); },
        "(outputs written in place, outputs into a copy) so far");
}
