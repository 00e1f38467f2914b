// The exclusive scans of kernels/cuda (GPU index builders, the sparse kernel's schedule) and
// int64 -> int32 narrowing of CSR offsets. One-CTA scans in place (the arrays are per index row
// or per cost bucket, at most a few million entries) and cub's multi-CTA device scan into a
// separate array (the line builders' CSR offsets). Launchers return cudaError_t and only enqueue
// on `stream`.
#ifndef SPATTN_KERNELS_CUDA_COMMON_SCAN_H_
#define SPATTN_KERNELS_CUDA_COMMON_SCAN_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace spattn {
namespace cuda {

// data[0, n) -> exclusive prefix sums in place, data[n] = total (data has n + 1 entries).
cudaError_t LaunchExclusiveScan64(int64_t* data, int64_t n, cudaStream_t stream);
cudaError_t LaunchExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream);
// data[i] = sum of data[j] for j in (i, n), in place; no total written.
cudaError_t LaunchReverseExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream);

// out[0, n) = exclusive prefix sums of in[0, n) (cub::DeviceScan, many CTAs); temp of
// DeviceScanTempBytes(n) bytes, carved by the caller.
size_t DeviceScanTempBytes(int64_t n);
cudaError_t LaunchDeviceExclusiveScan32(const int32_t* in, int32_t* out, int64_t n, void* temp,
                                        size_t temp_bytes, cudaStream_t stream);

// out[i] = (int32) in[i] for i in [0, n) (CSR offsets, checked < 2^31 by the caller).
cudaError_t LaunchNarrow64(const int64_t* in, int64_t n, int32_t* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_SCAN_H_
