// Per-row sums (gemv.cpp's matmul_rows): each row of x summed as if alone, 8V weight rows at a
// time, with one helper thread for the upper half of a large product. Included by gemv.cpp only.
#pragma once

#include "gemv_tiles.h"
#include "helper_thread.h"

namespace {

// any number of rows of x, each summed as if it were alone (one FMA chain per K block: the
// 1-row order of gemv_tiles.h). Weight rows go 8 V at a time: each K block of them is
// transposed once into TW (element k of 8 V rows in V registers), then every tile of 4 rows of
// x runs over it with one broadcast per V FMAs; the last N % 8V rows of W take a pass of 8
// (V = 1) and row1.
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

}  // namespace
