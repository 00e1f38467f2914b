// Scans and conversions shared by the GPU index builders and the sparse kernel's schedule.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "kernels/cuda/common/scan.h"

namespace spattn {
namespace cuda {
namespace {

constexpr int kScanThreads = 1024;
constexpr int kScanItems = 4;
constexpr int kWideItems = 8;  // ScanWideKernel: a thread's consecutive entries per chunk

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

// One 16-byte vector as 2 int64 or 4 int32 entries and back (register arrays indexed by constants).
__device__ __forceinline__ void Unpack(int4 x, long long* v) {
  v[0] = (static_cast<long long>(static_cast<unsigned>(x.y)) << 32) | static_cast<unsigned>(x.x);
  v[1] = (static_cast<long long>(static_cast<unsigned>(x.w)) << 32) | static_cast<unsigned>(x.z);
}
__device__ __forceinline__ void Unpack(int4 x, int* v) {
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
}
__device__ __forceinline__ int4 Pack(const long long* v) {
  return make_int4(static_cast<int>(v[0]), static_cast<int>(v[0] >> 32), static_cast<int>(v[1]),
                   static_cast<int>(v[1] >> 32));
}
__device__ __forceinline__ int4 Pack(const int* v) { return make_int4(v[0], v[1], v[2], v[3]); }

// ScanKernel's result by one CTA in fewer steps (session 37; SPATTN_SCAN_WIDE, default on):
// 8 entries per thread (a sampled_lines 32K build's 8192 index rows in one chunk instead of two),
// cub's warp-scans block scan (a shuffle tree; the raking default walks 32 values per lane
// serially at 1024 threads), the carry in registers (every thread has the chunk's total: one
// barrier per chunk instead of two), the next chunk's loads issued before this chunk's scan, and
// forward chunks read as 16-byte vectors. Integer sums: the same values in any order.
template <typename V, bool kReverse, bool kTotal>
__global__ void __launch_bounds__(kScanThreads) ScanWideKernel(V* data, int64_t n) {
  using Scan = cub::BlockScan<V, kScanThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int64_t kChunk = static_cast<int64_t>(kScanThreads) * kWideItems;
  static_assert(kWideItems * sizeof(V) % 16 == 0, "16-byte vectors per thread");
  constexpr int kVecs = kWideItems * sizeof(V) / 16;
  const bool vec_ok = !kReverse && (reinterpret_cast<uintptr_t>(data) & 15u) == 0;
  auto load = [&](int64_t base, V (&items)[kWideItems]) {
    const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * kWideItems;
    if (vec_ok && i0 + kWideItems <= n) {
      const int4* src = reinterpret_cast<const int4*>(data + i0);
#pragma unroll
      for (int v = 0; v < kVecs; ++v) Unpack(src[v], items + v * (16 / sizeof(V)));
    } else {
#pragma unroll
      for (int j = 0; j < kWideItems; ++j) {
        const int64_t i = i0 + j;
        items[j] = i < n ? data[kReverse ? n - 1 - i : i] : V(0);
      }
    }
  };
  V carry = 0;
  V items[kWideItems], next[kWideItems];
  if (n > 0) load(0, items);
  for (int64_t base = 0; base < n; base += kChunk) {
    if (base + kChunk < n) load(base + kChunk, next);
    V chunk_total = 0;
    Scan(temp).ExclusiveSum(items, items, chunk_total);
    const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * kWideItems;
#pragma unroll
    for (int j = 0; j < kWideItems; ++j) items[j] += carry;
    if (vec_ok && i0 + kWideItems <= n) {
      int4* dst = reinterpret_cast<int4*>(data + i0);
#pragma unroll
      for (int v = 0; v < kVecs; ++v) dst[v] = Pack(items + v * (16 / sizeof(V)));
    } else {
#pragma unroll
      for (int j = 0; j < kWideItems; ++j) {
        const int64_t i = i0 + j;
        if (i < n) data[kReverse ? n - 1 - i : i] = items[j];
      }
    }
    carry += chunk_total;
#pragma unroll
    for (int j = 0; j < kWideItems; ++j) items[j] = next[j];
    __syncthreads();  // temp's next use
  }
  if (kTotal && threadIdx.x == 0) data[n] = carry;
}

__global__ void NarrowKernel(const int64_t* in, int64_t n, int32_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<int32_t>(in[i]);
  }
}

std::atomic<int> g_scan_form{-1};

bool Wide() {
  const int forced = g_scan_form.load(std::memory_order_relaxed);
  if (forced >= 0) return forced != 0;
  static const bool wide = [] {
    const char* v = std::getenv("SPATTN_SCAN_WIDE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wide;
}

template <typename V, bool kReverse, bool kTotal>
cudaError_t LaunchScan(V* data, int64_t n, cudaStream_t stream) {
  if (Wide()) {
    ScanWideKernel<V, kReverse, kTotal><<<1, kScanThreads, 0, stream>>>(data, n);
  } else {
    ScanKernel<V, kReverse, kTotal><<<1, kScanThreads, 0, stream>>>(data, n);
  }
  return cudaGetLastError();
}

}  // namespace

void SetScanFormForTesting(int form) { g_scan_form.store(form, std::memory_order_relaxed); }

cudaError_t LaunchExclusiveScan64(int64_t* data, int64_t n, cudaStream_t stream) {
  return LaunchScan<long long, false, true>(reinterpret_cast<long long*>(data), n, stream);
}

cudaError_t LaunchExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream) {
  return LaunchScan<int, false, true>(data, n, stream);
}

cudaError_t LaunchReverseExclusiveScan32(int32_t* data, int64_t n, cudaStream_t stream) {
  return LaunchScan<int, true, false>(data, n, stream);
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
