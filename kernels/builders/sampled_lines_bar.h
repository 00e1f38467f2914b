// sampled_lines' step-3 bins, its diagonal cost bar and the sampled rows' spans, shared by the CPU
// builder (sampled_lines.cc) and its GPU twin (kernels/cuda/builders/sampled_lines.cu's classify
// kernel): one definition compiled for the host and, under nvcc, for the device. No dependencies,
// so that nvcc and plain C++ builds include it alike.
#ifndef SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_BAR_H_
#define SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_BAR_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPATTN_SL_HD __host__ __device__ inline
#else
#define SPATTN_SL_HD inline
#endif

namespace spattn {

// Step 3's bins: SampledLinesBin(m) in [0, kSampledLinesBins) for m in (0, 1].
inline constexpr int kSampledLinesBinFloor = 759;  // (fp32 bits >> 20) of 2^-32, minus one
inline constexpr int kSampledLinesBins = 258;      // bin of 1.0 = 1016 - 759, plus one

// The lower edge of bin `thr` (in [0, kSampledLinesBins)): the float with bits
// (thr + kSampledLinesBinFloor) << 20.
SPATTN_SL_HD float SampledLinesBinEdge(int thr) {
  const uint32_t bits = static_cast<uint32_t>(thr + kSampledLinesBinFloor) << 20;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float edge;
  std::memcpy(&edge, &bits, sizeof(edge));
  return edge;
#endif
}

// Step 2's cost test: the bar D(o) must exceed for a block of `rows` rows whose threshold bin
// is `thr`: cost x rows x the bin's lower edge (0 when cost is 0 or nothing is kept). A range
// costs `rows` keys per row where a column costs one; a line's keys average D(o) / rows over the
// block's rows, so the range pays when that reaches the block's kept-entry mass. Products only
// (left to right), so host and device round alike.
SPATTN_SL_HD float SampledLinesDiagonalBar(float cost, int rows, int thr) {
  if (!(cost > 0.f) || thr < 0 || thr >= kSampledLinesBins) return 0.f;
  return cost * static_cast<float>(rows) * SampledLinesBinEdge(thr);
}

// Step 2's diagonal floor of a sequence of `k_len` keys, as a mean mass: `floor` uniform shares
// (1 / k_len), or `short_floor` of them where k_len < kSampledLinesShortKeys and short_floor > 0
// (SampledLinesParams::short_floor). One division, so host and device round alike.
inline constexpr int kSampledLinesShortKeys = 65536;
SPATTN_SL_HD float SampledLinesFloor(float floor, float short_floor, int k_len) {
  const float f = k_len < kSampledLinesShortKeys && short_floor > 0.f ? short_floor : floor;
  return f / static_cast<float>(k_len);
}

// Step 1's sampled row i of a block of n rows (0 <= i < s = min(rows_per_block, n)), relative
// to the block's first row: SampledLinesRows without the duplicates' removal.
SPATTN_SL_HD int SampledLinesRowAt(int i, int n, int s, bool edge_rows) {
  const int64_t at = edge_rows && s > 1 ? int64_t{i} * (n - 1) / (s - 1)
                                        : (2 * int64_t{i} + 1) * n / (2 * int64_t{s});
  return static_cast<int>(at);
}

// clip_diagonals: the rows [*lo, *hi] (relative to the block's first row) that the sampled row
// `rel` of a block of n rows stands for -- those nearer to it than to the sampled rows before
// and after it (ties to the earlier one), the block's first / last row at the ends.
SPATTN_SL_HD void SampledLinesRowSpan(int rel, int n, int rows_per_block, bool edge_rows, int* lo,
                                      int* hi) {
  const int s = rows_per_block < n ? rows_per_block : n;
  int prev = -1, next = n;
  for (int i = 0; i < s; ++i) {
    const int at = SampledLinesRowAt(i, n, s, edge_rows);
    if (at < rel && at > prev) prev = at;
    if (at > rel && at < next) next = at;
  }
  *lo = prev < 0 ? 0 : (prev + rel) / 2 + 1;
  *hi = next >= n ? n - 1 : (rel + next) / 2;
}

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_BAR_H_
