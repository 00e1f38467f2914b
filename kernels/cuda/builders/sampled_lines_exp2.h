// The exhaustive check behind the GPU sampled_lines pass 3 (sampled_lines.cu): its exp2
// (ex2.approx.ftz) must be non-decreasing over every float for the threshold on an entry's raw
// product q . k to equal the per-entry mass test. Only code under kernels/cuda includes this.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_

#include <cuda_runtime_api.h>

namespace spattn {
namespace cuda {

// Pairs of neighbouring floats x < y (every non-NaN float, -inf to +inf) with Exp2(x) > Exp2(y)
// into *inversions (0: non-decreasing). Synchronous, on the current device (tests).
cudaError_t CountSampledLinesExp2Inversions(unsigned long long* inversions);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_EXP2_H_
