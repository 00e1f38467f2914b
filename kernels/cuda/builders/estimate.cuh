// Device helpers shared by the GPU builders of vertical_slash, block_sparse and flex_prefill (the
// GPU side of kernels/builders/estimate.cc): logit sanitizing, tensor loads, the pooled
// estimates. Selection (top-k by count or by mass) is common/topk.cuh, the tensor-core wrappers
// common/mma.cuh. Header-only device code.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ESTIMATE_CUH_
#define SPATTN_KERNELS_CUDA_BUILDERS_ESTIMATE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/builders/merged_kernels.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/topk.cuh"

namespace spattn {
namespace cuda {
namespace merged {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int CeilDivD(int a, int b) { return (a + b - 1) / b; }

// estimate.cc's SanitizeLogit: NaN -> -inf, +inf -> the largest float.
__device__ __forceinline__ float SanitizeLogit(float x) {
  if (isnan(x)) return -CUDART_INF_F;
  if (x == CUDART_INF_F) return FLT_MAX;
  return x;
}

// Ordered keys and the CTA-wide radix selections: common/topk.cuh.
using namespace topk;  // NOLINT: the selection vocabulary of every merged builder

// mma.sync / ldmatrix: common/mma.cuh.
using detail::LdMatrixX4;
using detail::Mma;

// Element of a [tokens, heads, d] tensor as float.
template <typename T>
__device__ __forceinline__ float LoadAsFloat(const T* base, int64_t token, int64_t token_stride,
                                             int64_t head, int64_t head_stride, int c) {
  return Mma<T>::ToFloat(base[token * token_stride + head * head_stride + c]);
}

// ---- Pooled estimates (block_sparse, flex_prefill): fp32 means and dot products in the CPU's
// order (MeanPool sums rows in order; ColumnDots runs one FMA chain over the head dimension).

// Mean of each of `rows` consecutive query blocks of `bs` rows (the last may be partial), times
// `scale`, into qs [rows][d].
template <typename T, int kThreads>
__device__ __forceinline__ void PoolQueries(const T* q, int64_t token_stride, int64_t head,
                                            int64_t head_stride, int q_begin, int ql,
                                            int first_block, int rows, int bs, int d, float scale,
                                            float* qs) {
  for (int idx = threadIdx.x; idx < rows * d; idx += kThreads) {
    const int r = idx / d, c = idx - r * d;
    const int b0 = (first_block + r) * bs;
    const int b1 = min(ql, b0 + bs);
    float acc = 0.f;
    for (int t = b0; t < b1; ++t) {
      acc = __fadd_rn(acc, LoadAsFloat(q, static_cast<int64_t>(q_begin) + t, token_stride, head,
                                       head_stride, c));
    }
    const float inv = __fdiv_rn(1.f, static_cast<float>(b1 - b0));
    qs[idx] = __fmul_rn(__fmul_rn(acc, inv), scale);
  }
}

// Floats per row of PooledDots' key chunk: d + 4 keeps rows 16-byte aligned for float4 reads,
// and 8 consecutive rows (a float4 phase of 8 lanes) start 4 banks apart: no bank conflicts.
__host__ __device__ constexpr int PooledKeyPitch(int d) { return d + 4; }

// For r < rows (at most 4 * kThreads / 64) and kb < kb_end: out(r, kb, logit) with
// logit = SanitizeLogit(fma chain over c of qs[r][c] * pk[kb][c]). ks: smem
// [64][PooledKeyPitch(d)]; qs 16-byte aligned, d a multiple of 4. The chain runs over c in order
// (the CPU's ColumnDots); its operands come four at a time (float4 shared loads: one load of the
// key and one per row for four FMAs, instead of one load per FMA plus the key's). kPrefetch:
// the next chunk's global loads are issued before the current chunk's products (kPer float4
// registers more; the same values reach ks), so their latency hides behind the FMAs.
template <int kThreads, bool kPrefetch = false, class Out>
__device__ __forceinline__ void PooledDots(const float* qs, int rows, int d, const float* pk,
                                           int kb_end, float* ks, Out out) {
  constexpr int kGroups = kThreads / 64;
  const int kbi = threadIdx.x & 63, rsub = threadIdx.x >> 6;
  const int pitch = PooledKeyPitch(d);
  // The chunk's 64 pooled keys are contiguous: float4 loads, all issued before the stores.
  constexpr int kPer = 64 * 128 / 4 / kThreads;  // up to d = 128
  static_assert(64 * 128 / 4 % kThreads == 0, "whole vectors per thread");
  const int vecs = 64 * d / 4;
  float4 v[kPer];
  auto load = [&](int kb0) {
    const float4* src = reinterpret_cast<const float4*>(pk + static_cast<int64_t>(kb0) * d);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = static_cast<int>(threadIdx.x) + u * kThreads;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (idx < vecs && kb0 + idx * 4 / d < kb_end) v[u] = src[idx];
    }
  };
  if (kPrefetch && kb_end > 0) load(0);
  for (int kb0 = 0; kb0 < kb_end; kb0 += 64) {
    __syncthreads();
    if (!kPrefetch) load(kb0);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int idx = static_cast<int>(threadIdx.x) + u * kThreads;
      if (idx < vecs) {
        const int b = idx * 4 / d, c = idx * 4 - b * d;
        *reinterpret_cast<float4*>(ks + b * pitch + c) = v[u];
      }
    }
    __syncthreads();
    if (kPrefetch && kb0 + 64 < kb_end) load(kb0 + 64);
    if (kb0 + kbi < kb_end) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float* kr = ks + kbi * pitch;
      for (int c = 0; c < d; c += 4) {
        const float4 kc = *reinterpret_cast<const float4*>(kr + c);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int r = rsub + u * kGroups;
          if (r < rows) {
            const float4 qc = *reinterpret_cast<const float4*>(qs + r * d + c);
            acc[u] = fmaf(qc.x, kc.x, acc[u]);
            acc[u] = fmaf(qc.y, kc.y, acc[u]);
            acc[u] = fmaf(qc.z, kc.z, acc[u]);
            acc[u] = fmaf(qc.w, kc.w, acc[u]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int r = rsub + u * kGroups;
        if (r < rows) out(r, kb0 + kbi, SanitizeLogit(acc[u]));
      }
    }
  }
  __syncthreads();
}

// The group loop of the pooled row kernels (block_sparse, flex_prefill's query-aware rows).
// kGlobal = false: one group per CTA, its large arrays in shared memory (`smem`). kGlobal: the
// CTAs walk the groups, the large arrays in the CTA's global slot of `slot_bytes` in `scratch`
// (sequences of more key blocks than shared memory holds). body(group, big) per group, the group
// by value (a reference into global memory is reloaded after every global store).
template <bool kGlobal, class Body>
__device__ __forceinline__ void ForEachRowGroup(const RowGroup* groups, int num_groups,
                                                unsigned char* smem, unsigned char* scratch,
                                                int64_t slot_bytes, Body body) {
  if constexpr (!kGlobal) {
    body(groups[blockIdx.x], smem);
  } else {
    unsigned char* big = scratch + static_cast<int64_t>(blockIdx.x) * slot_bytes;
    for (int g = blockIdx.x; g < num_groups; g += gridDim.x) {
      body(groups[g], big);
      __syncthreads();  // the CTA's next group reuses its shared and global arrays
    }
  }
}

// Ranges of the runs of flagged blocks [0, n): block j covers keys [j * bs, (j + 1) * bs),
// clipped to key_end. emit(range_index, start, end) per run in key order; returns the count.
template <int kThreads, class Emit>
__device__ __forceinline__ int CtaBlockRuns(
    const uint8_t* flags, int n, int bs, int key_end, Emit emit,
    typename cub::BlockScan<int, kThreads>::TempStorage& scan) {
  int carry = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const bool f = j < n && flags[j] != 0;
    const bool starts = f && (j == 0 || flags[j - 1] == 0);
    const bool ends = f && (j == n - 1 || flags[j + 1] == 0);
    int incl = 0, total = 0;
    cub::BlockScan<int, kThreads>(scan).InclusiveSum(starts ? 1 : 0, incl, total);
    __syncthreads();
    const int r = carry + incl - 1;  // the run holding j
    if (starts || ends) {
      const int e = min((j + 1) * bs, key_end);
      emit(r, starts, ends, j * bs, e);
    }
    carry += total;
  }
  return carry;
}

// Groups of a sorted array a[0, n): maximal runs whose consecutive values differ by at most
// `gap`, written as [lo, hi] pairs to out (as row_assembly::GroupRuns); returns their count.
template <int kThreads>
__device__ __forceinline__ int CtaGroupRuns(
    const int32_t* a, int n, int gap, int32_t* out,
    typename cub::BlockScan<int, kThreads>::TempStorage& scan) {
  int carry = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool in = i < n;
    const int v = in ? a[i] : 0;
    const bool head = in && (i == 0 || v - a[i - 1] > gap);
    const bool tail = in && (i == n - 1 || a[i + 1] - v > gap);
    int incl = 0, total = 0;
    cub::BlockScan<int, kThreads>(scan).InclusiveSum(head ? 1 : 0, incl, total);
    __syncthreads();
    const int k = carry + incl - 1;
    if (head) out[2 * k] = v;
    if (tail) out[2 * k + 1] = v;
    carry += total;
  }
  return carry;
}

// ---- Warp-level versions (one warp per row, no CTA barriers). Warp top-k and mass count:
// common/topk.cuh.

// CtaBlockRuns for one warp (flags written before it must be __syncwarp'ed).
template <class Emit>
__device__ int WarpBlockRuns(const uint8_t* flags, int n, int bs, int key_end, Emit emit) {
  const int lane = threadIdx.x & 31;
  int carry = 0;
  for (int base = 0; base < n; base += 32) {
    const int j = base + lane;
    const bool f = j < n && flags[j] != 0;
    const bool starts = f && (j == 0 || flags[j - 1] == 0);
    const bool ends = f && (j == n - 1 || flags[j + 1] == 0);
    const unsigned sm = __ballot_sync(kFullMask, starts);
    const int r = carry + __popc(sm & ((LaneMaskLt() << 1) | 1u)) - 1;
    if (starts || ends) emit(r, starts, ends, j * bs, min((j + 1) * bs, key_end));
    carry += __popc(sm);
  }
  return carry;
}

__device__ __forceinline__ int WarpSum(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ESTIMATE_CUH_
