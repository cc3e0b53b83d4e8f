// The few-row sums in OpenBLAS's order (gemv.cpp's matmul_t): K blocks, FMA chains per tile,
// and SkylakeX's small TN kernel. Included by gemv.cpp only.
#pragma once

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

namespace {

constexpr int kMaxRows = 4;
constexpr int kOrderHaswell = 0;   // Zen / Haswell cores: the orders gemv.cpp describes
constexpr int kOrderSkylakex = 1;  // SkylakeX cores: one chain per tile, the small kernel

// OpenBLAS's SkylakeX permit for its small TN kernel (x @ w.T is TN in its column-major terms)
bool small_permit(int n, int rows, int k) {
  return static_cast<double>(n) * rows * k <= 1e6 && static_cast<int64_t>(n) * rows <= 1200 &&
         k >= 32;
}

// driver/level3.c's K blocks: min_l = q while >= 2q remain, else half rounded up to U when > q
std::vector<int> blocks(int k, int q, int unroll) {
  std::vector<int> cuts{0};
  int ls = 0;
  while (ls < k) {
    int ml = k - ls;
    if (ml >= 2 * q) {
      ml = q;
    } else if (ml > q) {
      ml = ((ml / 2 + unroll - 1) / unroll) * unroll;
    }
    ls += ml;
    cuts.push_back(ls);
  }
  return cuts;
}

// elements P[0..3] of 8 weight rows K apart (rows i and i + 4 in one register's halves, then an
// in-lane 4x4 transpose): COL[j] holds element j of rows 0..7
__attribute__((target("avx2,fma"))) inline void columns(const float* p, int k, __m256 col[4]) {
  const __m256 r0 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
                                         _mm_loadu_ps(p + 4 * (size_t)k), 1);
  const __m256 r1 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + k)),
                                         _mm_loadu_ps(p + 5 * (size_t)k), 1);
  const __m256 r2 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 2 * (size_t)k)),
                                         _mm_loadu_ps(p + 6 * (size_t)k), 1);
  const __m256 r3 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 3 * (size_t)k)),
                                         _mm_loadu_ps(p + 7 * (size_t)k), 1);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  col[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  col[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  col[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  col[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

// G groups of 8 weight rows from n0, M rows of x (TWO: the 4-column tile's two chains)
template <int M, int G, bool TWO>
__attribute__((target("avx2,fma"))) void rows8(const float* x, const float* w, float* out,
                                               int n0, int n, int k,
                                               const std::vector<int>& cuts) {
  __m256 c[G][M];
  #pragma GCC unroll 8
  for (int g = 0; g < G; g++)
    #pragma GCC unroll 8
    for (int m = 0; m < M; m++) c[g][m] = _mm256_setzero_ps();
  for (size_t b = 0; b + 1 < cuts.size(); b++) {
    const int s = cuts[b], e = cuts[b + 1];
    const int main_end = s + ((e - s) / 8) * 8;
    __m256 ev[G][M], od[G][M];
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++)
      #pragma GCC unroll 8
      for (int m = 0; m < M; m++) ev[g][m] = od[g][m] = _mm256_setzero_ps();
    for (int kk = s; kk < main_end; kk += 4) {
      // rows i and i + 4 of a group in one register's halves: an in-lane 4x4 transpose gives
      // element kk + j of rows 0..7 (k steps of 4 from s: j's parity is kk - s + j's)
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        const float* p = w + (size_t)(n0 + 8 * g) * k + kk;
        __m256 col[4];
        columns(p, k, col);
        #pragma GCC unroll 8
        for (int j = 0; j < 4; j++) {
          #pragma GCC unroll 8
          for (int m = 0; m < M; m++) {
            const __m256 xv = _mm256_broadcast_ss(x + (size_t)m * k + kk + j);
            if (TWO && (j & 1)) {
              od[g][m] = _mm256_fmadd_ps(col[j], xv, od[g][m]);
            } else {
              ev[g][m] = _mm256_fmadd_ps(col[j], xv, ev[g][m]);
            }
          }
        }
      }
    }
    for (int kk = main_end; kk < e; kk++) {  // the block's tail: on the (even) chain
      #pragma GCC unroll 8
      for (int g = 0; g < G; g++) {
        const float* p = w + (size_t)(n0 + 8 * g) * k + kk;
        const __m256 col = _mm256_setr_ps(p[0], p[k], p[2 * k], p[3 * k], p[4 * k], p[5 * k],
                                          p[6 * k], p[7 * k]);
        #pragma GCC unroll 8
        for (int m = 0; m < M; m++) {
          ev[g][m] = _mm256_fmadd_ps(col, _mm256_broadcast_ss(x + (size_t)m * k + kk), ev[g][m]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++)
      #pragma GCC unroll 8
      for (int m = 0; m < M; m++) {
        const __m256 r = TWO ? _mm256_add_ps(ev[g][m], od[g][m]) : ev[g][m];
        c[g][m] = _mm256_add_ps(c[g][m], r);
      }
  }
  #pragma GCC unroll 8
  for (int g = 0; g < G; g++)
    #pragma GCC unroll 8
    for (int m = 0; m < M; m++) _mm256_storeu_ps(out + (size_t)m * n + n0 + 8 * g, c[g][m]);
}

// one weight row (the last N % 8), the same order in scalar FMAs
template <int M, bool TWO>
__attribute__((target("avx2,fma"))) void row1(const float* x, const float* w, float* out, int nn,
                                              int n, int k, const std::vector<int>& cuts) {
  const float* wr = w + (size_t)nn * k;
  for (int m = 0; m < M; m++) {
    const float* xr = x + (size_t)m * k;
    float c = 0.0f;
    for (size_t b = 0; b + 1 < cuts.size(); b++) {
      const int s = cuts[b], e = cuts[b + 1];
      const int main_end = s + ((e - s) / 8) * 8;
      float ev = 0.0f, od = 0.0f;
      for (int kk = s; kk < e; kk++) {
        if (TWO && kk < main_end && ((kk - s) & 1)) {
          od = __builtin_fmaf(wr[kk], xr[kk], od);
        } else {
          ev = __builtin_fmaf(wr[kk], xr[kk], ev);
        }
      }
      c = c + (TWO ? ev + od : ev);
    }
    out[(size_t)m * n + nn] = c;
  }
}

// weight rows LO..HI-1 (all by default) of N
template <int M, bool TWO>
void run_rows(const float* x, const float* w, float* out, int n, int k,
              const std::vector<int>& cuts, int lo = 0, int hi = -1) {
  if (hi < 0) hi = n;
  int n0 = lo;
  // two groups of 8 rows of W at a time measured faster for 3 rows of x only (1-2 rows: one
  // group, 1.2-1.7x faster than two; 4 rows' two chains: one group keeps them in registers)
  if (M == 3) {
    for (; n0 + 16 <= hi; n0 += 16) rows8<M, 2, TWO>(x, w, out, n0, n, k, cuts);
  }
  for (; n0 + 8 <= hi; n0 += 8) rows8<M, 1, TWO>(x, w, out, n0, n, k, cuts);
  for (; n0 < hi; n0++) row1<M, false>(x, w, out, n0, n, k, cuts);
}

// the small TN kernel's sums of four 16-lane accumulators (one per weight row): a 4x4
// transposition inside each 128-bit quarter, the lanes added pairwise, then the quarters
__attribute__((target("avx512f"))) inline __m128 reduce4(__m512 a, __m512 b, __m512 c,
                                                          __m512 d) {
  const __m512 r0 = _mm512_unpacklo_ps(a, b), r1 = _mm512_unpackhi_ps(a, b);
  const __m512 r2 = _mm512_unpacklo_ps(c, d), r3 = _mm512_unpackhi_ps(c, d);
  const __m512 t0 = _mm512_shuffle_ps(r0, r2, 0x44), t1 = _mm512_shuffle_ps(r0, r2, 0xEE);
  const __m512 t2 = _mm512_shuffle_ps(r1, r3, 0x44), t3 = _mm512_shuffle_ps(r1, r3, 0xEE);
  const __m512 s = _mm512_add_ps(_mm512_add_ps(t0, t1), _mm512_add_ps(t2, t3));
  const __m128 q0 = _mm512_extractf32x4_ps(s, 0), q1 = _mm512_extractf32x4_ps(s, 1);
  const __m128 q2 = _mm512_extractf32x4_ps(s, 2), q3 = _mm512_extractf32x4_ps(s, 3);
  return _mm_add_ps(_mm_add_ps(q0, q1), _mm_add_ps(q2, q3));
}

// R weight rows from I times M rows of x, summed as the small TN kernel sums them: a tile of 4
// weight rows adds with reduce4; its edge rows (N % 4) with reduce4 too when they meet a tile of
// 4 rows of x (SGEMM; not when each row is summed as alone), else _mm512_reduce_add_ps each
template <int R, int M, bool ALONE>
__attribute__((target("avx512f"))) void small_tile(const float* x, const float* w, float* out,
                                                   int i, int n, int k) {
  __m512 acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int m = 0; m < M; m++) acc[r][m] = _mm512_setzero_ps();
  const int k16 = k & ~15;
  int kk = 0;
  for (; kk < k16; kk += 16) {
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_ps(w + (size_t)(i + r) * k + kk);
#pragma GCC unroll 4
    for (int m = 0; m < M; m++) {
      const __m512 xv = _mm512_loadu_ps(x + (size_t)m * k + kk);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
  if (kk < k) {  // masked lanes load zeros: their chains add 0 * 0
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - kk)) - 1);
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) wv[r] = _mm512_maskz_loadu_ps(mask, w + (size_t)(i + r) * k + kk);
#pragma GCC unroll 4
    for (int m = 0; m < M; m++) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + (size_t)m * k + kk);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; m++) {
    float* o = out + (size_t)m * n + i;
    if constexpr (R == 4) {
      _mm_storeu_ps(o, reduce4(acc[0][m], acc[1][m], acc[2][m], acc[3][m]));
    } else if constexpr (M != 4 || ALONE) {
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) o[r] = _mm512_reduce_add_ps(acc[r][m]);
    }
  }
  if constexpr (R < 4 && M == 4 && !ALONE) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      float four[4];
      _mm_storeu_ps(four, reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
#pragma GCC unroll 4
      for (int m = 0; m < 4; m++) out[(size_t)m * n + i + r] = four[m];
    }
  }
}

template <int M, bool ALONE>
void small_rows(const float* x, const float* w, float* out, int n, int k) {
  int i = 0;
  for (; i + 4 <= n; i += 4) small_tile<4, M, ALONE>(x, w, out, i, n, k);
  for (; i + 2 <= n; i += 2) small_tile<2, M, ALONE>(x, w, out, i, n, k);
  for (; i < n; i++) small_tile<1, M, ALONE>(x, w, out, i, n, k);
}

// rows of x through the small kernel's order (ALONE: any number, each summed as one row alone;
// else at most 4, sgemm's bits)
template <bool ALONE>
void small_all(const float* x, const float* w, float* out, int rows, int n, int k) {
  int r0 = 0;
  for (; r0 + 4 <= rows; r0 += 4) {
    small_rows<4, ALONE>(x + (size_t)r0 * k, w, out + (size_t)r0 * n, n, k);
  }
  const float* xr = x + (size_t)r0 * k;
  float* o = out + (size_t)r0 * n;
  switch (rows - r0) {
    case 1: small_rows<1, ALONE>(xr, w, o, n, k); break;
    case 2: small_rows<2, ALONE>(xr, w, o, n, k); break;
    case 3: small_rows<3, ALONE>(xr, w, o, n, k); break;
    default: break;
  }
}

// X (M, K) row-contiguous, W (N, K) row-contiguous -> OUT (M, N)
void gemv_all(const float* x, const float* w, float* out, int rows, int n, int k, int q,
              int order) {
  const bool skx = order == kOrderSkylakex;
  if (skx && small_permit(n, rows, k)) {
    small_all<false>(x, w, out, rows, n, k);
    return;
  }
  const std::vector<int> cuts = blocks(k, q, skx ? 16 : 8);
  switch (rows) {
    case 1: run_rows<1, false>(x, w, out, n, k, cuts); break;
    case 2: run_rows<2, false>(x, w, out, n, k, cuts); break;
    case 3: run_rows<3, false>(x, w, out, n, k, cuts); break;
    case 4:
      if (skx) {
        run_rows<4, false>(x, w, out, n, k, cuts);
      } else {
        run_rows<4, true>(x, w, out, n, k, cuts);
      }
      break;
    default: throw std::runtime_error("[Gemv] more than 4 rows");
  }
}

}  // namespace
