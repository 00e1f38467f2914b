// Dense float helpers shared by the SampleAttention, AnchorAttention and Saap index builders and
// by kernels/calibration: a cache-blocked SGEMM (AVX2/FMA micro-kernel, scalar fallback) and
// loaders that turn rows of a Q/K tensor into float tiles.
//
// All functions are single-threaded and thread-compatible (no shared state); callers
// parallelise over independent tiles, except ParallelSgemm which splits one product itself.
#ifndef SPATTN_KERNELS_BUILDERS_TILE_MATH_H_
#define SPATTN_KERNELS_BUILDERS_TILE_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/problem.h"

namespace spattn {

// C[m, n] = (accumulate ? C : 0) + A[m, k] * B[k, n]. Row-major with leading dimensions
// lda, ldb, ldc (in elements). m, n or k may be 0.
void Sgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb,
           bool accumulate, float* c, int64_t ldc);

// Same product, split over CpuThreads() threads by blocks of rows (or of columns when m is
// small). For the calibration's large products; the builders call Sgemm from their own tasks.
void ParallelSgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb,
                   bool accumulate, float* c, int64_t ldc);

// dst[c, r] = src[r, c] for an r_count x c_count block; ld* are leading dimensions.
void Transpose(const float* src, int64_t ld_src, int r_count, int c_count, float* dst,
               int64_t ld_dst);

// Reads `count` consecutive tokens of head `head` of `t` (sequence starting at token `tok0`,
// rows `first` .. first + count - 1) as float into dst[count, head_dim] (row stride head_dim).
void LoadRows(const AttentionProblem& p, const TokenTensor& t, int64_t tok0, int head, int first,
              int count, float* dst);

// Like LoadRows but writes the transpose dst[head_dim, ld] (column j = token first + j): the B
// operand layout of Sgemm for Q . K^T.
void LoadRowsTransposed(const AttentionProblem& p, const TokenTensor& t, int64_t tok0, int head,
                        int first, int count, float* dst, int64_t ld, std::vector<float>* scratch);

// exp(x) for x <= 88 with relative error < 2e-7 (underflows to 0 below -87); branch-free so
// loops over it vectorise. Interpolates 2^f on [0, 1) at the 7 Chebyshev nodes.
inline float ExpApprox(float x) {
  x = std::min(88.f, std::max(-87.f, x));
  const float t = x * 1.44269504088896341f;
  const float fi = std::floor(t);
  const float f = t - fi;
  float p = 2.1865784801363908e-4f;
  p = p * f + 1.239133183006765e-3f;
  p = p * f + 9.684186310822214e-3f;
  p = p * f + 5.548063019645923e-2f;
  p = p * f + 2.4023045441236401e-1f;
  p = p * f + 6.931469327588616e-1f;
  p = p * f + 1.0000000025307454f;
  const int32_t bits = (static_cast<int32_t>(fi) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_TILE_MATH_H_
