// The exhaustive check behind the GPU sampled_lines pass 3 (sampled_lines.cu): its exp2
// (ex2.approx.ftz) must be non-decreasing over every float for the threshold on an entry's raw
// product q . k to equal the per-entry mass test; the wgmma products check; the passes'
// occupancy query. Only code under kernels/cuda includes this.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spattn {
namespace cuda {

// Pairs of neighbouring floats x < y (every non-NaN float, -inf to +inf) with Exp2(x) > Exp2(y)
// into *inversions (0: non-decreasing). Synchronous, on the current device (tests).
cudaError_t CountSampledLinesExp2Inversions(unsigned long long* inversions);

// The passes' products by wgmma (SlKnobs::wgmma, the default on compute capability 9.0) against
// mma.sync's (the passes before session 26): `tiles` tiles of 64 query rows x 64 keys of
// pseudo-random values (`seed`; magnitudes 2^-8 .. 2^8 and beyond, outliers, zeros, cancelling
// sums) of head_dim 64 or 128, bf16 or fp16; *mismatches = products whose bits differ (two NaNs
// are equal), *compared = products compared. The same products bit for bit give the same index.
// Synchronous, on the current device; cudaErrorNotSupported unless it is compute capability 9.0.
cudaError_t CountSampledLinesTileMismatches(int head_dim, bool bf16, int tiles, uint64_t seed,
                                            unsigned long long* mismatches,
                                            unsigned long long* compared);

// The CTAs per SM that pass `pass` (1-3) of a build of this head_dim and dtype whose largest group
// spans `hist_blocks` query blocks keeps resident on the current device, for the instance the
// build launches under the current knobs (SampledLinesKnobs: wgmma, ctas1 / ctas2 / ctas3) ->
// *ctas; the CTAs per SM the knobs ask that pass's registers to be capped for (4 or 5; 5 falls back to 4's
// instance where the shared memory keeps fewer) -> *capped_for.
cudaError_t SampledLinesPassCtas(int pass, int head_dim, bool bf16, int hist_blocks, int* ctas,
                                 int* capped_for);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_
