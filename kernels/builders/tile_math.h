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

// exp(x) for x <= 88 with relative error < 3e-7 (clamped to exp(-87) below -87); branch-free so
// loops over it vectorise. Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, then a degree-7
// Taylor polynomial for e^r (truncation < 2e-9) scaled by 2^n.
inline float ExpApprox(float x) {
  x = std::min(88.f, std::max(-87.f, x));
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = std::fma(-n, 0.693359375f, x);  // ln2 split in two: exact product with n
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.f / 5040;
  p = std::fma(p, r, 1.f / 720);
  p = std::fma(p, r, 1.f / 120);
  p = std::fma(p, r, 1.f / 24);
  p = std::fma(p, r, 1.f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.f);
  p = std::fma(p, r, 1.f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_TILE_MATH_H_
