// Device-wide exclusive scans (one CTA: the arrays are per index row, at most a few million) and
// int64 -> int32 narrowing of CSR offsets, shared by the GPU index builders. Launchers return
// cudaError_t and only enqueue on `stream`.
#ifndef SPATTN_KERNELS_CUDA_COMMON_SCAN_H_
#define SPATTN_KERNELS_CUDA_COMMON_SCAN_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spattn {
namespace cuda {

// data[0, n) -> exclusive prefix sums in place, data[n] = total (data has n + 1 entries).
cudaError_t LaunchExclusiveScan64(int64_t* data, int64_t n, cudaStream_t stream);
cudaError_t LaunchExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream);
// out[i] = (int32) in[i] for i in [0, n) (CSR offsets, checked < 2^31 by the caller).
cudaError_t LaunchNarrow64(const int64_t* in, int64_t n, int32_t* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_SCAN_H_
