// x @ w.T for float32: a few rows (M <= 4) with the bits OpenBLAS's sgemm gives MLX (matmul_t),
// or any number of rows each summed as sgemm sums one row alone (matmul_rows).
//
// MLX's CPU matmul calls cblas_sgemm even for one row; OpenBLAS then packs the whole weight
// matrix and runs its GEMM micro-kernel, several times slower than a matrix-vector pass. This
// primitive makes the same sums in the same order without the packing. The order (measured on
// Debian's OpenBLAS 0.3.21, core Zen, sgemm_kernel_16x4_haswell.S; see bench/README.md,
// "OpenBLAS packing"): K is cut into blocks as driver/level3.c cuts it (GEMM_Q = q, halves rounded up
// to 8); in a block, each output is one FMA chain over k from 0 (a row of a 1-, 2- or 3-column
// tile) or, in a full 4-column tile (4 rows of x), two chains, even and odd k of each 8-step,
// with the tail of the block (len % 8) on the even one, added as even + odd; each block's
// result is added to the output (0 first). matmul_rows keeps the one-chain order for every
// row (measured faster than sgemm at 4-32 rows, and a row's bits do not depend on the
// batch). worker/cpu/gemv.py enables it only when it matches mx.matmul bit for bit on the
// model's shapes at worker start. Build: worker/cpu/native/build.py.
//
// OpenBLAS's SkylakeX cores (AVX-512; Debian's 0.3.21 picks them on Xeons from Skylake-SP to
// Sapphire Rapids) sum differently, so the order is a parameter (ORDER_SKYLAKEX): GEMM_Q is
// 448, a 4-column tile is one chain per output like the others, and the products OpenBLAS's
// small-matrix permit takes (sgemm_small_kernel_permit: N * M * K <= 1e6, N * M <= 1200 and
// K >= 32, N weight rows, M rows of x) are summed by its small TN kernel: 16 lanes, lane l one
// FMA chain over k = l mod 16 (the last partial 16 masked to zeros), then the lanes added as
// ((l0 + l1) + (l2 + l3)) per 4-lane quarter and the quarters as (q0 + q1) + (q2 + q3).
#include <immintrin.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nanobind/nanobind.h>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace nb = nanobind;
namespace mx = mlx::core;

#include "gemv_tiles.h"
#include "gemv_rows.h"

namespace {

// A's elements in row-major order, copied into BUF through its strides (an input that is not
// row-contiguous: the primitive takes its inputs as they are, without a Contiguous node each)
const float* packed(const mx::array& a, std::vector<float>& buf) {
  buf.resize(a.size());
  const float* src = a.data<float>();
  const int nd = static_cast<int>(a.ndim());
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < a.size(); i++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * static_cast<int64_t>(a.strides()[d]);
    buf[i] = src[off];
    for (int d = nd - 1; d >= 0; d--) {
      if (++idx[d] < a.shape(d)) break;
      idx[d] = 0;
    }
  }
  return buf.data();
}

class Gemv : public mx::UnaryPrimitive {
 public:
  Gemv(mx::Stream stream, int q, int order, bool per_row, int threads)
      : mx::UnaryPrimitive(stream), q_(q), order_(order), per_row_(per_row), threads_(threads) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    const mx::array& w = inputs[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    encoder.set_input_array(x);
    encoder.set_input_array(w);
    encoder.set_output_array(out);
    const int k = w.shape(1), n = w.shape(0);
    const int rows = static_cast<int>(x.size() / k);
    const bool x_packed = x.flags().row_contiguous, w_packed = w.flags().row_contiguous;
    encoder.dispatch([x = mx::array::unsafe_weak_copy(x), w = mx::array::unsafe_weak_copy(w),
                      out = mx::array::unsafe_weak_copy(out), rows, n, k, q = q_,
                      order = order_, x_packed, w_packed, per_row = per_row_,
                      threads = threads_]() mutable {
      std::vector<float> x_buf, w_buf;
      const float* xs = x_packed ? x.data<float>() : packed(x, x_buf);
      const float* ws = w_packed ? w.data<float>() : packed(w, w_buf);
      if (per_row) {
        per_row_all(xs, ws, out.data<float>(), rows, n, k, q, order, threads);
      } else {
        gemv_all(xs, ws, out.data<float>(), rows, n, k, q, order);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[Gemv] CPU only");
  }

  const char* name() const override { return "Gemv"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const Gemv&>(other);
    return q_ == o.q_ && order_ == o.order_ && per_row_ == o.per_row_ && threads_ == o.threads_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    mx::Shape shape = inputs[0].shape();
    shape.back() = inputs[1].shape(0);
    return {shape};
  }

 private:
  int q_;
  int order_;
  bool per_row_;
  int threads_;
};

bool fma_cpu() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

// ORDER's kernels run on this CPU (the SkylakeX order's small kernel needs AVX-512)
bool runs(int order) {
  return fma_cpu() && (order == kOrderHaswell ||
                       (order == kOrderSkylakex && __builtin_cpu_supports("avx512f")));
}

// x (..., K) @ w.T for w (N, K): the primitive for float32 on the CPU (at most 4 rows of x
// unless PER_ROW), else MLX's matmul
mx::array product(const mx::array& x, const mx::array& w, int q, int order, bool per_row,
                  int threads) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  const bool fits = x.dtype() == mx::float32 && w.dtype() == mx::float32 && x.ndim() >= 1 &&
                    w.ndim() == 2 && x.shape(-1) == w.shape(1) && w.shape(0) > 0 &&
                    w.shape(1) > 0 && x.size() / w.shape(1) >= 1 &&
                    (per_row || x.size() / w.shape(1) <= kMaxRows) &&
                    stream.device == mx::Device::cpu && q > 0 && runs(order);
  if (!fits) {
    return mx::matmul(x, mx::transpose(w, s), s);
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  // no Contiguous nodes: each costs the step a graph node and a task on the stream's thread
  // (two per product, ~70 of a stories260K step's ~350); the primitive packs what is strided
  return mx::array(shape, mx::float32,
                   std::make_shared<Gemv>(stream, q, order, per_row, threads), {x, w});
}

// x (..., K) @ w.T for w (N, K): the primitive for float32 on the CPU with at most 4 rows of
// x, else MLX's matmul
mx::array matmul_t(const mx::array& x, const mx::array& w, int q, int order) {
  return product(x, w, q, order, false, 1);
}

// x (..., K) @ w.T, every row of x summed as matmul_t sums one row alone (any number of rows)
mx::array matmul_rows(const mx::array& x, const mx::array& w, int q, int order, int threads) {
  return product(x, w, q, order, true, threads);
}

}  // namespace

#ifndef BUILT_FOR_MLX
#define BUILT_FOR_MLX "unknown"
#endif
const char* const kBuiltFor = "rapid-mlx built for mlx " BUILT_FOR_MLX;

NB_MODULE(_gemv, m) {
  m.attr("built_for") = BUILT_FOR_MLX;
  m.attr("_tag") = kBuiltFor;
  m.attr("max_rows") = kMaxRows;
  m.attr("ORDER_HASWELL") = kOrderHaswell;
  m.attr("ORDER_SKYLAKEX") = kOrderSkylakex;
  m.doc() = "x @ w.T for float32 in OpenBLAS sgemm's summation order (up to 4 rows) or its "
            "one-row order for every row";
  m.def("matmul_t", &matmul_t, nb::arg("x"), nb::arg("w"), nb::arg("q"),
        nb::arg("order") = kOrderHaswell,
        "x @ w.T summed as OpenBLAS's sgemm with K blocks of GEMM_Q = q, in ORDER's kernels "
        "(MLX's matmul beyond 4 rows, other dtypes or devices)");
  m.def("matmul_rows", &matmul_rows, nb::arg("x"), nb::arg("w"), nb::arg("q"),
        nb::arg("order") = kOrderHaswell, nb::arg("threads") = 1,
        "x @ w.T with every row summed as matmul_t sums one row (any number of rows): a row's "
        "bits do not depend on the rows beside it; THREADS > 1 lets a helper thread sum half "
        "the weight rows of a large product (the same bits)");
  m.def("fma_cpu", &fma_cpu, "True when this CPU runs the kernel");
  m.def("runs", &runs, nb::arg("order"), "True when this CPU runs ORDER's kernels");
}
