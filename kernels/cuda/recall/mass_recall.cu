#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/common/lower_bound.h"
#include "kernels/cuda/recall/mass_recall.h"

namespace spattn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSlots = kRecallSlotsPerItem;
constexpr int kChunk = kRecallChunkKeys;
constexpr int kWords = kChunk / 32;

__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }

// NaN -> -inf (no mass), +inf -> the largest float (as the host estimate's sanitizing).
__device__ __forceinline__ float Sanitize(float x) {
  if (isnan(x)) return -CUDART_INF_F;
  if (x == CUDART_INF_F) return FLT_MAX;
  return x;
}

// Sets bits [a, b) of a chunk bitmap (chunk-relative key numbers).
__device__ void SetSpan(uint32_t* bits, int a, int b) {
  while (a < b) {
    const int w = a >> 5, lo = a & 31;
    const int n = min(32 - lo, b - a);
    const uint32_t mask = n == 32 ? 0xffffffffu : (((1u << n) - 1u) << lo);
    atomicOr(bits + w, mask);
    a += n;
  }
}

__device__ float BlockMax(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0;
  for (int w = 0; w < kWarps; ++w) s += scratch[w];
  return s;
}

// Lower bound of `key` in sorted a[lo, hi).
// The first column of [lo, hi) (a row's sorted columns) at or above `key`; lo and hi are offsets
// into the whole col_idx, up to 2^31 - 1 (LowerBoundBy's midpoint does not overflow there).
__device__ int LowerBound(const int32_t* a, int lo, int hi, int key) {
  return LowerBoundBy(lo, hi, [a, key](int i) { return a[i] < key; });
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    MassRecallKernel(RecallTensors t, SparseIndexView idx, const RecallItem* items, float* partials,
                     int chunks) {
  constexpr int kPer = D / 32;  // elements of a key per lane
  __shared__ float scores[kSlots][kChunk];
  __shared__ uint32_t cover[kSlots][kWords];
  __shared__ float qs[kSlots][D];
  __shared__ float scratch[kWarps];
  __shared__ int col_lo[kSlots], col_hi[kSlots];
  const RecallItem it = items[blockIdx.x];
  const int c = blockIdx.y;
  const int key0 = c * kChunk;
  const int n = min(kChunk, it.limit - key0);
  if (n <= 0) {
    if (threadIdx.x < it.num_slots) {
      float* out = partials + (static_cast<int64_t>(it.out[threadIdx.x]) * chunks + c) * 3;
      out[0] = -CUDART_INF_F;
      out[1] = 0.f;
      out[2] = 0.f;
    }
    return;
  }
  const T* q = static_cast<const T*>(t.q);
  const T* k = static_cast<const T*>(t.k);
  for (int i = threadIdx.x; i < kSlots * D; i += kThreads) {
    const int s = i / D, e = i - s * D;
    float v = 0.f;
    if (s < it.num_slots) {
      v = ToF(q[it.q_token * t.q_token_stride + it.head[s] * t.q_head_stride + e]) * t.scale_log2;
    }
    qs[s][e] = v;
  }
  for (int i = threadIdx.x; i < kSlots * kWords; i += kThreads) (&cover[0][0])[i] = 0u;
  if (threadIdx.x < it.num_slots) {
    const int r = it.index_row[threadIdx.x];
    const int lo = idx.col_indptr[r], hi = idx.col_indptr[r + 1];
    col_lo[threadIdx.x] = LowerBound(idx.col_idx, lo, hi, key0);
    col_hi[threadIdx.x] = LowerBound(idx.col_idx, lo, hi, key0 + n);
  }
  __syncthreads();
  // Which keys of the chunk each slot's index row selects.
  for (int s = 0; s < it.num_slots; ++s) {
    const int r = it.index_row[s];
    for (int e = idx.range_indptr[r] + threadIdx.x; e < idx.range_indptr[r + 1]; e += kThreads) {
      const int a = max(idx.range_start[e], key0);
      const int b = min(idx.range_start[e] + idx.range_len[e], key0 + n);
      if (a < b) SetSpan(cover[s], a - key0, b - key0);
    }
    for (int e = col_lo[s] + threadIdx.x; e < col_hi[s]; e += kThreads) {
      const int j = idx.col_idx[e] - key0;
      atomicOr(&cover[s][j >> 5], 1u << (j & 31));
    }
  }
  // Scores: one warp per key, the lanes split the head dim.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float qr[kSlots][kPer];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) qr[s][e] = qs[s][lane * kPer + e];
  }
  const T* kb = k + static_cast<int64_t>(it.k_base + key0) * t.k_token_stride +
                static_cast<int64_t>(it.kv_head) * t.k_head_stride + lane * kPer;
  for (int j = warp; j < n; j += kWarps) {
    const T* kj = kb + static_cast<int64_t>(j) * t.k_token_stride;
    float kf[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) kf[e] = ToF(kj[e]);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (s >= it.num_slots) break;  // warp-uniform
      float acc = 0.f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc = fmaf(qr[s][e], kf[e], acc);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) scores[s][j] = Sanitize(acc);
    }
  }
  __syncthreads();
  for (int s = 0; s < it.num_slots; ++s) {
    float m = -CUDART_INF_F;
    for (int j = threadIdx.x; j < n; j += kThreads) m = fmaxf(m, scores[s][j]);
    m = BlockMax(m, scratch);
    float all = 0.f, sel = 0.f;
    if (m != -CUDART_INF_F) {
      for (int j = threadIdx.x; j < n; j += kThreads) {
        const float w = exp2f(scores[s][j] - m);
        all += w;
        if ((cover[s][j >> 5] >> (j & 31)) & 1u) sel += w;
      }
    }
    all = BlockSum(all, scratch);
    sel = BlockSum(sel, scratch);
    if (threadIdx.x == 0) {
      float* out = partials + (static_cast<int64_t>(it.out[s]) * chunks + c) * 3;
      out[0] = m;
      out[1] = all;
      out[2] = sel;
    }
  }
}

template <typename T>
cudaError_t LaunchT(const RecallTensors& t, const SparseIndexView& idx, const RecallItem* items,
                    int num_items, int chunks, float* partials, cudaStream_t stream) {
  const dim3 grid(num_items, chunks);
  if (t.head_dim == 128) {
    MassRecallKernel<T, 128><<<grid, kThreads, 0, stream>>>(t, idx, items, partials, chunks);
  } else if (t.head_dim == 64) {
    MassRecallKernel<T, 64><<<grid, kThreads, 0, stream>>>(t, idx, items, partials, chunks);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMassRecall(const RecallTensors& t, const SparseIndexView& idx,
                             const RecallItem* items, int num_items, int chunks, float* partials,
                             cudaStream_t stream) {
  if (num_items <= 0 || chunks <= 0) return cudaSuccess;
  if (chunks > 65535) return cudaErrorInvalidValue;
  switch (t.dtype) {
    case DType::kBF16:
      return LaunchT<__nv_bfloat16>(t, idx, items, num_items, chunks, partials, stream);
    case DType::kF16:
      return LaunchT<__half>(t, idx, items, num_items, chunks, partials, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace spattn
