// GPU index builder of block_sparse (MInference, seed 000, Alg. 3), the twin of
// kernels/builders/block_sparse.cc, and the pooled keys flex_prefill shares.
//
// Pooled keys and queries are fp32 means summed in row order, and each block logit one FMA chain
// over the head dimension, exactly as PooledKeys / MeanPool / ColumnDots compute them on the CPU
// (fp32, not tensor cores: rounding the means to bf16 or tf32 would change which blocks win; the
// whole product is S/B x S/B x d per head, ~1% of the sparse kernel's work at B = 64). So the
// top-k per query block — the diagonal blocks forced first, equal logits by lower block — is the
// CPU's, block for block.
#include <algorithm>

#include "kernels/cuda/builders/estimate.cuh"
#include "kernels/cuda/builders/merged_kernels.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

// Threads of the rows kernel. Shared memory: 16 warps, so that a group's 16 rows run their
// top-k side by side (at 128K keys one CTA fills an SM's shared memory; with 8 warps each ran
// two rows one after the other) and the next key chunk's loads overlap the current chunk's
// products. Global slots (1M keys): 8 warps, two CTAs per SM, as before (16 warps and one CTA
// per SM were slower there: rows 28.0 -> 37.4 ms, kernels/cuda/NOTES.md Session 19 — s19-build).
__host__ __device__ constexpr int RowThreads(bool global) { return global ? 256 : 512; }

// PROFILE only (SPATTN_GPU_BUILDER_PROFILE: BlockRowsParams::phases, BlockSparsePhasesBegin /
// End): the rows kernel's clock64 cycles per phase, summed over the groups (CTA phases: pooled
// queries, pooled dots, the rows' top-k with runs; the warps' own split of the last: the logit
// range, the radix walk, the apply and runs) and the number of groups, counted by the kernel's
// kPhases instantiation (its extra barriers at the phase ends make its rows stage a little
// slower); the default kernel has none of it.
enum BsPhase {
  kBsPoolQ,
  kBsDots,
  kBsRows,
  kBsWarpRange,
  kBsWarpWalk,
  kBsWarpRuns,
  kBsGroups,
  kBsPhases
};
__device__ unsigned long long g_bs_phase_cycles[kBsPhases];

template <typename T>
__global__ void PoolKeysKernel(PoolKeysParams p) {
  const T* k = static_cast<const T*>(p.k);
  const int64_t total = static_cast<int64_t>(p.num_kv_heads) * p.total_kb * p.head_dim;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(u % p.head_dim);
    const int64_t hb = u / p.head_dim;
    const int kb_global = static_cast<int>(hb % p.total_kb);
    const int h = static_cast<int>(hb / p.total_kb);
    int lo = 0, hi = p.batch - 1;  // last sequence whose first key block is <= kb_global
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (p.kb_offsets[mid] <= kb_global) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int seq = lo;
    const int kl = p.cu_k[seq + 1] - p.cu_k[seq];
    const int r0 = (kb_global - p.kb_offsets[seq]) * p.block;
    const int r1 = min(kl, r0 + p.block);
    float acc = 0.f;
    for (int r = r0; r < r1; ++r) {
      acc = __fadd_rn(acc, LoadAsFloat(k, static_cast<int64_t>(p.cu_k[seq]) + r, p.k_token_stride,
                                       h, p.k_head_stride, c));
    }
    p.out[u] = __fmul_rn(acc, __fdiv_rn(1.f, static_cast<float>(r1 - r0)));
  }
}

// Ordered 64-bit key of a logit v (not NaN) for a row whose finite logits lie in [lo, lo + range]
// (spread = 8388000 / range, or 0): bits 62..40 hold q = round(clamp((v - lo) * spread, 0,
// 2^23 - 1)), bits 39..8 v's ordered float bits. Every step of q is monotone in v (rounded
// subtraction, multiplication by spread >= 0, clamps, rounded addition of 2^23 whose bits are then
// q), so the keys order as the logits do and tie exactly where they tie (-0 as +0, as DoubleKey):
// the top-k and its ties by index are DoubleKey's, while the walk's first bytes split the row's
// range. Below kKeyPosInf (bit 63 is 0), as the forced blocks' keys must stay above all.
__device__ __forceinline__ unsigned long long RangeKey(float v, float lo, float spread) {
  if (v == 0.f) v = 0.f;
  float t = 0.f;
  if (spread > 0.f) t = fmaxf(0.f, fminf(__fmul_rn(__fsub_rn(v, lo), spread), 8388607.f));
  const unsigned q = __float_as_uint(__fadd_rn(t, 8388608.f)) - 0x4b000000u;
  return (static_cast<unsigned long long>(q) << 40) |
         (static_cast<unsigned long long>(FloatKey(v)) << 8);
}

struct BsSmem {
  int64_t qs, ks, logits, flags, total;
};

__host__ __device__ inline int64_t Align16(int64_t x) { return (x + 15) / 16 * 16; }

// Shared memory: pooled queries, a chunk of pooled keys, the rows' logits and each warp's flags.
// The flags take the key chunk's place (PooledDots is done with it before the first row's
// top-k), which at 2048 key blocks keeps 16 rows of 16 warps in one SM's shared memory. kGlobal:
// the logits and flags in a global slot instead (logits at 0, flags after them).
__host__ __device__ inline BsSmem BsLayout(int d, int max_rows, int nk_max, bool global) {
  BsSmem l;
  const int64_t ks_bytes = Align16(static_cast<int64_t>(64) * PooledKeyPitch(d) * 4);
  const int64_t flag_bytes = Align16(static_cast<int64_t>(RowThreads(global) / 32) * nk_max);
  const int64_t logit_bytes = Align16(static_cast<int64_t>(max_rows) * nk_max * 4);
  l.qs = 0;
  l.ks = Align16(static_cast<int64_t>(max_rows) * d * 4);
  if (global) {
    l.logits = 0;
    l.flags = logit_bytes;
    l.total = l.ks + ks_bytes;  // the slot's size: l.flags + flag_bytes
    return l;
  }
  l.flags = l.ks;
  l.logits = l.ks + (ks_bytes > flag_bytes ? ks_bytes : flag_bytes);
  l.total = l.logits + logit_bytes;
  return l;
}

// One CTA's global slot: the layout's logits and flags.
__host__ __device__ inline int64_t BsSlotBytes(int max_rows, int nk_max) {
  return Align16(static_cast<int64_t>(max_rows) * nk_max * 4) +
         Align16(static_cast<int64_t>(RowThreads(true) / 32) * nk_max);
}

// One group of rows: pooled queries and logits, then per row (one warp each) the top-k with the
// diagonal blocks forced first and its runs of blocks.
template <typename T, bool kGlobal, bool kPhases>
__device__ __forceinline__ void BlockSparseGroup(const BlockRowsParams& p, const RowGroup grp,
                                                 float* qs, float* ks, float* logits,
                                                 uint8_t* flags_all) {
  constexpr int kRowThreads = RowThreads(kGlobal);
  constexpr int kWarps = kRowThreads / 32;
  __shared__ int warp_hist[kWarps][256];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* flags = flags_all + static_cast<int64_t>(warp) * p.nk_max;
  int* hist = warp_hist[warp];
  const PooledSeq s = p.seqs[grp.seq];
  const int qh = p.slot_head[grp.slot];
  const int kvh = qh / p.group;
  const int bs = p.block, d = p.head_dim;
  const int nk = s.nk;
  constexpr bool prof = kPhases;
  long long c0 = prof ? clock64() : 0;
  auto phase = [&](int which) {  // CTA phase end: all threads done
    __syncthreads();
    if (threadIdx.x == 0) {
      const long long c = clock64();
      atomicAdd(&g_bs_phase_cycles[which], static_cast<unsigned long long>(c - c0));
      c0 = c;
    }
  };
  PoolQueries<T, kRowThreads>(static_cast<const T*>(p.q), p.q_token_stride, qh, p.q_head_stride,
                              s.q_begin, s.ql, grp.first_block, grp.rows, bs, d, p.scale, qs);
  if constexpr (prof) phase(kBsPoolQ);
  auto visible_of = [&](int r, int* first_pos, int* last_pos, int* key_end) {
    const int q_begin = (grp.first_block + r) * bs;
    const int q_end = min(q_begin + bs, s.ql);
    *first_pos = s.kl - s.ql + q_begin;
    *last_pos = s.kl - s.ql + q_end - 1;
    *key_end = p.causal ? *last_pos + 1 : s.kl;
    return p.causal ? min(nk, *last_pos / bs + 1) : nk;
  };
  int fp, lp, ke;
  const int vis_max = visible_of(grp.rows - 1, &fp, &lp, &ke);
  const float* pk = p.pooled_k + (static_cast<int64_t>(kvh) * p.total_kb + s.kb_base) * d;
  PooledDots<kRowThreads, /*kPrefetch=*/!kGlobal>(
      qs, grp.rows, d, pk, vis_max, ks, [&](int r, int kb, float l) { logits[r * nk + kb] = l; });
  if constexpr (prof) phase(kBsDots);

  long long w0 = prof ? clock64() : 0;
  auto warp_phase = [&](int which) {
    if (lane == 0) {
      const long long c = clock64();
      atomicAdd(&g_bs_phase_cycles[which], static_cast<unsigned long long>(c - w0));
      w0 = c;
    }
  };
  for (int r = warp; r < grp.rows; r += kWarps) {
    int first_pos, last_pos, key_end;
    const int vis = visible_of(r, &first_pos, &last_pos, &key_end);
    const int diag_first = first_pos / bs;
    const int diag_last = min(vis - 1, last_pos / bs);
    const int forced = max(0, diag_last - diag_first + 1);
    const int k = min(max(p.top_k, forced), vis);
    const float* lr = logits + r * nk;
    // The row's finite logit range (the forced blocks left out) spreads the radix walk's first
    // levels over the row's values instead of sign / exponent bytes most logits share. The range
    // starts at the mean of those logits (logits below it share q = 0 and are ordered by their
    // float bits alone), where the top-k's threshold lies above in most rows. Any lo and
    // spread >= 0 give the same order and ties (RangeKey), so the selection is the same; the
    // mean is a fixed-order warp reduction (the same keys run to run). From the minimum instead,
    // rows took the same time at 32K and 128K (H100, kernels/cuda/NOTES.md Session 22).
    float lo = CUDART_INF_F, hi = -CUDART_INF_F;
    if (k < vis) {
      float sum = 0.f;
      int cnt = 0;
      for (int i = lane; i < vis; i += 32) {
        const float v = lr[i];
        if ((i < diag_first || i > diag_last) && v > -CUDART_INF_F) {
          lo = fminf(lo, v);
          hi = fmaxf(hi, v);
          sum += v;
          ++cnt;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, o));
        sum += __shfl_xor_sync(kFullMask, sum, o);
        cnt += __shfl_xor_sync(kFullMask, cnt, o);
      }
      if (cnt > 0) {
        const float mean = sum / static_cast<float>(cnt);
        if (mean > lo && mean < hi) lo = mean;  // false for a NaN or infinite sum
      }
    }
    const float range = __fsub_rn(hi, lo);
    const float spread = range > 0.f && range <= FLT_MAX ? __fdiv_rn(8388000.f, range) : 0.f;
    auto key_of = [&](int i, unsigned long long* key) {
      *key = (i >= diag_first && i <= diag_last) ? kKeyPosInf : RangeKey(lr[i], lo, spread);
      return true;
    };
    if constexpr (prof) warp_phase(kBsWarpRange);
    const TopKRule rule = WarpTopKRule(vis, k, key_of, hist);
    if constexpr (prof) warp_phase(kBsWarpWalk);
    for (int i = lane; i < vis; i += 32) flags[i] = 0;
    __syncwarp();
    WarpApplyRule(vis, rule, key_of, [&](int i, int) { flags[i] = 1; });
    __syncwarp();
    const int64_t row =
        static_cast<int64_t>(grp.slot) * p.num_blocks + s.block_base + grp.first_block + r;
    int32_t* ts = p.tmp_start + row * p.cap;
    int32_t* te = p.tmp_end + row * p.cap;
    const int n = WarpBlockRuns(flags, vis, bs, key_end,
                                [&](int ri, bool starts, bool ends, int start, int end) {
                                  if (starts) ts[ri] = start;
                                  if (ends) te[ri] = end;
                                });
    if (lane == 0) p.range_count[row] = n;
    __syncwarp();  // flags are reused by the warp's next row
    if constexpr (prof) warp_phase(kBsWarpRuns);
  }
  if constexpr (prof) {
    phase(kBsRows);
    if (threadIdx.x == 0) atomicAdd(&g_bs_phase_cycles[kBsGroups], 1ull);
  }
}

// kGlobal = false: one CTA per group, all in shared memory. kGlobal: the logits and flags in the
// CTA's global slot (sequences of more key blocks than shared memory holds), the CTAs walking
// the groups; the same arithmetic and selection either way.
template <typename T, bool kGlobal, bool kPhases = false>
__global__ void __launch_bounds__(RowThreads(kGlobal)) BlockSparseRowsKernel(BlockRowsParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const BsSmem lay = BsLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal);
  float* qs = reinterpret_cast<float*>(smem + lay.qs);
  float* ks = reinterpret_cast<float*>(smem + lay.ks);
  ForEachRowGroup<kGlobal>(
      p.groups, p.num_groups, smem, p.scratch, BsSlotBytes(p.max_rows, p.nk_max),
      [&](const RowGroup grp, unsigned char* big) {
        BlockSparseGroup<T, kGlobal, kPhases>(
            p, grp, qs, ks, reinterpret_cast<float*>(big + lay.logits), big + lay.flags);
      });
}

// One warp per row (a row holds up to `cap` ranges: top_k blocks at 128K keys are ~50 runs).
__global__ void CompactRangesKernel(const int32_t* tmp_start, const int32_t* tmp_end, int cap,
                                    int64_t rows, const int32_t* indptr, int32_t* range_start,
                                    int32_t* range_len) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; r < rows;
       r += warps) {
    const int32_t o = indptr[r], n = indptr[r + 1] - o;
    for (int t = lane; t < n; t += 32) {
      const int32_t st = tmp_start[r * cap + t];
      range_start[o + t] = st;
      range_len[o + t] = tmp_end[r * cap + t] - st;
    }
  }
}

int Grid(int64_t n, int threads) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65535)));
}

}  // namespace

int64_t BlockSparseSmemBytes(int head_dim, int max_rows, int nk_max, bool global_scratch) {
  return BsLayout(head_dim, max_rows, nk_max, global_scratch).total;
}

int64_t BlockSparseScratchBytes(int max_rows, int nk_max) { return BsSlotBytes(max_rows, nk_max); }

cudaError_t BlockSparsePhasesBegin(cudaStream_t stream) {
  void* cycles = nullptr;
  cudaError_t err = cudaGetSymbolAddress(&cycles, g_bs_phase_cycles);
  if (err == cudaSuccess) err = cudaMemsetAsync(cycles, 0, sizeof(g_bs_phase_cycles), stream);
  return err;
}

cudaError_t BlockSparsePhasesEnd(cudaStream_t stream, unsigned long long* cycles, int n) {
  if (n != kBsPhases) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemcpyFromSymbolAsync(cycles, g_bs_phase_cycles, sizeof(g_bs_phase_cycles),
                                              0, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err;
}

cudaError_t LaunchPoolKeys(const PoolKeysParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.num_kv_heads) * p.total_kb * p.head_dim;
  if (n == 0) return cudaSuccess;
  switch (p.dtype) {
    case DType::kBF16:
      PoolKeysKernel<__nv_bfloat16><<<Grid(n, 256), 256, 0, stream>>>(p);
      break;
    case DType::kF16:
      PoolKeysKernel<__half><<<Grid(n, 256), 256, 0, stream>>>(p);
      break;
    case DType::kF32:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

namespace {

template <typename T, bool kGlobal, bool kPhases>
cudaError_t LaunchRowsTyped(const BlockRowsParams& p, cudaStream_t stream) {
  const int64_t bytes = BsLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal).total;
  const int grid = kGlobal ? std::min(p.num_groups, std::max(p.scratch_ctas, 1)) : p.num_groups;
  auto kernel = BlockSparseRowsKernel<T, kGlobal, kPhases>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  kernel<<<grid, RowThreads(kGlobal), bytes, stream>>>(p);
  return cudaGetLastError();
}

template <bool kGlobal>
cudaError_t LaunchRows(const BlockRowsParams& p, cudaStream_t stream) {
  switch (p.dtype) {
    case DType::kBF16:
      return p.phases ? LaunchRowsTyped<__nv_bfloat16, kGlobal, true>(p, stream)
                      : LaunchRowsTyped<__nv_bfloat16, kGlobal, false>(p, stream);
    case DType::kF16:
      return p.phases ? LaunchRowsTyped<__half, kGlobal, true>(p, stream)
                      : LaunchRowsTyped<__half, kGlobal, false>(p, stream);
    case DType::kF32:
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchBlockSparseRows(const BlockRowsParams& p, cudaStream_t stream) {
  if (p.num_groups == 0) return cudaSuccess;
  if (p.max_rows > 4 * (RowThreads(true) / 64)) return cudaErrorInvalidValue;
  return p.scratch != nullptr ? LaunchRows<true>(p, stream) : LaunchRows<false>(p, stream);
}

cudaError_t LaunchCompactRanges(const int32_t* tmp_start, const int32_t* tmp_end, int cap,
                                int64_t rows, const int32_t* range_indptr, int32_t* range_start,
                                int32_t* range_len, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  CompactRangesKernel<<<Grid(rows * 32, 256), 256, 0, stream>>>(
      tmp_start, tmp_end, cap, rows, range_indptr, range_start, range_len);
  return cudaGetLastError();
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn
