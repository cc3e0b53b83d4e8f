// MLX's CPU softmax (precise, last axis, float32) and exp, with the same bits, using hardware FMA.
//
// MLX's x86 CPU build has no SIMD backend (Simd<float, 1>) and is compiled without -mfma, so
// simd::exp (mlx/backend/cpu/simd/math.h) calls libm's fmaf six times per element. A hardware
// FMA rounds exactly as fmaf does, so the same polynomial with inline FMA instructions (8 lanes
// of AVX2) gives the same float32 bits several times faster. Everything around the exponential
// repeats mlx/backend/cpu/softmax.cpp: the row maximum, exp(x - max) stored, the sum taken left
// to right in float32, 1 / sum, and each value times it. The optional mask replaces masked
// scores by finfo(float32).min first, as the CPU fallback of mx.fast.scaled_dot_product_attention
// does with its Select. Build: worker/cpu/native/build.py (-ffp-contract=off: no other a * b + c may
// become an FMA). Without AVX2+FMA, on a GPU stream or for other dtypes, the ops are MLX's own.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace nb = nanobind;
namespace mx = mlx::core;

namespace {

constexpr float kMasked = -FLT_MAX;  // finfo(float32).min, the fallback's masked score

// --- the exponential: simd::exp<float, 1>, op for op ---------------------------------------

__attribute__((target("avx2,fma"))) inline float exp1(float x_init) {
  float x = x_init * 1.442695f;
  float ipart = static_cast<float>(std::floor(static_cast<double>(x) + 0.5));
  float fpart = x - ipart;
  x = 1.535336188319500e-4f;
  x = __builtin_fmaf(x, fpart, 1.339887440266574e-3f);
  x = __builtin_fmaf(x, fpart, 9.618437357674640e-3f);
  x = __builtin_fmaf(x, fpart, 5.550332471162809e-2f);
  x = __builtin_fmaf(x, fpart, 2.402264791363012e-1f);
  x = __builtin_fmaf(x, fpart, 6.931472028550421e-1f);
  x = __builtin_fmaf(x, fpart, 1.000000000000000f);
  int32_t epart = static_cast<int32_t>(
      static_cast<uint32_t>(static_cast<int32_t>(ipart) + 127) << 23);
  float two;
  std::memcpy(&two, &epart, sizeof two);
  float result = std::isnan(x_init) ? x_init : two * x;
  result = x_init > 88.0f ? INFINITY : result;
  result = x_init < -88.0f ? 0.0f : result;
  return result;
}

__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x_init) {
  __m256 x = _mm256_mul_ps(x_init, _mm256_set1_ps(1.442695f));
  // floor(x + 0.5) is taken in double (x + 0.5 with a double 0.5), then rounded to float
  const __m256d half = _mm256_set1_pd(0.5);
  __m256d lo = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), half);
  __m256d hi = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), half);
  lo = _mm256_round_pd(lo, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  hi = _mm256_round_pd(hi, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256 ipart = _mm256_insertf128_ps(
      _mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  __m256 fpart = _mm256_sub_ps(x, ipart);
  x = _mm256_set1_ps(1.535336188319500e-4f);
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(1.339887440266574e-3f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(9.618437357674640e-3f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(5.550332471162809e-2f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(2.402264791363012e-1f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(6.931472028550421e-1f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(1.000000000000000f));
  __m256i epart = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvttps_epi32(ipart), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(_mm256_castsi256_ps(epart), x);
  result = _mm256_blendv_ps(result, x_init, _mm256_cmp_ps(x_init, x_init, _CMP_UNORD_Q));
  result = _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY),
                            _mm256_cmp_ps(x_init, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(),
                            _mm256_cmp_ps(x_init, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
  return result;
}

__attribute__((target("avx2,fma"))) void exp_span(const float* in, float* out, size_t n) {
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(out + j, exp8(_mm256_loadu_ps(in + j)));
  }
  for (; j < n; j++) {
    out[j] = exp1(in[j]);
  }
}

// --- softmax rows, in place in OUT (which holds the rows' scores) ------------------------

// exp(x - max) of one row, in place: MLX's first loop and the exponentials of its second.
__attribute__((target("avx2,fma"))) void exp_row(float* out, size_t m) {
  // The maximum: MLX keeps the first NaN it meets; a NaN anywhere makes every value NaN-borne,
  // so rows with a NaN take the scalar loop, which repeats MLX's order exactly. (The sign of a
  // zero maximum cannot matter: x - 0 and x - -0 differ only for x = -0, and exp(+-0) is 1.)
  bool has_nan = false;
  float maximum = -INFINITY;
  size_t j = 0;
  if (m >= 8) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    __m256 vnan = _mm256_setzero_ps();
    for (; j + 8 <= m; j += 8) {
      __m256 v = _mm256_loadu_ps(out + j);
      vmax = _mm256_max_ps(v, vmax);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    has_nan = _mm256_movemask_ps(vnan) != 0;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    for (float lane : lanes) {
      maximum = lane > maximum ? lane : maximum;
    }
  }
  for (; j < m; j++) {
    has_nan |= std::isnan(out[j]);
    maximum = out[j] > maximum ? out[j] : maximum;
  }
  if (has_nan) {  // MLX's loop: maximum(a, b) returns a NaN a, else the larger (b on ties)
    maximum = -INFINITY;
    for (j = 0; j < m; j++) {
      float a = out[j];
      maximum = std::isnan(a) ? a : (a > maximum ? a : maximum);
    }
  }
  const __m256 vm = _mm256_set1_ps(maximum);
  for (j = 0; j + 8 <= m; j += 8) {
    _mm256_storeu_ps(out + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(out + j), vm)));
  }
  for (; j < m; j++) {
    out[j] = exp1(out[j] - maximum);
  }
}

// Each row's sum, left to right from 0 as MLX's scalar loop adds: eight rows' additions are
// interleaved (eight independent chains), each row's own order unchanged.
__attribute__((target("avx2,fma"))) void row_sums(float* const* rows, size_t g, size_t m,
                                                  float* sums) {
  if (g == 8) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f,
          s7 = 0.0f;
    for (size_t j = 0; j < m; j++) {
      s0 = s0 + rows[0][j];
      s1 = s1 + rows[1][j];
      s2 = s2 + rows[2][j];
      s3 = s3 + rows[3][j];
      s4 = s4 + rows[4][j];
      s5 = s5 + rows[5][j];
      s6 = s6 + rows[6][j];
      s7 = s7 + rows[7][j];
    }
    const float all[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    std::memcpy(sums, all, sizeof all);
    return;
  }
  for (size_t i = 0; i < g; i++) {
    float normalizer = 0.0f;
    for (size_t j = 0; j < m; j++) {
      normalizer = normalizer + rows[i][j];
    }
    sums[i] = normalizer;
  }
}

// MLX's last loop: 1 / sum, and every value times it.
__attribute__((target("avx2,fma"))) void scale_row(float* out, size_t m, float sum) {
  const float normalizer = 1 / sum;
  const __m256 vn = _mm256_set1_ps(normalizer);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(out + j), vn));
  }
  for (; j < m; j++) {
    out[j] = out[j] * normalizer;
  }
}

// The element offset of row R (an index over every axis but the last) in an array of SHAPE
// with STRIDES.
int64_t row_offset(size_t r, const mx::Shape& shape, const mx::Strides& strides) {
  int64_t offset = 0;
  for (int ax = static_cast<int>(shape.size()) - 2; ax >= 0; ax--) {
    int64_t dim = shape[ax];
    offset += static_cast<int64_t>(r % dim) * strides[ax];
    r /= dim;
  }
  return offset;
}

// Row R's scores into ROW: where(mask, x, finfo.min) (MASK may be null), read with strides.
__attribute__((target("avx2,fma"))) void load_row(const mx::array& x, const mx::array* mask,
                                                  size_t r, float* row) {
  const size_t m = x.shape().back();
  const bool dense = x.flags().row_contiguous;
  const int64_t xs = x.strides().back();
  const float* src = x.data<float>() + (dense ? static_cast<int64_t>(r * m)
                                              : row_offset(r, x.shape(), x.strides()));
  if (mask != nullptr) {
    const bool* mp = mask->data<bool>() + row_offset(r, mask->shape(), mask->strides());
    const int64_t ms = mask->strides().back();
    size_t j = 0;
    if (xs == 1 && ms == 1) {  // bools are stored as bytes 0 / 1
      const __m256 masked = _mm256_set1_ps(kMasked);
      for (; j + 8 <= m; j += 8) {
        __m128i bytes;
        std::memcpy(&bytes, mp + j, 8);
        __m256i keep = _mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setzero_si256());
        _mm256_storeu_ps(row + j, _mm256_blendv_ps(masked, _mm256_loadu_ps(src + j),
                                                   _mm256_castsi256_ps(keep)));
      }
    }
    for (; j < m; j++) {
      row[j] = mp[j * ms] ? src[j * xs] : kMasked;
    }
  } else if (xs == 1) {
    if (row != src) {
      std::memcpy(row, src, m * sizeof(float));
    }
  } else {
    for (size_t j = 0; j < m; j++) {
      row[j] = src[j * xs];
    }
  }
}

void softmax_all(const mx::array& x, const mx::array* mask, mx::array& out) {
  const size_t m = x.shape().back();
  const size_t rows = m == 0 ? 0 : x.size() / m;
  float* op = out.data<float>();
  for (size_t r0 = 0; r0 < rows; r0 += 8) {
    const size_t g = std::min<size_t>(8, rows - r0);
    float* group[8];
    float sums[8];
    for (size_t i = 0; i < g; i++) {
      group[i] = op + (r0 + i) * m;
      load_row(x, mask, r0 + i, group[i]);
      exp_row(group[i], m);
    }
    row_sums(group, g, m, sums);
    for (size_t i = 0; i < g; i++) {
      scale_row(group[i], m, sums[i]);
    }
  }
}

// --- the primitive -----------------------------------------------------------------------

class FmaSoftmax : public mx::UnaryPrimitive {
 public:
  FmaSoftmax(mx::Stream stream, bool exp_only) : mx::UnaryPrimitive(stream), exp_only_(exp_only) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const mx::array& x = inputs[0];
    const bool reuse = x.is_donatable() && x.flags().row_contiguous && x.data_size() == x.size();
    if (reuse) {
      out.copy_shared_buffer(x);
    } else {
      out.set_data(mx::allocator::malloc(out.nbytes()));
    }
    auto& encoder = mx::cpu::get_command_encoder(stream());
    encoder.set_input_array(x);
    if (inputs.size() > 1) {
      encoder.set_input_array(inputs[1]);
    }
    encoder.set_output_array(out);
    if (exp_only_) {  // element-wise over the data buffer (row-contiguous input: see exp())
      encoder.dispatch([x = mx::array::unsafe_weak_copy(x),
                        out = mx::array::unsafe_weak_copy(out)]() mutable {
        exp_span(x.data<float>(), out.data<float>(), x.size());
      });
      return;
    }
    if (inputs.size() > 1) {
      encoder.dispatch([x = mx::array::unsafe_weak_copy(x),
                        mask = mx::array::unsafe_weak_copy(inputs[1]),
                        out = mx::array::unsafe_weak_copy(out)]() mutable {
        softmax_all(x, &mask, out);
      });
    } else {
      encoder.dispatch([x = mx::array::unsafe_weak_copy(x),
                        out = mx::array::unsafe_weak_copy(out)]() mutable {
        softmax_all(x, nullptr, out);
      });
    }
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[FmaSoftmax] CPU only");
  }

  const char* name() const override {
    return exp_only_ ? "FmaExp" : "FmaSoftmax";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    return exp_only_ == static_cast<const FmaSoftmax&>(other).exp_only_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  bool exp_only_;
};

bool usable(const mx::array& x, const mx::Stream& s) {
  return x.dtype() == mx::float32 && s.device == mx::Device::cpu && x.ndim() >= 1 &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

mx::array fma_softmax(const mx::array& x, std::optional<mx::array> mask) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  if (!usable(x, stream) || (mask && (mask->dtype() != mx::bool_ || mask->ndim() > x.ndim()))) {
    mx::array scores = mask ? mx::where(*mask, x, mx::array(kMasked, x.dtype()), s) : x;
    return mx::softmax(scores, -1, true, s);
  }
  std::vector<mx::array> inputs{x};
  if (mask) {
    inputs.push_back(mx::broadcast_to(*mask, x.shape(), s));
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<FmaSoftmax>(stream, false),
                   std::move(inputs));
}

mx::array fma_exp(const mx::array& x) {
  mx::StreamOrDevice s = {};
  mx::Stream stream = mx::to_stream(s);
  if (!usable(x, stream)) {
    return mx::exp(x, s);
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<FmaSoftmax>(stream, true),
                   {mx::contiguous(x, false, s)});
}

// mx.fast.scaled_dot_product_attention's CPU fallback (mlx/fast.cpp), op for op, with the
// Select and the Softmax as one FmaSoftmax. For float32 4-D inputs and a boolean mask or none.
// ADDEND (K8V4's value center), when given, is added to the output by the last product itself
// (AddMM: sgemm with beta 1 sums onto it), one node instead of a product and an add; it has
// that product's shape, (B, Hkv, rep, 1, D) with grouped query heads, else (B, H, 1, D), so it
// needs no broadcast node. The bits are the product's plus the addend while OpenBLAS sums over
// the keys in one block (up to GEMM_Q keys, or its small-matrix kernel); past that the addend
// joins the first block's sum (float rounding apart).
mx::array fma_sdpa(const mx::array& queries, const mx::array& keys, const mx::array& values,
                   float scale, std::optional<mx::array> mask, std::optional<mx::array> addend) {
  mx::StreamOrDevice s = {};
  const int hq = queries.shape(1);
  const int hkv = keys.shape(1);
  const int rep = hq / hkv;
  if (!usable(queries, mx::to_stream(s))) {
    mx::array out = mx::fast::scaled_dot_product_attention(queries, keys, values, scale,
                                                           mask ? "array" : "", mask, {}, false, s);
    if (!addend) {
      return out;
    }
    return mx::add(out, rep > 1 && addend->ndim() == 5 ? mx::flatten(*addend, 1, 2, s) : *addend, s);
  }
  mx::array q = mx::multiply(mx::array(scale, queries.dtype()), queries, s);
  mx::array k = keys;
  mx::array v = values;
  if (rep > 1) {
    q = mx::unflatten(q, 1, {hkv, rep}, s);
    k = mx::expand_dims(k, 2, s);
    v = mx::expand_dims(v, 2, s);
  }
  mx::array scores = mx::matmul(q, mx::swapaxes(k, -1, -2, s), s);
  std::optional<mx::array> m;
  if (mask) {
    mx::Shape shape = queries.shape();
    shape.back() = keys.shape(-2);
    m = mx::broadcast_to(*mask, shape, s);
    if (rep > 1 && m->ndim() >= 3) {
      m = m->shape(-3) == 1 ? mx::expand_dims(*m, -3, s) : mx::unflatten(*m, -3, {hkv, rep}, s);
    }
  }
  mx::array probs = fma_softmax(scores, m);
  mx::array out = addend ? mx::addmm(*addend, probs, v, 1.0f, 1.0f, s) : mx::matmul(probs, v, s);
  return rep > 1 ? mx::flatten(out, 1, 2, s) : out;
}

}  // namespace

#ifndef BUILT_FOR_MLX
#define BUILT_FOR_MLX "unknown"
#endif
// The MLX version these headers came from: the loader compares it with the running one before
// passing any array (a C++ layout change would not raise, it would crash); build.py reads it too.
const char* const kBuiltFor = "rapid-mlx built for mlx " BUILT_FOR_MLX;

NB_MODULE(_fma_softmax, m) {
  m.attr("built_for") = BUILT_FOR_MLX;
  m.attr("_tag") = kBuiltFor;
  m.doc() = "MLX's CPU softmax (precise, last axis) and exp for float32, same bits, inline FMA";
  m.def("softmax", &fma_softmax, nb::arg("x"), nb::arg("mask") = nb::none(),
        "softmax(where(mask, x, finfo.min), -1, precise=True) with MLX's CPU bits");
  m.def("sdpa", &fma_sdpa, nb::arg("queries"), nb::arg("keys"), nb::arg("values"),
        nb::arg("scale"), nb::arg("mask") = nb::none(), nb::arg("addend") = nb::none(),
        "mx.fast.scaled_dot_product_attention's CPU fallback with FmaSoftmax: the same bits "
        "(plus ADDEND, summed onto by the last product)");
  m.def("exp", &fma_exp, nb::arg("x"),
        "mx.exp with MLX's CPU bits");
  m.def("fma_cpu", []() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); },
        "True when this CPU runs the FMA kernels (else the functions are MLX's own ops)");
}
