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
// batch). worker/cpu_gemv.py enables it only when it matches mx.matmul bit for bit on the
// model's shapes at worker start. Build: worker/native/build.py.
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

namespace {

constexpr int kMaxRows = 4;
constexpr int kOrderHaswell = 0;   // Zen / Haswell cores: the orders above
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

// any number of rows of x, each summed as if it were alone (one FMA chain per K block: the
// 1-row order above). Weight rows go 8 V at a time: each K block of them is transposed once into
// TW (element k of 8 V rows in V registers), then every tile of 4 rows of x runs over it with
// one broadcast per V FMAs; the last N % 8V rows of W take a pass of 8 (V = 1) and row1.
constexpr int kWide = 2;  // V of the main pass

template <int V, int M>
__attribute__((target("avx2,fma"))) void blockv(const float* x, const float* tw, float* out,
                                                int n0, int n, int k, int s, int e,
                                                const float* next) {
  __m256 a[M][V];
#pragma GCC unroll 8
  for (int m = 0; m < M; m++)
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) a[m][v] = _mm256_setzero_ps();
  for (int kk = s; kk < e; kk++) {
    if (next != nullptr && ((kk - s) & 15) == 0) {
      // the next pass's rows of this block, one line per row per 16 k, while the FMAs run:
      // the transposition that reads them then finds them in cache
#pragma GCC unroll 24
      for (int r = 0; r < 8 * V; r++)
        _mm_prefetch((const char*)(next + (size_t)r * k + kk), _MM_HINT_T1);
    }
    const float* t = tw + (size_t)(kk - s) * 8 * V;
    __m256 wv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) wv[v] = _mm256_load_ps(t + 8 * v);
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) {
      const __m256 xv = _mm256_broadcast_ss(x + (size_t)m * k + kk);
#pragma GCC unroll 4
      for (int v = 0; v < V; v++) a[m][v] = _mm256_fmadd_ps(wv[v], xv, a[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; m++) {  // c = c + block, as rows8 adds its blocks
    float* o = out + (size_t)m * n + n0;
#pragma GCC unroll 4
    for (int v = 0; v < V; v++)
      _mm256_storeu_ps(o + 8 * v, _mm256_add_ps(_mm256_loadu_ps(o + 8 * v), a[m][v]));
  }
}

// rows N0..N0+8V-1 of W, columns S..E-1, into TW[(k - S) * 8V + row]
template <int V>
__attribute__((target("avx2,fma"))) void transposev(const float* w, float* tw, int n0, int n,
                                                    int k, int s, int e) {
  const int main_end = s + ((e - s) / 4) * 4;
  const size_t width = 8 * V;
  for (int g = 0; g < V; g++) {
    for (int kk = s; kk < main_end; kk += 4) {
      const float* p = w + (size_t)(n0 + 8 * g) * k + kk;
      __m256 col[4];
      columns(p, k, col);
      float* t = tw + (size_t)(kk - s) * width + 8 * g;
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) _mm256_store_ps(t + j * width, col[j]);
    }
    for (int kk = main_end; kk < e; kk++) {
      const float* p = w + (size_t)(n0 + 8 * g) * k + kk;
      float* t = tw + (size_t)(kk - s) * width + 8 * g;
      for (int r = 0; r < 8; r++) t[r] = p[(size_t)r * k];
    }
  }
}

// weight rows N0..HI-1 (of N) in passes of 8 V rows while they last; returns the first row
// not done
template <int V>
int passes(const float* x, const float* w, float* out, float* tw, int rows, int n0, int hi,
           int n, int k, const std::vector<int>& cuts) {
  using BlockFn = void (*)(const float*, const float*, float*, int, int, int, int, int,
                           const float*);
  constexpr BlockFn fns[5] = {nullptr, blockv<V, 1>, blockv<V, 2>, blockv<V, 3>, blockv<V, 4>};
  for (; n0 + 8 * V <= hi; n0 += 8 * V) {
    for (int r = 0; r < rows; r++) std::fill_n(out + (size_t)r * n + n0, 8 * V, 0.0f);
    for (size_t b = 0; b + 1 < cuts.size(); b++) {
      transposev<V>(w, tw, n0, n, k, cuts[b], cuts[b + 1]);
      for (int r0 = 0; r0 < rows; r0 += 4) {
        const int m = rows - r0 < 4 ? rows - r0 : 4;
        const float* next = r0 == 0 && n0 + 16 * V <= hi ? w + (size_t)(n0 + 8 * V) * k : nullptr;
        fns[m](x + (size_t)r0 * k, tw, out + (size_t)r0 * n, n0, n, k, cuts[b], cuts[b + 1],
               next);
      }
    }
  }
  return n0;
}

// weight rows LO..HI-1 of a per-row product on the regular path (one chain per K block)
void per_row_range(const float* x, const float* w, float* out, int rows, int n, int k,
                   const std::vector<int>& cuts, int lo, int hi) {
  switch (rows) {  // 1-3 rows: gemv_all's one-chain tiles (faster there, the same order)
    case 1: run_rows<1, false>(x, w, out, n, k, cuts, lo, hi); return;
    case 2: run_rows<2, false>(x, w, out, n, k, cuts, lo, hi); return;
    case 3: run_rows<3, false>(x, w, out, n, k, cuts, lo, hi); return;
    default: break;
  }
  int longest = 0;
  for (size_t b = 0; b + 1 < cuts.size(); b++) longest = std::max(longest, cuts[b + 1] - cuts[b]);
  // the transposition buffer: one per thread, kept and grown, not allocated per product
  thread_local std::unique_ptr<float, decltype(&std::free)> buffer(nullptr, &std::free);
  thread_local size_t held = 0;
  const size_t want = 8 * kWide * (size_t)longest;
  if (want > held) {
    buffer.reset(static_cast<float*>(std::aligned_alloc(32, sizeof(float) * want)));
    if (!buffer) throw std::bad_alloc();
    held = want;
  }
  float* tw = buffer.get();
  int n0 = passes<kWide>(x, w, out, tw, rows, lo, hi, n, k, cuts);
  n0 = passes<1>(x, w, out, tw, rows, n0, hi, n, k, cuts);  // a last group of 8 weight rows
  for (; n0 < hi; n0++) {  // the last N % 8, one row of x at a time (row1's order is per row)
    for (int r = 0; r < rows; r++) {
      row1<1, false>(x + (size_t)r * k, w, out + (size_t)r * n, n0, n, k, cuts);
    }
  }
}

// One helper thread that takes the upper half of a large product's weight rows while the
// stream's thread sums the lower half (outputs are independent: the same bits). Decode steps of
// one row leave the second core idle, and a large LM head is memory-bound.
class Helper {
 public:
  static Helper& get() {
    static Helper* helper = new Helper();  // never destroyed: its thread lives with the process
    return *helper;
  }

  // JOB on the helper while CALLER runs here; false (nothing run) when the helper is busy
  bool split(const std::function<void()>& job, const std::function<void()>& caller) {
    std::unique_lock<std::mutex> busy(use_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      failed_ = nullptr;
    }
    wake_.notify_one();
    std::exception_ptr mine;
    try {
      caller();
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return job_ == nullptr; });
    if (mine) std::rethrow_exception(mine);
    if (failed_) std::rethrow_exception(failed_);
    return true;
  }

 private:
  Helper() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return job_ != nullptr; });
      const std::function<void()>* job = job_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        (*job)();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      failed_ = failed;
      job_ = nullptr;
      done_.notify_all();
    }
  }

  std::mutex use_;  // one split at a time (another caller sums its product alone)
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr failed_;
};

constexpr int64_t kSplitMin = int64_t{1} << 22;  // weight elements of a product worth splitting

void per_row_all(const float* x, const float* w, float* out, int rows, int n, int k, int q,
                 int order, int threads) {
  const bool skx = order == kOrderSkylakex;
  if (skx && small_permit(n, 1, k)) {  // a lone row of this product takes the small kernel
    small_all<true>(x, w, out, rows, n, k);
    return;
  }
  const std::vector<int> cuts = blocks(k, q, skx ? 16 : 8);
  if (threads > 1 && static_cast<int64_t>(n) * k >= kSplitMin) {
    const int mid = (n / 2) / (8 * kWide) * (8 * kWide);
    const std::function<void()> upper = [&] { per_row_range(x, w, out, rows, n, k, cuts, mid, n); };
    const std::function<void()> lower = [&] { per_row_range(x, w, out, rows, n, k, cuts, 0, mid); };
    if (Helper::get().split(upper, lower)) return;
  }
  per_row_range(x, w, out, rows, n, k, cuts, 0, n);
}

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
