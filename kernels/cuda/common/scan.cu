// Scans and conversions shared by the GPU index builders and the sparse kernel's schedule.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "kernels/cuda/common/scan.h"

namespace spattn {
namespace cuda {
namespace {

constexpr int kScanThreads = 1024;
constexpr int kScanItems = 4;

// Exclusive prefix sums of data[0, n) in place by one CTA; with kTotal data[n] gets the total.
// kReverse sums from the end: data[i] = sum of data[j] for j > i.
template <typename V, bool kReverse, bool kTotal>
__global__ void __launch_bounds__(kScanThreads) ScanKernel(V* data, int64_t n) {
  using Scan = cub::BlockScan<V, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ V carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kScanThreads * kScanItems) {
    V items[kScanItems];
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const int64_t i = base + threadIdx.x * kScanItems + j;
      items[j] = i < n ? data[kReverse ? n - 1 - i : i] : V(0);
    }
    V chunk_total = 0;
    Scan(temp).ExclusiveSum(items, items, chunk_total);
    const V c = carry;
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const int64_t i = base + threadIdx.x * kScanItems + j;
      if (i < n) data[kReverse ? n - 1 - i : i] = items[j] + c;
    }
    __syncthreads();
    if (threadIdx.x == 0) carry = c + chunk_total;
    __syncthreads();
  }
  if (kTotal && threadIdx.x == 0) data[n] = carry;
}

__global__ void NarrowKernel(const int64_t* in, int64_t n, int32_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<int32_t>(in[i]);
  }
}

}  // namespace

cudaError_t LaunchExclusiveScan64(int64_t* data, int64_t n, cudaStream_t stream) {
  ScanKernel<long long, false, true>
      <<<1, kScanThreads, 0, stream>>>(reinterpret_cast<long long*>(data), n);
  return cudaGetLastError();
}

cudaError_t LaunchExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream) {
  ScanKernel<int, false, true><<<1, kScanThreads, 0, stream>>>(data, n);
  return cudaGetLastError();
}

cudaError_t LaunchReverseExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream) {
  ScanKernel<int, true, false><<<1, kScanThreads, 0, stream>>>(data, n);
  return cudaGetLastError();
}

size_t DeviceScanTempBytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                static_cast<int32_t*>(nullptr), static_cast<int>(n));
  return bytes;
}

cudaError_t LaunchDeviceExclusiveScan32(const int32_t* in, int32_t* out, int64_t n, void* temp,
                                        size_t temp_bytes, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return cub::DeviceScan::ExclusiveSum(temp, temp_bytes, in, out, static_cast<int>(n), stream);
}

cudaError_t LaunchNarrow64(const int64_t* in, int64_t n, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  NarrowKernel<<<static_cast<int>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(in, n, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
