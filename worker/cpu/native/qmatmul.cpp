// x @ dequantize(w).T for MLX's affine-quantized weights (4 or 8 bits, group size 32/64/128,
// scales and biases float32, bfloat16 or float16) on the CPU, without materializing the float
// weights: each 8 packed values are unpacked, scaled and offset in registers (AVX2/FMA) and
// multiplied into up to 4 rows of x at a time. MLX's own CPU quantized_matmul is many times
// slower than a float matmul of the same shape on x86 (and slower again with bfloat16 scales);
// decode steps of quantized models spend nearly all their time there. A product of 2^20+
// weight elements splits its weight rows with one helper thread (helper_thread.h). The sums are
// a float32 FMA chain per output, so they differ from MLX's kernel by rounding only.
// worker/cpu/qmatmul.py routes QuantizedLinear layers here on the CPU. Build:
// worker/cpu/native/build.py.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
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

#include "helper_thread.h"

namespace {

constexpr int kRowBlock = 4;  // rows of x per pass over a weight row
constexpr int64_t kSplitElements = int64_t{1} << 20;

// the group's scale or bias as a float, whatever the stored dtype
float as_float(const mx::array& a, int64_t i) {
  switch (a.dtype()) {
    case mx::float32: return a.data<float>()[i];
    case mx::bfloat16: return static_cast<float>(a.data<mx::bfloat16_t>()[i]);
    default: return static_cast<float>(a.data<mx::float16_t>()[i]);
  }
}

// 8 consecutive quantized values starting at value index J of a packed weight row, as floats
template <int BITS>
__attribute__((target("avx2,fma"))) inline __m256 unpack8(const uint32_t* row, int j) {
  if constexpr (BITS == 4) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i word = _mm256_set1_epi32(static_cast<int>(row[j / 8]));
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(word, shifts), _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(q);
  } else {
    const __m256i shifts = _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
    const uint32_t w0 = row[j / 4], w1 = row[j / 4 + 1];
    const __m256i words = _mm256_setr_epi32(static_cast<int>(w0), static_cast<int>(w0),
                                            static_cast<int>(w0), static_cast<int>(w0),
                                            static_cast<int>(w1), static_cast<int>(w1),
                                            static_cast<int>(w1), static_cast<int>(w1));
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(words, shifts), _mm256_set1_epi32(0xFF));
    return _mm256_cvtepi32_ps(q);
  }
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

struct Product {
  const float* x;  // (rows, k)
  const uint32_t* w;  // (n, k * bits / 32)
  const mx::array* scales;  // (n, k / group)
  const mx::array* biases;
  float* out;  // (rows, n)
  int rows, n, k, group;
};

// weight rows [N0, N1) of P, every row of x
template <int BITS>
__attribute__((target("avx2,fma"))) void range(const Product& p, int n0, int n1) {
  const int words = p.k * BITS / 32, groups = p.k / p.group;
  std::vector<float> sb(2 * static_cast<size_t>(groups));
  for (int n = n0; n < n1; n++) {
    const uint32_t* row = p.w + static_cast<int64_t>(n) * words;
    for (int g = 0; g < groups; g++) {
      sb[2 * g] = as_float(*p.scales, static_cast<int64_t>(n) * groups + g);
      sb[2 * g + 1] = as_float(*p.biases, static_cast<int64_t>(n) * groups + g);
    }
    for (int r0 = 0; r0 < p.rows; r0 += kRowBlock) {
      const int rb = std::min(kRowBlock, p.rows - r0);
      __m256 acc[kRowBlock] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                               _mm256_setzero_ps()};
      const float* xr = p.x + static_cast<int64_t>(r0) * p.k;
      for (int g = 0; g < groups; g++) {
        const __m256 s = _mm256_set1_ps(sb[2 * g]), b = _mm256_set1_ps(sb[2 * g + 1]);
        for (int j = g * p.group; j < (g + 1) * p.group; j += 8) {
          const __m256 wf = _mm256_fmadd_ps(unpack8<BITS>(row, j), s, b);
          for (int r = 0; r < rb; r++) {
            acc[r] = _mm256_fmadd_ps(wf, _mm256_loadu_ps(xr + static_cast<int64_t>(r) * p.k + j),
                                     acc[r]);
          }
        }
      }
      for (int r = 0; r < rb; r++) p.out[static_cast<int64_t>(r0 + r) * p.n + n] = hsum(acc[r]);
    }
  }
}

template <int BITS>
void all(const Product& p, int threads) {
  if (threads > 1 && static_cast<int64_t>(p.n) * p.k >= kSplitElements) {
    const int mid = p.n / 2;
    const std::function<void()> upper = [&] { range<BITS>(p, mid, p.n); };
    const std::function<void()> lower = [&] { range<BITS>(p, 0, mid); };
    if (Helper::get().split(upper, lower)) return;
  }
  range<BITS>(p, 0, p.n);
}

class QMatmul : public mx::UnaryPrimitive {
 public:
  QMatmul(mx::Stream stream, int group, int bits, int threads)
      : mx::UnaryPrimitive(stream), group_(group), bits_(bits), threads_(threads) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& a : inputs) encoder.set_input_array(a);
    encoder.set_output_array(out);
    const int k = inputs[0].shape(-1), n = inputs[1].shape(0);
    const int rows = static_cast<int>(inputs[0].size() / k);
    encoder.dispatch([x = mx::array::unsafe_weak_copy(inputs[0]),
                      w = mx::array::unsafe_weak_copy(inputs[1]),
                      s = mx::array::unsafe_weak_copy(inputs[2]),
                      b = mx::array::unsafe_weak_copy(inputs[3]),
                      out = mx::array::unsafe_weak_copy(out), rows, n, k, group = group_,
                      bits = bits_, threads = threads_]() mutable {
      const Product p{x.data<float>(), w.data<uint32_t>(), &s, &b, out.data<float>(),
                      rows, n, k, group};
      if (bits == 4) {
        all<4>(p, threads);
      } else {
        all<8>(p, threads);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[QMatmul] CPU only");
  }

  const char* name() const override { return "QMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const QMatmul&>(other);
    return group_ == o.group_ && bits_ == o.bits_ && threads_ == o.threads_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    mx::Shape shape = inputs[0].shape();
    shape.back() = inputs[1].shape(0);
    return {shape};
  }

 private:
  int group_;
  int bits_;
  int threads_;
};

bool fma_cpu() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

bool scale_dtype(const mx::array& a) {
  return a.dtype() == mx::float32 || a.dtype() == mx::bfloat16 || a.dtype() == mx::float16;
}

// x (..., K) @ dequantize(w, scales, biases).T: the primitive for float32 x on the CPU with
// row-contiguous operands, else MLX's quantized_matmul
mx::array qmatmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                  const mx::array& biases, int group, int bits, int threads) {
  mx::StreamOrDevice sd = {};
  mx::Stream stream = mx::to_stream(sd);
  const int k = x.ndim() >= 1 ? x.shape(-1) : 0;
  const bool fits = (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128) &&
                    x.dtype() == mx::float32 && w.dtype() == mx::uint32 && w.ndim() == 2 &&
                    scales.ndim() == 2 && biases.ndim() == 2 && k > 0 && k % group == 0 &&
                    w.shape(1) == k * bits / 32 && scales.shape(0) == w.shape(0) &&
                    scales.shape(1) == k / group && biases.shape() == scales.shape() &&
                    scale_dtype(scales) && biases.dtype() == scales.dtype() &&
                    stream.device == mx::Device::cpu && fma_cpu();
  if (!fits) {
    return mx::quantized_matmul(x, w, scales, biases, true, group, bits, "affine", sd);
  }
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  auto contiguous = [&](const mx::array& a) { return mx::contiguous(a, false, sd); };
  return mx::array(shape, mx::float32, std::make_shared<QMatmul>(stream, group, bits, threads),
                   {contiguous(x), contiguous(w), contiguous(scales), contiguous(biases)});
}

}  // namespace

#ifndef BUILT_FOR_MLX
#define BUILT_FOR_MLX "unknown"
#endif
const char* const kBuiltFor = "rapid-mlx built for mlx " BUILT_FOR_MLX;

NB_MODULE(_qmatmul, m) {
  m.attr("built_for") = BUILT_FOR_MLX;
  m.attr("_tag") = kBuiltFor;
  m.doc() = "x @ dequantize(w).T for MLX's affine 4- and 8-bit weights, dequantized in registers";
  m.def("qmatmul", &qmatmul, nb::arg("x"), nb::arg("w"), nb::arg("scales"), nb::arg("biases"),
        nb::arg("group"), nb::arg("bits"), nb::arg("threads") = 1,
        "x @ dequantize(w, scales, biases, group, bits).T for float32 x on the CPU (MLX's "
        "quantized_matmul for anything else); THREADS 2 splits a large product's weight rows "
        "with a helper thread");
  m.def("fma_cpu", &fma_cpu, "True when this CPU runs the kernel");
}
