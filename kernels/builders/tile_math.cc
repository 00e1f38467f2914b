#include "kernels/builders/tile_math.h"

#include <algorithm>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/parallel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SPATTN_TILE_MATH_AVX2 1
#endif

namespace spattn {
namespace {

constexpr int kMr = 6;    // rows per micro-tile
constexpr int kNr = 16;   // columns per micro-tile (two 8-float vectors)
constexpr int kKc = 256;  // depth of one packed panel
constexpr int kNc = 512;  // columns of one packed panel (kKc * kNc floats = 512 KiB: L2)

// Packs B[kc, nc] (leading dimension ldb) into slivers of kNr columns: sliver s holds
// packed[s * kc * kNr + p * kNr + j] = B[p, s * kNr + j], zero-padded past nc.
void PackB(const float* b, int64_t ldb, int kc, int nc, float* packed) {
  const int slivers = (nc + kNr - 1) / kNr;
  for (int s = 0; s < slivers; ++s) {
    const int j0 = s * kNr;
    const int w = std::min(kNr, nc - j0);
    float* dst = packed + static_cast<int64_t>(s) * kc * kNr;
    for (int p = 0; p < kc; ++p) {
      const float* src = b + p * ldb + j0;
      float* d = dst + p * kNr;
      if (w == kNr) {
        std::memcpy(d, src, kNr * sizeof(float));
      } else {
        for (int j = 0; j < w; ++j) d[j] = src[j];
        for (int j = w; j < kNr; ++j) d[j] = 0.f;
      }
    }
  }
}

// c[mr, nr] (+)= a[mr, kc] * packed sliver; mr <= kMr, nr <= kNr.
template <int MR>
void MicroKernel(int kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                 int nr, bool accumulate) {
#ifdef SPATTN_TILE_MATH_AVX2
  __m256 acc0[MR], acc1[MR];
  for (int r = 0; r < MR; ++r) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
  for (int p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + p * kNr);
    const __m256 b1 = _mm256_loadu_ps(bp + p * kNr + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
  if (nr == kNr) {
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      if (accumulate) {
        acc0[r] = _mm256_add_ps(acc0[r], _mm256_loadu_ps(cr));
        acc1[r] = _mm256_add_ps(acc1[r], _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, acc0[r]);
      _mm256_storeu_ps(cr + 8, acc1[r]);
    }
    return;
  }
  alignas(32) float tmp[kNr];
  for (int r = 0; r < MR; ++r) {
    _mm256_store_ps(tmp, acc0[r]);
    _mm256_store_ps(tmp + 8, acc1[r]);
    float* cr = c + r * ldc;
    for (int j = 0; j < nr; ++j) cr[j] = accumulate ? cr[j] + tmp[j] : tmp[j];
  }
#else
  float acc[MR][kNr] = {};
  for (int p = 0; p < kc; ++p) {
    const float* b = bp + p * kNr;
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * lda + p];
      for (int j = 0; j < kNr; ++j) acc[r][j] += av * b[j];
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < nr; ++j) cr[j] = accumulate ? cr[j] + acc[r][j] : acc[r][j];
  }
#endif
}

void MicroKernelAny(int mr, int kc, const float* a, int64_t lda, const float* bp, float* c,
                    int64_t ldc, int nr, bool accumulate) {
  switch (mr) {
    case 6:
      return MicroKernel<6>(kc, a, lda, bp, c, ldc, nr, accumulate);
    case 5:
      return MicroKernel<5>(kc, a, lda, bp, c, ldc, nr, accumulate);
    case 4:
      return MicroKernel<4>(kc, a, lda, bp, c, ldc, nr, accumulate);
    case 3:
      return MicroKernel<3>(kc, a, lda, bp, c, ldc, nr, accumulate);
    case 2:
      return MicroKernel<2>(kc, a, lda, bp, c, ldc, nr, accumulate);
    default:
      return MicroKernel<1>(kc, a, lda, bp, c, ldc, nr, accumulate);
  }
}

}  // namespace

void Sgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb,
           bool accumulate, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    }
    return;
  }
  thread_local std::vector<float> packed;
  const int nc_max = std::min(n, kNc);
  const size_t need = static_cast<size_t>((nc_max + kNr - 1) / kNr) * kNr * std::min(k, kKc);
  if (packed.size() < need) packed.resize(need);
  for (int j0 = 0; j0 < n; j0 += kNc) {
    const int nc = std::min(kNc, n - j0);
    for (int p0 = 0; p0 < k; p0 += kKc) {
      const int kc = std::min(kKc, k - p0);
      const bool acc = accumulate || p0 > 0;
      PackB(b + p0 * ldb + j0, ldb, kc, nc, packed.data());
      for (int i0 = 0; i0 < m; i0 += kMr) {
        const int mr = std::min(kMr, m - i0);
        for (int s = 0; s * kNr < nc; ++s) {
          const int nr = std::min(kNr, nc - s * kNr);
          MicroKernelAny(mr, kc, a + i0 * lda + p0, lda,
                         packed.data() + static_cast<int64_t>(s) * kc * kNr,
                         c + i0 * ldc + j0 + s * kNr, ldc, nr, acc);
        }
      }
    }
  }
}

void ParallelSgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb,
                   bool accumulate, float* c, int64_t ldc) {
  const int threads = CpuThreads();
  const int64_t work = static_cast<int64_t>(m) * n * k;
  if (threads <= 1 || work < (int64_t{1} << 20)) {
    Sgemm(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
    return;
  }
  if (m >= 4 * kMr * threads) {
    // Row blocks: a multiple of the micro-tile height, about 4 per thread.
    int rows = (m + 4 * threads - 1) / (4 * threads);
    rows = (rows + kMr - 1) / kMr * kMr;
    const int tasks = (m + rows - 1) / rows;
    ParallelFor(tasks, [&](int64_t t) {
      const int i0 = static_cast<int>(t) * rows;
      Sgemm(std::min(rows, m - i0), n, k, a + i0 * lda, lda, b, ldb, accumulate, c + i0 * ldc, ldc);
    });
    return;
  }
  int cols = (n + 2 * threads - 1) / (2 * threads);
  cols = (cols + kNr - 1) / kNr * kNr;
  const int tasks = (n + cols - 1) / cols;
  ParallelFor(tasks, [&](int64_t t) {
    const int j0 = static_cast<int>(t) * cols;
    Sgemm(m, std::min(cols, n - j0), k, a, lda, b + j0, ldb, accumulate, c + j0, ldc);
  });
}

void Transpose(const float* src, int64_t ld_src, int r_count, int c_count, float* dst,
               int64_t ld_dst) {
  constexpr int kT = 32;  // cache tile
  for (int r0 = 0; r0 < r_count; r0 += kT) {
    const int r1 = std::min(r_count, r0 + kT);
    for (int c0 = 0; c0 < c_count; c0 += kT) {
      const int c1 = std::min(c_count, c0 + kT);
      for (int r = r0; r < r1; ++r) {
        for (int cc = c0; cc < c1; ++cc) dst[cc * ld_dst + r] = src[r * ld_src + cc];
      }
    }
  }
}

void LoadRows(const AttentionProblem& p, const TokenTensor& t, int64_t tok0, int head, int first,
              int count, float* dst) {
  const int es = DTypeSize(p.dtype);
  const char* base = static_cast<const char*>(t.data);
  for (int i = 0; i < count; ++i) {
    const int64_t tok = tok0 + first + i;
    const char* src = base + (tok * t.token_stride + int64_t{head} * t.head_stride) * es;
    ToFloat(src, p.dtype, p.head_dim, dst + static_cast<int64_t>(i) * p.head_dim);
  }
}

void LoadRowsTransposed(const AttentionProblem& p, const TokenTensor& t, int64_t tok0, int head,
                        int first, int count, float* dst, int64_t ld, std::vector<float>* scratch) {
  const int d = p.head_dim;
  constexpr int kChunk = 64;
  if (scratch->size() < static_cast<size_t>(kChunk) * d) scratch->resize(kChunk * d);
  for (int j0 = 0; j0 < count; j0 += kChunk) {
    const int n = std::min(kChunk, count - j0);
    LoadRows(p, t, tok0, head, first + j0, n, scratch->data());
    Transpose(scratch->data(), d, n, d, dst + j0, ld);
  }
}

}  // namespace spattn
