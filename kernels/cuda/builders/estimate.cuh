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

// For r < rows (at most 4 * kThreads / 64) and kb < kb_end: out(r, kb, logit) with
// logit = SanitizeLogit(fma chain over c of qs[r][c] * pk[kb][c]). ks: smem [64][d + 1].
template <int kThreads, class Out>
__device__ __forceinline__ void PooledDots(const float* qs, int rows, int d, const float* pk,
                                           int kb_end, float* ks, Out out) {
  constexpr int kGroups = kThreads / 64;
  const int kbi = threadIdx.x & 63, rsub = threadIdx.x >> 6;
  for (int kb0 = 0; kb0 < kb_end; kb0 += 64) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < 64 * d; idx += kThreads) {
      const int b = idx / d, c = idx - b * d;
      ks[b * (d + 1) + c] = kb0 + b < kb_end ? pk[static_cast<int64_t>(kb0 + b) * d + c] : 0.f;
    }
    __syncthreads();
    if (kb0 + kbi < kb_end) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float* kr = ks + kbi * (d + 1);
      for (int c = 0; c < d; ++c) {
        const float kc = kr[c];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int r = rsub + u * kGroups;
          if (r < rows) acc[u] = fmaf(qs[r * d + c], kc, acc[u]);
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

// ---- Warp-level versions (one warp per row, no CTA barriers): the same rules as the Cta*
// functions above. `hist` is the warp's own 256 ints of shared memory.

__device__ __forceinline__ unsigned LaneMaskLt() { return (1u << (threadIdx.x & 31)) - 1u; }

template <class KeyFn>
__device__ TopKRule WarpTopKRule(int n, int k, KeyFn key_of, int* hist) {
  const int lane = threadIdx.x & 31;
  if (k <= 0 || n <= 0) return SelectNone();
  unsigned long long prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) hist[b] = 0;
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
      unsigned long long key;
      if (key_of(i, &key) && (key & mask) == prefix) {
        atomicAdd(&hist[(key >> shift) & 255], 1);
      }
    }
    __syncwarp();
    int local = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) local += hist[255 - (lane * 8 + t)];
    int incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += v;
    }
    const int excl = incl - local;
    const int total = __shfl_sync(kFullMask, incl, 31);
    if (total < k_rem) return TopKRule{prefix, mask, INT_MAX};
    const bool mine = excl < k_rem && k_rem <= incl;
    int bin = 0, bin_count = 0, rem = 0;
    if (mine) {
      int above = excl;
      for (int t = 0; t < 8; ++t) {
        const int b = 255 - (lane * 8 + t);
        const int h = hist[b];
        if (above + h >= k_rem) {
          bin = b;
          bin_count = h;
          rem = k_rem - above;
          break;
        }
        above += h;
      }
    }
    const int src = __ffs(__ballot_sync(kFullMask, mine)) - 1;
    bin = __shfl_sync(kFullMask, bin, src);
    bin_count = __shfl_sync(kFullMask, bin_count, src);
    rem = __shfl_sync(kFullMask, rem, src);
    __syncwarp();  // every lane has read hist before the next pass clears it
    prefix |= static_cast<unsigned long long>(bin) << shift;
    mask |= 0xffull << shift;
    k_rem = rem;
    if (bin_count == k_rem) return TopKRule{prefix, mask, INT_MAX};
  }
  return TopKRule{prefix, mask, k_rem};
}

template <class KeyFn, class Emit>
__device__ int WarpApplyRule(int n, const TopKRule& rule, KeyFn key_of, Emit emit,
                             int eq_before = 0) {
  const int lane = threadIdx.x & 31;
  int carry_eq = eq_before, carry_sel = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    bool eq = false, above = false;
    if (i < n) {
      unsigned long long key;
      if (key_of(i, &key)) {
        const unsigned long long m = key & rule.mask;
        eq = m == rule.prefix;
        above = m > rule.prefix;
      }
    }
    const unsigned eqm = __ballot_sync(kFullMask, eq);
    const int eq_rank = __popc(eqm & LaneMaskLt());
    const bool sel =
        above || (eq && (rule.take_eq == INT_MAX || carry_eq + eq_rank < rule.take_eq));
    const unsigned selm = __ballot_sync(kFullMask, sel);
    if (sel) emit(i, carry_sel + __popc(selm & LaneMaskLt()));
    carry_eq += __popc(eqm);
    carry_sel += __popc(selm);
  }
  return carry_sel;
}

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

// CtaMassCount for one warp: `hist` / `mass` are the warp's own 256 bins.
template <class KeyMassFn>
__device__ int WarpMassCount(int n, double target, KeyMassFn key_mass, int* hist, double* mass) {
  const int lane = threadIdx.x & 31;
  unsigned long long prefix = 0, mask = 0;
  double t_rem = target;
  int count_above = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) {
      hist[b] = 0;
      mass[b] = 0;
    }
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
      unsigned long long key;
      double m;
      if (key_mass(i, &key, &m) && (key & mask) == prefix) {
        const int b = static_cast<int>((key >> shift) & 255);
        atomicAdd(&hist[b], 1);
        if (m > 0) atomicAdd(&mass[b], m);
      }
    }
    __syncwarp();
    const MassBin mb = WarpFindMassBin(hist, mass, t_rem);
    __syncwarp();  // every lane has read the bins before the next pass clears them
    if (shift == 56 && mb.total == 0) return 0;
    if (t_rem <= 0) return count_above + 1;
    if (!mb.found) return count_above + mb.total;
    count_above += mb.count_above;
    t_rem -= mb.mass_above;
    prefix |= static_cast<unsigned long long>(mb.bin) << shift;
    mask |= 0xffull << shift;
    if (mb.bin_count == 1) return count_above + 1;
    if (shift == 0) {
      const double t = KeyToDouble(prefix);
      double cum = 0;
      int m = 0;
      while (m < mb.bin_count && cum < t_rem) {
        if (t > 0) cum += t;
        ++m;
      }
      return count_above + m;
    }
  }
  return count_above;
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
