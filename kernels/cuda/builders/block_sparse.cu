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
#include <cstdlib>

#include "kernels/cuda/builders/estimate.cuh"
#include "kernels/cuda/builders/merged_kernels.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

// Threads of the rows kernel. Shared memory: 16 warps, so that a group's 16 rows run their
// top-k side by side (at 128K keys one CTA fills an SM's shared memory; with 8 warps each ran
// two rows one after the other), each warp also a 32-key slice of the pooled dots (BsTileDots).
// Global slots (1M keys): 8 warps, two CTAs per SM, as before (16 warps and one CTA per SM were
// slower there: rows 28.0 -> 37.4 ms, kernels/cuda/NOTES.md Session 19 — s19-build), with
// PooledDots, PoolQueries and the flag runs of session 26 (the tiled dots, vectorized pooling and
// ballot runs of session 27 are the shared-memory path's: rows 3.76 -> 1.98 ms at 128K, 0.29 ->
// 0.20 at 32K, H100, Session 27 — s27-bsvs).
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

// Shared-memory path's pooled dots (BsTileDots): each warp stages its own 32-key batches through
// kBsDotStages buffers of 32 keys x 8 floats (cp.async), so the staging takes 16 warps x 3 x 1 KB
// (48 KB: two CTAs per SM still fit at 32K keys).
constexpr int kBsDotStages = 3;
// The rows kernel's static shared memory on the shared-memory path: 16 warps' 256-bin histograms.
constexpr int64_t kBsStaticSmem = 16 * 256 * 4;
constexpr int kBsDotStageFloats = 32 * 8;
// Pooled queries' row pitch on the shared-memory path: d + 4 floats, so that four consecutive
// rows' float4 reads (BsTileDots' four row lanes) fall in four bank quads.
__host__ __device__ constexpr int BsQsPitch(int d, bool global) { return global ? d : d + 4; }

// Shared memory: pooled queries, a chunk of pooled keys, the rows' logits and each warp's flags.
// kGlobal: the logits and flags in a global slot instead (logits at 0, flags after them), keys
// staged 64 at a time by PooledDots. Shared-memory path: the key staging of BsTileDots; the rows'
// runs come from ballots (no flags).
__host__ __device__ inline BsSmem BsLayout(int d, int max_rows, int nk_max, bool global) {
  BsSmem l;
  const int64_t ks_bytes = Align16(static_cast<int64_t>(64) * PooledKeyPitch(d) * 4);
  const int64_t flag_bytes = Align16(static_cast<int64_t>(RowThreads(global) / 32) * nk_max);
  const int64_t logit_bytes = Align16(static_cast<int64_t>(max_rows) * nk_max * 4);
  l.qs = 0;
  l.ks = Align16(static_cast<int64_t>(max_rows) * BsQsPitch(d, global) * 4);
  if (global) {
    l.logits = 0;
    l.flags = logit_bytes;
    l.total = l.ks + ks_bytes;  // the slot's size: l.flags + flag_bytes
    return l;
  }
  const int64_t stage_bytes = static_cast<int64_t>(RowThreads(false) / 32) * kBsDotStages *
                              kBsDotStageFloats * 4;
  l.flags = l.ks;
  l.logits = l.ks + stage_bytes;
  l.total = l.logits + logit_bytes;
  return l;
}

// One CTA's global slot: the layout's logits and flags.
__host__ __device__ inline int64_t BsSlotBytes(int max_rows, int nk_max) {
  return Align16(static_cast<int64_t>(max_rows) * nk_max * 4) +
         Align16(static_cast<int64_t>(RowThreads(true) / 32) * nk_max);
}

// cp.async wrappers with memory clobbers (the staged keys are read right after the wait).
__device__ __forceinline__ void BsCpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void BsCpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void BsCpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// PoolQueries with a row pitch `qp` (BsQsPitch): a thread per (row, four columns), each column's
// sum in token order with the same rounded additions, scale and mean (the values are
// PoolQueries'), from 8-byte loads (four bf16/fp16) of a token's row, several tokens in flight.
template <typename T, int kThreads>
__device__ __forceinline__ void BsPoolQueries(const T* q, int64_t token_stride, int64_t head,
                                              int64_t head_stride, int q_begin, int ql,
                                              int first_block, int rows, int bs, int d, int qp,
                                              float scale, float* qs) {
  const int quads = d >> 2;
  for (int idx = threadIdx.x; idx < rows * quads; idx += kThreads) {
    const int r = idx / quads, c = (idx - r * quads) * 4;
    const int b0 = (first_block + r) * bs;
    const int b1 = min(ql, b0 + bs);
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    const T* src = q + (static_cast<int64_t>(q_begin) + b0) * token_stride + head * head_stride + c;
#pragma unroll 8
    for (int t = b0; t < b1; ++t) {
      const uint2 raw = *reinterpret_cast<const uint2*>(src);
      src += token_stride;
      const T* e = reinterpret_cast<const T*>(&raw);
      a0 = __fadd_rn(a0, Mma<T>::ToFloat(e[0]));
      a1 = __fadd_rn(a1, Mma<T>::ToFloat(e[1]));
      a2 = __fadd_rn(a2, Mma<T>::ToFloat(e[2]));
      a3 = __fadd_rn(a3, Mma<T>::ToFloat(e[3]));
    }
    const float inv = __fdiv_rn(1.f, static_cast<float>(b1 - b0));
    float* out = qs + r * qp + c;
    out[0] = __fmul_rn(__fmul_rn(a0, inv), scale);
    out[1] = __fmul_rn(__fmul_rn(a1, inv), scale);
    out[2] = __fmul_rn(__fmul_rn(a2, inv), scale);
    out[3] = __fmul_rn(__fmul_rn(a3, inv), scale);
  }
}

// PooledDots' logits (the same FMA chain over c in order per (row, key block), sanitized) for up
// to 16 rows, register-tiled: a warp takes 32-key batches (batch w, w + 16, ...), each lane 4 rows
// (t, t + 4, t + 8, t + 12; t = lane & 3) x 4 keys (g, g + 8, g + 16, g + 24; g = lane >> 2), so
// each c-quad is 4 query and 4 key float4 reads (one wavefront each) for 64 FMAs, where
// PooledDots reads 3 float4 (6 wavefronts) for 8. The warp stages its own keys, 8 floats of 32
// keys per stage, kBsDotStages deep by cp.async (zeros past kb_end), so no CTA barrier runs
// between batches. Stage layout: key j's two c-quads at float4 2j + (h ^ (j >> 2 & 1)), so the 8
// keys one read takes (g = 0..7) hit 8 distinct bank quads. qs: rows of pitch qp (d + 4); logits
// [rows][nk]. Every thread must call it; the CTA barrier before (qs complete) is the caller's.
// kFull: 13-16 rows (every row quad). Else the lanes' row quads past the group's rows are
// skipped (uniform branches): long sequences have a few rows per group (4 at 512K keys).
template <bool kFull>
__device__ __forceinline__ void BsTileDotsImpl(const float* qs, int qp, int rows, int d,
                                               const float* pk, int kb_end, float* stage_all,
                                               float* logits, int nk) {
  const int nrq = kFull ? 4 : (rows + 3) >> 2;  // row quads with rows
  constexpr int kWarps = RowThreads(false) / 32;
  constexpr int kStages = kBsDotStages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = lane & 3, g = lane >> 2;
  const float* stage = stage_all + warp * kStages * kBsDotStageFloats;
  const uint32_t stage_s = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
  const int cs_shift = d == 128 ? 4 : 3;  // stages per batch: d / 8 (d is 64 or 128)
  const int batches = (kb_end + 31) >> 5;
  const int mine = batches > warp ? (batches - warp + kWarps - 1) / kWarps : 0;
  const int total = mine << cs_shift;
  auto issue = [&](int s) {
    if (s < total) {
      const int bi = s >> cs_shift, cs = s - (bi << cs_shift);
      const int kb0 = (warp + bi * kWarps) * 32;
      const uint32_t buf = stage_s + (s % kStages) * kBsDotStageFloats * 4;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int chunk = lane + 32 * u, key = chunk >> 1, h = chunk & 1;
        const int kb = kb0 + key;
        const bool valid = kb < kb_end;
        const float* src = pk + static_cast<int64_t>(valid ? kb : 0) * d + cs * 8 + h * 4;
        BsCpAsync16(buf + (2 * key + (h ^ ((key >> 2) & 1))) * 16, src, valid);
      }
    }
    BsCpAsyncCommit();  // empty past the end: the wait count stays uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  }
  const int sw = (g >> 2) & 1;
  for (int s = 0; s < total; ++s) {
    issue(s + kStages - 1);  // into the buffer read at s - 1 (the warp is past it)
    BsCpAsyncWait<kStages - 1>();
    __syncwarp();
    const int bi = s >> cs_shift, cs = s - (bi << cs_shift);
    const float* buf = stage + (s % kStages) * kBsDotStageFloats;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = cs * 8 + h * 4;
      float4 qf[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i < nrq) qf[i] = *reinterpret_cast<const float4*>(qs + (t + 4 * i) * qp + c);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 kf =
            *reinterpret_cast<const float4*>(buf + (2 * (g + 8 * j) + (h ^ sw)) * 4);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (i >= nrq) continue;
          float a = acc[i][j];
          a = fmaf(qf[i].x, kf.x, a);
          a = fmaf(qf[i].y, kf.y, a);
          a = fmaf(qf[i].z, kf.z, a);
          a = fmaf(qf[i].w, kf.w, a);
          acc[i][j] = a;
        }
      }
    }
    __syncwarp();  // every lane has read the buffer before the next issue refills it
    if (((cs + 1) << 3) == d) {
      const int kb0 = (warp + bi * kWarps) * 32;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = t + 4 * i, kb = kb0 + g + 8 * j;
          if (r < rows && kb < kb_end) logits[r * nk + kb] = SanitizeLogit(acc[i][j]);
          acc[i][j] = 0.f;
        }
      }
    }
  }
  BsCpAsyncWait<0>();
}

// kRowsAware: groups of up to 12 rows take BsTileDotsImpl<false> (the one-CTA instance: long
// sequences' few rows per group); else every group the full tiles (the two-CTA instance keeps
// one copy of the loop: two spilled more).
template <bool kRowsAware>
__device__ __forceinline__ void BsTileDots(const float* qs, int qp, int rows, int d,
                                           const float* pk, int kb_end, float* stage_all,
                                           float* logits, int nk) {
  if (!kRowsAware || rows > 12) {
    BsTileDotsImpl<true>(qs, qp, rows, d, pk, kb_end, stage_all, logits, nk);
  } else {
    BsTileDotsImpl<false>(qs, qp, rows, d, pk, kb_end, stage_all, logits, nk);
  }
}

// The upper 32 bits of RangeKey(v, lo, spread) as far as the radix walk's first three levels
// read them (bits 63..40 of the key: q, or the forced blocks' kKeyPosInf); the low 8 bits, the
// top of the float key, are left 0.
__device__ __forceinline__ unsigned RangeKeyHi(float v, float lo, float spread) {
  float t = 0.f;
  if (spread > 0.f) t = fmaxf(0.f, fminf(__fmul_rn(__fsub_rn(v, lo), spread), 8388607.f));
  const unsigned q = __float_as_uint(__fadd_rn(t, 8388608.f)) - 0x4b000000u;
  return q << 8;
}
constexpr unsigned kKeyPosInfHi = static_cast<unsigned>(kKeyPosInf >> 32);
constexpr unsigned long long kKeyLow40 = (1ull << 40) - 1;

// WarpTopKRule (the same levels, histograms and rule) whose levels at shifts 56, 48 and 40 read
// 32-bit keys hi_of(i) = key_of(i)'s bits 63..32 (those levels look at bits 63..40 only), so a
// walk that ends there (the threshold's q is not shared) never builds a 64-bit key; deeper
// levels take key_of as WarpTopKRule does.
template <class HiFn, class KeyFn>
__device__ TopKRule BsWarpTopKRule(int n, int k, HiFn hi_of, KeyFn key_of, int* hist) {
  const int lane = threadIdx.x & 31;
  if (k <= 0 || n <= 0) return SelectNone();
  unsigned long long prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) hist[b] = 0;
    __syncwarp();
    if (shift >= 40) {
      const unsigned ph = static_cast<unsigned>(prefix >> 32), mh = static_cast<unsigned>(mask >> 32);
      const int sh = shift - 32;
      for (int base = 0; base < n; base += 32) {
        const int i = base + lane;
        unsigned hk = 0;
        const bool in = i < n && ((hk = hi_of(i)) & mh) == ph;
        WarpHistAdd(hist, in ? static_cast<int>((hk >> sh) & 255u) : -1);
      }
    } else {
      for (int base = 0; base < n; base += 32) {
        const int i = base + lane;
        unsigned long long key;
        const bool in = i < n && key_of(i, &key) && (key & mask) == prefix;
        WarpHistAdd(hist, in ? static_cast<int>((key >> shift) & 255) : -1);
      }
    }
    __syncwarp();
    int bin = 0, bin_count = 0, rem = 0;
    if (!WarpPickBin(hist, lane, k_rem, &bin, &bin_count, &rem)) return TopKRule{prefix, mask, INT_MAX};
    __syncwarp();  // every lane has read hist before the next pass clears it
    prefix |= static_cast<unsigned long long>(bin) << shift;
    mask |= 0xffull << shift;
    k_rem = rem;
    if (bin_count == k_rem) return TopKRule{prefix, mask, INT_MAX};
  }
  return TopKRule{prefix, mask, k_rem};
}

// WarpApplyRule and WarpBlockRuns in one pass, from the selection's ballots (no flags; cmp(i, &eq,
// &above) compares element i's key under rule.mask with rule.prefix): element
// i's run starts where i is selected and i - 1 is not, ends where i + 1 is not (or i = n - 1);
// emit(run, starts, ends, start, end) as WarpBlockRuns calls it (the same runs, numbered alike).
// Lane 31's end waits for the next 32 elements' first bit. Returns the number of runs.
template <class CmpFn, class Emit>
__device__ __forceinline__ int WarpApplyRuns(int n, const TopKRule& rule, CmpFn cmp, int bs,
                                             int key_end, Emit emit) {
  const int lane = threadIdx.x & 31;
  const unsigned lt = LaneMaskLt();
  int carry_eq = 0, runs = 0;
  unsigned prev = 0;          // the previous 32 elements' selection
  int pend_run = -1, pend_end = 0;  // lane 31's run awaiting its end
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    bool eq = false, above = false;
    if (i < n) cmp(i, &eq, &above);
    const unsigned eqm = __ballot_sync(kFullMask, eq);
    const bool sel = above || (eq && (rule.take_eq == INT_MAX ||
                                      carry_eq + __popc(eqm & lt) < rule.take_eq));
    const unsigned selm = __ballot_sync(kFullMask, sel);
    carry_eq += __popc(eqm);
    if (pend_run >= 0 && !(selm & 1u)) emit(pend_run, false, true, 0, pend_end);
    pend_run = -1;
    const unsigned startm = selm & ~((selm << 1) | (prev >> 31));
    const bool starts = (startm >> lane) & 1u;
    const bool ends = sel && lane < 31 && !((selm >> (lane + 1)) & 1u);
    const int r = runs + __popc(startm & (lt | (1u << lane))) - 1;
    const int end = min((i + 1) * bs, key_end);
    if (starts || ends) emit(r, starts, ends, i * bs, end);
    if (sel && lane == 31) {
      pend_run = r;
      pend_end = end;
    }
    runs += __popc(startm);
    prev = selm;
  }
  if (pend_run >= 0) emit(pend_run, false, true, 0, pend_end);
  return runs;
}

// One group of rows: pooled queries and logits, then per row (one warp each) the top-k with the
// diagonal blocks forced first and its runs of blocks.
template <typename T, bool kGlobal, bool kPhases, bool kRowsAware>
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
  if constexpr (kGlobal) {
    PoolQueries<T, kRowThreads>(static_cast<const T*>(p.q), p.q_token_stride, qh,
                                p.q_head_stride, s.q_begin, s.ql, grp.first_block, grp.rows, bs,
                                d, p.scale, qs);
  } else {
    BsPoolQueries<T, kRowThreads>(static_cast<const T*>(p.q), p.q_token_stride, qh,
                                  p.q_head_stride, s.q_begin, s.ql, grp.first_block, grp.rows, bs,
                                  d, BsQsPitch(d, false), p.scale, qs);
  }
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
  if constexpr (kGlobal) {
    PooledDots<kRowThreads, /*kPrefetch=*/!kGlobal>(
        qs, grp.rows, d, pk, vis_max, ks, [&](int r, int kb, float l) { logits[r * nk + kb] = l; });
  } else {
    __syncthreads();  // qs complete
    BsTileDots<kRowsAware>(qs, BsQsPitch(d, false), grp.rows, d, pk, vis_max, ks, logits, nk);
    __syncthreads();  // logits complete
  }
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
    TopKRule rule;
    if constexpr (!kGlobal) {
      auto hi_of = [&](int i) {
        return (i >= diag_first && i <= diag_last) ? kKeyPosInfHi : RangeKeyHi(lr[i], lo, spread);
      };
      rule = BsWarpTopKRule(vis, k, hi_of, key_of, hist);
    } else {
      rule = WarpTopKRule(vis, k, key_of, hist);
    }
    if constexpr (prof) warp_phase(kBsWarpWalk);
    const int64_t row =
        static_cast<int64_t>(grp.slot) * p.num_blocks + s.block_base + grp.first_block + r;
    int32_t* ts = p.tmp_start + row * p.cap;
    int32_t* te = p.tmp_end + row * p.cap;
    auto emit_run = [&](int ri, bool starts, bool ends, int start, int end) {
      if (starts) ts[ri] = start;
      if (ends) te[ri] = end;
    };
    int n;
    if constexpr (!kGlobal) {
      if ((rule.mask & kKeyLow40) == 0) {
        // The walk ended at or above bit 40: the rule reads the keys' bits 63..40 only.
        const unsigned mh = static_cast<unsigned>(rule.mask >> 32);
        const unsigned ph = static_cast<unsigned>(rule.prefix >> 32);
        n = WarpApplyRuns(
            vis, rule,
            [&](int i, bool* eq, bool* above) {
              const unsigned m = ((i >= diag_first && i <= diag_last) ? kKeyPosInfHi
                                                                        : RangeKeyHi(lr[i], lo, spread)) &
                                 mh;
              *eq = m == ph;
              *above = m > ph;
            },
            bs, key_end, emit_run);
      } else {
        n = WarpApplyRuns(
            vis, rule,
            [&](int i, bool* eq, bool* above) {
              unsigned long long key;
              key_of(i, &key);
              const unsigned long long m = key & rule.mask;
              *eq = m == rule.prefix;
              *above = m > rule.prefix;
            },
            bs, key_end, emit_run);
      }
    } else {
      for (int i = lane; i < vis; i += 32) flags[i] = 0;
      __syncwarp();
      WarpApplyRule(vis, rule, key_of, [&](int i, int) { flags[i] = 1; });
      __syncwarp();
      n = WarpBlockRuns(flags, vis, bs, key_end, emit_run);
    }
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
template <typename T, bool kGlobal, bool kPhases, int kMinBlocks>
__global__ void __launch_bounds__(RowThreads(kGlobal), kMinBlocks)
    BlockSparseRowsKernel(BlockRowsParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const BsSmem lay = BsLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal);
  float* qs = reinterpret_cast<float*>(smem + lay.qs);
  float* ks = reinterpret_cast<float*>(smem + lay.ks);
  ForEachRowGroup<kGlobal>(
      p.groups, p.num_groups, smem, p.scratch, BsSlotBytes(p.max_rows, p.nk_max),
      [&](const RowGroup grp, unsigned char* big) {
        BlockSparseGroup<T, kGlobal, kPhases, kMinBlocks == 1>(
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

// Shared memory per SM (read once; 228 KB, Hopper's, when it cannot be read).
int64_t SmemPerSm() {
  static const int64_t v = [] {
    int dev = 0, bytes = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) !=
            cudaSuccess) {
      return int64_t{228} * 1024;
    }
    return static_cast<int64_t>(bytes);
  }();
  return v;
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

template <typename T, bool kGlobal, bool kPhases, int kMinBlocks>
cudaError_t LaunchRowsTyped(const BlockRowsParams& p, cudaStream_t stream) {
  const int64_t bytes = BsLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal).total;
  const int grid = kGlobal ? std::min(p.num_groups, std::max(p.scratch_ctas, 1)) : p.num_groups;
  auto kernel = BlockSparseRowsKernel<T, kGlobal, kPhases, kMinBlocks>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  kernel<<<grid, RowThreads(kGlobal), bytes, stream>>>(p);
  return cudaGetLastError();
}

template <bool kGlobal, int kMinBlocks>
cudaError_t LaunchRows(const BlockRowsParams& p, cudaStream_t stream) {
  switch (p.dtype) {
    case DType::kBF16:
      return p.phases ? LaunchRowsTyped<__nv_bfloat16, kGlobal, true, kMinBlocks>(p, stream)
                      : LaunchRowsTyped<__nv_bfloat16, kGlobal, false, kMinBlocks>(p, stream);
    case DType::kF16:
      return p.phases ? LaunchRowsTyped<__half, kGlobal, true, kMinBlocks>(p, stream)
                      : LaunchRowsTyped<__half, kGlobal, false, kMinBlocks>(p, stream);
    case DType::kF32:
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchBlockSparseRows(const BlockRowsParams& p, cudaStream_t stream) {
  if (p.num_groups == 0) return cudaSuccess;
  if (p.max_rows > 4 * (RowThreads(true) / 64)) return cudaErrorInvalidValue;
  if (p.scratch != nullptr) return LaunchRows<true, 1>(p, stream);
  // Two CTAs per SM where their shared memory fits (shorter sequences): the 64-register
  // instance; one (128K keys: the logits fill the SM) lets the tiled dots keep their registers.
  const int64_t bytes = BsLayout(p.head_dim, p.max_rows, p.nk_max, false).total;
  // SPATTN_BS_ONE_CTA=1 (read once) takes the one-CTA instance everywhere: for tests of its
  // rows-aware dots on short sequences, and comparisons (at 32K: rows 0.204 -> 0.222 ms, H100,
  // kernels/cuda/NOTES.md Session 27 — s27-bsvs).
  static const bool one_cta = [] {
    const char* e = std::getenv("SPATTN_BS_ONE_CTA");
    return e != nullptr && e[0] == '1';
  }();
  return !one_cta && 2 * (bytes + kBsStaticSmem + 1024) <= SmemPerSm()
             ? LaunchRows<false, 2>(p, stream)
             : LaunchRows<false, 1>(p, stream);
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
