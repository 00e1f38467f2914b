// SampleAttention (seed 004) on the GPU, the twin of kernels/builders/sample_attention.cc:
//  1. Stats pass: per sampled row, max and sum of 2^(s log2 e) over its causal keys, key spans in
//     parallel (tensor-core Q K^T tiles), combined into the row's log-sum-exp.
//  2. Scores: the softmax probability mass per column block (key / blk) and per slash block
//     (floor((pos - key) / blk)) of each unit. blk >= 64 (the one pass, session 25): pass 1 also
//     keeps each row's block sums relative to its running max, and a combine scales them by
//     2^(max - lse) once the lse is known. blk 16 / 32: a score pass over the same tiles again,
//     p = exact softmax probability summed per block in shared memory per span, then added to
//     the unit's global scores.
//  3. CRA per (unit, column|slash): the smallest prefix of the blocks sorted by score (ties to the
//     lower block) whose sum reaches alpha of the total, found by a binary search on the score
//     bits (no sort), ties taken in block order.
//  4. Assembly: each query block ORs the column and slash spans of the chunks its rows belong to
//     and the local window into its row bitmap (assembled_common.cuh).
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/builders/assembled_common.cuh"
#include "kernels/cuda/common/wgmma_tile64.cuh"

namespace spattn {
namespace cuda {
namespace assembled {
namespace {

constexpr int kSaThreads = 256;  // 8 warps x 16 sampled rows
constexpr int kSaRows = 128;
constexpr int kSaTileN = 64;
constexpr int kSaAcc = kSaItemScores;  // column / slash accumulators per span (blk >= 16)
constexpr int kSaWarps = kSaThreads / 32;
// Slash blocks one warp tile (16 rows x 64 keys: pos - key spans 79 values) can touch: at most
// 2 + 78 / blk, so 8 covers blk >= 16. (Until session 25 pass 2 was compiled with 2 slots for
// blk 128 and 3 for 64, the same bits: the one pass now takes those block sizes.)
constexpr int kSaSlots = 8;

template <int kD>
constexpr int SaSmemBytes() {
  return kSaRows * kD * 2 + 2 * kSaTileN * kD * 2 + 2 * kSaWarps * kSaAcc * 4;
}

// The one pass on wgmma (session 31, sm_90a: SaUsesWgmma): the Q K^T products of a tile by the
// warpgroup (rows 64 wg .. 64 wg + 63; warp w's 16 rows are row0 = 16 w, as with mma.sync) with
// 8 RS m64n64k16 (A = the warp's Q fragments, the mma.sync A layout; B = the key tile by
// descriptor), in the mma.sync C layout: the per-element code after the products is the mma.sync
// pass's. Key tiles in the 128-byte swizzle layout (Tile64KeyOff: [kD / 64 sub-tiles][64 keys][128
// bytes], 16-byte chunk XOR key % 8, 1024-byte aligned bases). Once the warps
// hold their Q fragments, the Q tile's space takes two key tiles: kSaWgBufs buffers (4 dedicated,
// 2 in the Q space), tile t in buffer t % kSaWgBufs, loaded kSaWgBufs - 1 tiles ahead (anchor's
// pass, s28-anchor: two buffers 2.10 ms, six 1.37).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPATTN_SA_SM90A 1
#else
#define SPATTN_SA_SM90A 0
#endif
constexpr int kSaWgBufs = 6;
constexpr int kSaWgDedicated = kSaWgBufs - 2;

template <int kD>
constexpr int SaWgSmemBytes() {
  return kSaRows * kD * 2 + kSaWgDedicated * kSaTileN * kD * 2 + 1024;
}

// s36-sa (kSs): the one pass in one wave. At 32K its 384 spans (128 rows x 4096 keys, equal work)
// ran on 132 SMs x 2 CTAs = 264 slots, 1.45 waves (the second 45 % full). Three CTAs per SM (792
// slots) need <= 80 registers and <= 75 KB of shared memory a CTA: Q stays in shared memory
// (each warpgroup's 64 rows a Tile64KeyOff tile, read by the SS wgmma: no 32 fragment registers),
// and the key buffers after it (2 at d 128: 32 + 32 + 1 KB; 4 at d 64).
template <int kD>
constexpr int SaSsBufs() {
  return kD == 128 ? 2 : 4;
}
template <int kD>
constexpr int SaSsSmemBytes() {
  return kSaRows * kD * 2 + SaSsBufs<kD>() * kSaTileN * kD * 2 + 1024;
}

// The products of the warpgroup's 64 rows (Q at `qs`, key tile at `ks`, both Tile64KeyOff tiles,
// 1024-byte aligned) by the SS wgmma: Tile64ProductsRs's instruction shape and k steps with A
// read from shared memory instead of registers (the same A values).
// kHoist (s36-sa2): each k step's descriptors as the tile's plus the step's offset / 16
// (Tile64ProductsRs's form: the address field holds tile + offset, below 2^18: the same
// descriptors), instead of masking and shifting qs + off and ks + off again at every step.
template <typename T, int kD, bool kHoist>
__device__ __forceinline__ void SaProductsSs(uint32_t qs, uint32_t ks, float (&acc)[8][4]) {
#if SPATTN_SA_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  const uint64_t qd0 = Tile64SmemDesc(qs), kd0 = Tile64SmemDesc(ks);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t off = (kk >> 2) * (64 * 128) + (kk & 3) * 32;
    if constexpr (kHoist) {
      Tile64Wgmma<T>::SS(acc, qd0 + (off >> 4), kd0 + (off >> 4), kk > 0 ? 1 : 0);
    } else {
      Tile64Wgmma<T>::SS(acc, Tile64SmemDesc(qs + off), Tile64SmemDesc(ks + off), kk > 0 ? 1 : 0);
    }
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  Tile64Wait(acc);
#else
  __trap();
#endif
}

// The wgmma pass's key tiles are in Tile64KeyOff's layout and its products come from
// Tile64ProductsRs (wgmma_tile64.cuh), whose first k step starts from the products (scale-d 0):
// mma.sync adds its first products to +0, so only a sum of products that is -0 there is +0 here.
// Such a -0 (times the scale) can change only the sign of a zero maximum m: every Exp2(s - m) of
// it is 2^(+-0) = 1 either way, Rescale2 and the lse (m + log2 l, l > 0) read the same values, so
// the sums, partials and index are the same (build_index_gpu_test's
// WgmmaOnePassBuildsTheMmaSyncIndex compares the indexes).

// s35-sa2: one step of the slash split. A thread's elements come in increasing key order, so the
// keys at or below thr (slash block A) are a prefix and `next` (key > thr) a suffix. Main's
// s0 += next ? 0 : ex adds each prefix ex to +0 in sum's order, so s0 is sum's running value at
// the prefix's end, and then adds +0 to a value >= +0 (ex >= +0: no -0 to turn into +0), which
// leaves it unchanged; s1 adds +0 to +0 through the prefix and then each ex. Hence s0 = sum
// (after this element's add) while !next, and s1 += ex only while next: the same bits, one
// compare and two predicated instructions per element instead of 2 selects + 2 adds.
__device__ __forceinline__ void SaSplitStep(bool next, float ex, float sum, float& s0, float& s1) {
  if (next) {
    s1 += ex;
  } else {
    s0 = sum;
  }
}

// The column blocks [cb0, cb0 + n_cb) and slash blocks [sb_lo, sb_lo + n_sb) a span's keys and
// the unit's sampled rows can touch.
__device__ __forceinline__ void SaWindow(const SaUnit& u, const SaItem& item, int pos0, int lg,
                                         int& cb0, int& n_cb, int& sb_lo, int& n_sb) {
  const int rows = u.s1 - u.s0;
  const int kb = item.key_begin, ke = item.key_end;
  cb0 = kb >> lg;
  n_cb = ((ke - 1) >> lg) - cb0 + 1;
  sb_lo = (pos0 - (ke - 1)) >> lg;  // arithmetic shift = floor
  n_sb = ((pos0 + rows - 1 - kb) >> lg) - sb_lo + 1;
}

// Pass 1 (kScores = false): partial (max, sum) of each sampled row over the item's key span.
// Pass 2 (kScores = true): column and slash block sums of the row probabilities.
// One pass (kOne, pass 1's kernel; block_size >= 64, so that a 64-key tile lies in one column
// block and touches at most two slash blocks of a row): pass 1, and per (row, column block) and
// (row, slash block) of the span the sum of 2^(s - m) over the block's keys with the row's running
// max m at the block's last key, written with that m to op_partial when the block is complete
// (SaOneCombineKernel scales each by 2^(m - lse) once the row's lse is known: no second Q K^T).
// The one pass takes 128 registers at d128 (ptxas -v, sm_90a; 106 at d64), no spills: two CTAs
// per SM as pass 1 (124). (A minimum-blocks bound of 2 on it changed the other instantiations'
// code as well; without one, their sm_90a .text is byte-identical to the two-pass file's.)
// kWg (with kOne only): the products by wgmma, kSaWgBufs key buffers (above); the rest as kOne.
// kSplit (s35-sa2, with kOne): the slash split of a tile's sum by one compare and two
// predicated steps per element instead of two selects and two adds (same bits: below).
// kSs (s36-sa, with kWg): Q by the SS wgmma from shared memory, SaSsBufs key buffers, three CTAs
// per SM (above).
// (The body is SaPassBody so that kSs's kernel alone carries the 3-CTA bound: a minimum-blocks
// bound, even 1, on SaPassKernel changes the other instantiations' registers.)
// kHoist (s36-sa2, with kSs): the SS descriptors once a tile (SaProductsSs) and the split's key
// test against a threshold relative to the thread's first key of the tile (below): fewer
// instructions per tile, the same products and the same tests.
template <typename T, int kD, bool kScores, int kSlots, bool kOne, bool kWg, bool kSplit, bool kSs,
          bool kHoist = false>
__device__ __forceinline__ void SaPassBody(const SaArgs& a) {
  static_assert(!kWg || (kOne && !kScores), "the wgmma products serve the one pass");
  static_assert(!kSs || kWg, "the SS form is the wgmma pass's");
  static_assert(!kHoist || kSs, "the hoist is the SS form's");
  constexpr int kBufs = kSs ? SaSsBufs<kD>() : kSaWgBufs;
  constexpr int kCh = kD / 8;
  constexpr int kKS = kD / 16;
  extern __shared__ __align__(128) char smem[];
  const uint32_t sQa = kWg ? (SmemAddr(smem) + 1023u) & ~1023u : SmemAddr(smem);
  const uint32_t sKa = sQa + kSaRows * kD * 2;
  // Per-warp column and slash sums (no atomics: the same sums on every run).
  float* sCol = reinterpret_cast<float*>(smem + kSaRows * kD * 2 + 2 * kSaTileN * kD * 2);
  float* sSlash = sCol + kSaWarps * kSaAcc;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const SaItem item = a.items[blockIdx.x];
  const SaUnit u = a.units[item.unit];
  const AttnParams& p = a.p;
  const int q_head = a.heads[u.slot];
  const int kvh = q_head / p.group;
  const int q_tok0 = p.cu_seqlens_q[u.seq];
  const int q_len = p.cu_seqlens_q[u.seq + 1] - q_tok0;
  const int k_tok0 = p.cu_seqlens_k[u.seq];
  const int k_len = p.cu_seqlens_k[u.seq + 1] - k_tok0;
  const int rows = u.s1 - u.s0;
  const int pos0 = k_len - q_len + u.s0;  // position of sampled row 0
  const int blk = a.block_size;
  const int lg = __ffs(blk) - 1;
  const int kb = item.key_begin, ke = item.key_end;

  // Span-level block ranges (pass 2).
  int cb0, n_cb, sb_lo, n_sb;
  SaWindow(u, item, pos0, lg, cb0, n_cb, sb_lo, n_sb);
  if constexpr (kScores) {
    for (int i = tid; i < kSaWarps * kSaAcc; i += kSaThreads) {
      sCol[i] = 0.f;
      sSlash[i] = 0.f;
    }
  }
  float* wCol = sCol + warp * kSaAcc;
  float* wSlash = sSlash + warp * kSaAcc;

  const T* qg = static_cast<const T*>(p.q) + static_cast<int64_t>(q_head) * p.q_head_stride;
  const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;
  if constexpr (kSs) {
    // Warpgroup w's rows 64 w .. 64 w + 63 as a Tile64KeyOff tile at sQa + w * 64 * kD * 2 (rows
    // past the unit's zero-filled, their source row 0, not read).
    for (int i = tid; i < kSaRows * kCh; i += kSaThreads) {
      const int r = i / kCh, ch = i - r * kCh;
      const bool valid = r < rows;
      const T* src = qg + static_cast<int64_t>(q_tok0 + u.s0 + (valid ? r : 0)) * p.q_token_stride;
      CpAsync16(sQa + (r >> 6) * (64 * kD * 2) + Tile64KeyOff(r & 63, ch),
                reinterpret_cast<const char*>(src) + ch * 16, valid);
    }
  } else {
    LoadTileAsync(
        sQa, kSaRows, rows, kCh,
        [&](int r) { return qg + static_cast<int64_t>(q_tok0 + u.s0 + r) * p.q_token_stride; },
        tid, kSaThreads);
  }
  const int ntiles = (ke - kb + kSaTileN - 1) / kSaTileN;
  constexpr int kKBytes = kSaTileN * kD * 2;
  // kWg: key tile t's buffer (0 .. kSaWgDedicated - 1 after Q, the rest in Q's space).
  auto buf_of = [&](int t) {
    if constexpr (kSs) return sKa + (t % kBufs) * kKBytes;
    const int b = t % kSaWgBufs;
    return b < kSaWgDedicated ? sKa + b * kKBytes : sQa + (b - kSaWgDedicated) * kKBytes;
  };
  // kWg key copies from per-thread bases: chunk k_ch of rows k_r0 + m * kRowStep (anchor's).
  constexpr int kRowStep = kSaThreads / kCh;              // 16 (d 128) or 32 (d 64)
  constexpr int kKeyIters = kSaTileN * kCh / kSaThreads;  // 4 or 2
  static_assert(kRowStep % 8 == 0 && kKeyIters * kSaThreads == kSaTileN * kCh, "key copies");
  const int k_r0 = tid / kCh, k_ch = tid % kCh;
  const int64_t k_row_bytes = p.k_token_stride * static_cast<int64_t>(sizeof(T));
  const char* const k_base =
      reinterpret_cast<const char*>(kg + static_cast<int64_t>(k_tok0) * p.k_token_stride) +
      k_ch * 16;
  auto issue = [&](int t) {
    const int j = kb + t * kSaTileN;
    if constexpr (kWg) {
      const int n = min(kSaTileN, ke - j);
      const uint32_t dst = buf_of(t) + Tile64KeyOff(k_r0, k_ch);
      const char* row0 = k_base + static_cast<int64_t>(j) * k_row_bytes;
      const char* src = row0 + static_cast<int64_t>(k_r0) * k_row_bytes;
      if (n == kSaTileN) {
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          CpAsync16(dst + m * kRowStep * 128, src, true);
          src += kRowStep * k_row_bytes;
        }
      } else {  // rows past the span zero-filled (their source: the tile's row 0, not read)
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          const bool valid = k_r0 + m * kRowStep < n;
          CpAsync16(dst + m * kRowStep * 128, valid ? src : row0, valid);
          src += kRowStep * k_row_bytes;
        }
      }
    } else {
      LoadTileAsync(
          sKa + (t & 1) * kKBytes, kSaTileN, min(kSaTileN, ke - j), kCh,
          [&](int r) { return kg + static_cast<int64_t>(k_tok0 + j + r) * p.k_token_stride; }, tid,
          kSaThreads);
    }
  };
  issue(0);
  CpAsyncCommit();

  const int row0 = warp * 16;
  const bool active = row0 < rows;
  // kWg: the products are the warpgroup's (every warp of it runs them; a warp past the rows has
  // no valid row: its elements are all masked and it writes nothing).
  const bool wg_active = (warp >> 2) * 64 < rows;
  const float scale = p.scale_log2;
  // This thread's rows: row0 + g (h = 0) and row0 + g + 8 (h = 1).
  int pos_h[2];
  bool row_ok[2];
  float lse_h[2] = {0.f, 0.f};
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.f, 0.f};
  // kOne: this thread's part of the row's current column block and of its slash blocks A and
  // A - 1 (relative to m_run); keys above thr = pos - A * blk are in A - 1.
  float cacc[2] = {0.f, 0.f}, sacc0[2] = {0.f, 0.f}, sacc1[2] = {0.f, 0.f};
  int sb_a[2] = {0, 0}, thr[2] = {0, 0};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + g + 8 * h;
    pos_h[h] = pos0 + r;
    row_ok[h] = r < rows;
    if constexpr (kOne) {
      sb_a[h] = (pos_h[h] - kb) >> lg;  // the slash block of the span's first key
      thr[h] = pos_h[h] - sb_a[h] * blk;
    }
    if constexpr (kScores) {
      if (row_ok[h]) {
        lse_h[h] = a.lse2[static_cast<int64_t>(item.unit) * kSaRows + r];
        row_ok[h] = !isnan(lse_h[h]);
      }
    }
  }
  uint32_t qf[kKS][4];
  if constexpr (kSs) {
    // One commit group per key tile: Q with tile 0, tiles 1 .. kBufs - 2; tile t + kBufs - 1 at
    // the top of tile t.
#pragma unroll
    for (int t = 1; t < kBufs - 1; ++t) {
      if (t < ntiles) issue(t);
      CpAsyncCommit();
    }
  } else if constexpr (kWg) {
    // One commit group per key tile (empty past the last): Q with tile 0, tiles 1 ..
    // kSaWgDedicated - 1; once every warp holds its Q fragments, the rest up to kSaWgBufs - 2 in
    // the Q space; tile t + kSaWgBufs - 1 at the top of tile t.
#pragma unroll
    for (int t = 1; t < kSaWgDedicated; ++t) {
      if (t < ntiles) issue(t);
      CpAsyncCommit();
    }
    CpAsyncWait<kSaWgDedicated - 1>();  // Q and tile 0
    __syncthreads();
    if (wg_active) {
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) LoadA(sQa, row0, ks, kCh, lane, qf[ks]);
    }
    __syncthreads();  // every read of the Q tile is done
#pragma unroll
    for (int t = kSaWgDedicated; t < kSaWgBufs - 1; ++t) {
      if (t < ntiles) issue(t);
      CpAsyncCommit();
    }
  }

  for (int t = 0; t < ntiles; ++t) {
    if constexpr (kWg) {
      // Tile t has landed (this thread's copies, then the barrier for everyone's), visible to
      // wgmma (fence.proxy.async); every warpgroup is past tile t - 1, whose buffer takes tile
      // t + kSaWgBufs - 1.
      CpAsyncWait<kBufs - 2>();
#if SPATTN_SA_SM90A
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
      __syncthreads();
      if (t + kBufs - 1 < ntiles) issue(t + kBufs - 1);
      CpAsyncCommit();
    } else {
      AwaitTile(t, ntiles, issue);
      if (t == 0 && active) {
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) LoadA(sQa, row0, ks, kCh, lane, qf[ks]);
      }
    }
    const int j = kb + t * kSaTileN;
    if (kWg ? wg_active : active) {
      float s[8][4];
      if constexpr (kSs) {
        SaProductsSs<T, kD, kHoist>(sQa + (warp >> 2) * (64 * kD * 2), buf_of(t), s);
      } else if constexpr (kWg) {
        Tile64ProductsRs<T, kD>(qf, buf_of(t), s);
      } else {
        const uint32_t kst = sKa + (t & 1) * kSaTileN * kD * 2;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
        }
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            LoadB2(kst, np * 16, ks, kCh, lane, b);
            Mma<T>::Run(s[2 * np], qf[ks], b[0], b[1]);
            Mma<T>::Run(s[2 * np + 1], qf[ks], b[2], b[3]);
          }
        }
      }
      // Row h sees every key of the tile (all below the span's end and, causal, at or before
      // the row): its elements skip the per-element mask, whose test is then true for each of
      // them (the same values as the masked path).
      const bool tile_in = j + kSaTileN <= ke;
      bool full[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        full[h] = row_ok[h] && tile_in && (!p.causal || j + kSaTileN - 1 <= pos_h[h]);
      }
      if constexpr (!kScores) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = kNegInf;
          if (full[h]) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                // __fmul_rn: the product rounded on its own, as the masked path's (its select
                // keeps it out of an FMA with the later subtraction of m_new).
                s[nt][2 * h + e] = __fmul_rn(s[nt][2 * h + e], scale);
                mx = fmaxf(mx, s[nt][2 * h + e]);
              }
            }
          } else {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int key = j + nt * 8 + 2 * t4 + e;
                const bool ok = row_ok[h] && key < ke && (!p.causal || key <= pos_h[h]);
                const float v = s[nt][2 * h + e] * scale;
                s[nt][2 * h + e] = ok ? v : kNegInf;
                mx = fmaxf(mx, s[nt][2 * h + e]);
              }
            }
          }
          mx = QuadMax(mx);
          const float m_new = fmaxf(m_run[h], mx);
          if (m_new != kNegInf) {
            float sum = 0.f;
            float s0 = 0.f, s1 = 0.f;  // kOne: the tile's part in slash blocks A and A - 1
            // kHoist: key j + 8 nt + 2 t4 + e > thr as 8 nt + e > thr - j - 2 t4, the right side
            // once a tile (small ints, no overflow: the same test).
            const int thr_rel = thr[h] - j - 2 * t4;
            if (full[h]) {
              // v = -inf (an overflowed product) gives Exp2(-inf) = +0, which the masked path
              // adds as 0.f: the same sum without the test.
#pragma unroll
              for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const float ex = Exp2(s[nt][2 * h + e] - m_new);
                  sum += ex;
                  if constexpr (kOne) {
                    const bool next =
                        kHoist ? nt * 8 + e > thr_rel : j + nt * 8 + 2 * t4 + e > thr[h];
                    if constexpr (kSplit) {
                      SaSplitStep(next, ex, sum, s0, s1);
                    } else {
                      s0 += next ? 0.f : ex;
                      s1 += next ? ex : 0.f;
                    }
                  }
                }
              }
            } else {
#pragma unroll
              for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const float v = s[nt][2 * h + e];
                  const float ex = v == kNegInf ? 0.f : Exp2(v - m_new);
                  sum += ex;
                  if constexpr (kOne) {
                    const bool next =
                        kHoist ? nt * 8 + e > thr_rel : j + nt * 8 + 2 * t4 + e > thr[h];
                    if constexpr (kSplit) {
                      SaSplitStep(next, ex, sum, s0, s1);
                    } else {
                      s0 += next ? 0.f : ex;
                      s1 += next ? ex : 0.f;
                    }
                  }
                }
              }
            }
            l_run[h] = Rescale2(l_run[h], m_run[h], m_new) + sum;
            if constexpr (kOne) {
              // The whole tile lies in the current column block.
              cacc[h] = Rescale2(cacc[h], m_run[h], m_new) + sum;
              sacc0[h] = Rescale2(sacc0[h], m_run[h], m_new) + s0;
              sacc1[h] = Rescale2(sacc1[h], m_run[h], m_new) + s1;
            }
            m_run[h] = m_new;
          }
        }
        if constexpr (kOne) {
          // Blocks complete after this tile go out with the running max they refer to: the
          // column block when the next tile starts another (warp-uniform) or this is the last;
          // slash block A when the next key lies in A - 1 (per row: quad-uniform), and at the
          // span's end A and, when the span's last key is in it, A - 1. Every block of
          // [(pos - (ke - 1)) >> lg, (pos - kb) >> lg] is written once (SaOneCombineKernel
          // reads exactly those).
          const bool last = t + 1 == ntiles;
          const bool col_end = last || ((j + kSaTileN) >> lg) != (j >> lg);
          const int64_t item_base = static_cast<int64_t>(blockIdx.x) * a.op_entries;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row0 + g + 8 * h;
            const bool wr = t4 == 0 && row_ok[h];
            if (col_end) {
              const float q = QuadSum(cacc[h]);
              if (wr) {
                a.op_partial[(item_base + (j >> lg) - cb0) * kSaRows + r] =
                    make_float2(m_run[h], q);
              }
              cacc[h] = 0.f;
            }
            // The next key is in slash block A - 1: (pos - (j + 64)) >> lg < A, i.e.
            // j + 64 > thr = pos - A blk (kHoist's form of the same test).
            const bool a_done = kHoist ? j + kSaTileN > thr[h]
                                       : ((pos_h[h] - (j + kSaTileN)) >> lg) < sb_a[h];
            const float q0 = QuadSum(sacc0[h]);
            const int64_t at = item_base + a.op_ncol + (sb_a[h] - sb_lo);
            if (last) {
              const float q1 = QuadSum(sacc1[h]);
              if (wr) {
                a.op_partial[at * kSaRows + r] = make_float2(m_run[h], q0);
                if (((pos_h[h] - (ke - 1)) >> lg) < sb_a[h]) {
                  a.op_partial[(at - 1) * kSaRows + r] = make_float2(m_run[h], q1);
                }
              }
            } else if (a_done) {
              if (wr) a.op_partial[at * kSaRows + r] = make_float2(m_run[h], q0);
              sacc0[h] = sacc1[h];
              sacc1[h] = 0.f;
              sb_a[h] -= 1;
              thr[h] += blk;
            }
          }
        }
      } else {
        float csum[8];
        float ss[kSlots];
#pragma unroll
        for (int k = 0; k < kSlots; ++k) ss[k] = 0.f;
        const int sb_base = (pos0 + row0 - (j + kSaTileN - 1)) >> lg;
        // Every sum here starts at +0 and adds probabilities >= +0: adding the 0.f of a masked
        // element or of another slot leaves it unchanged, so skipping those additions gives the
        // same bits. `masked` (a std::bool_constant): the per-element mask, which tiles that
        // both rows see whole skip.
        auto accumulate = [&](auto masked) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            csum[nt] = 0.f;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int key = j + nt * 8 + 2 * t4 + e;
                float pr;
                if constexpr (decltype(masked)::value) {
                  const bool ok = row_ok[h] && key < ke && (!p.causal || key <= pos_h[h]);
                  pr = ok ? Exp2(s[nt][2 * h + e] * scale - lse_h[h]) : 0.f;
                } else {
                  pr = Exp2(s[nt][2 * h + e] * scale - lse_h[h]);
                }
                csum[nt] += pr;
                const int k = ((pos_h[h] - key) >> lg) - sb_base;
#pragma unroll
                for (int kk = 0; kk < kSlots; ++kk) {
                  if constexpr (decltype(masked)::value) {
                    ss[kk] += k == kk ? pr : 0.f;
                  } else if (k == kk) {
                    ss[kk] += pr;
                  }
                }
              }
            }
          }
        };
        if (full[0] && full[1]) {
          accumulate(std::false_type());
        } else {
          accumulate(std::true_type());
        }
        // Column blocks: nts of one block summed in the thread, then over the warp.
        float cs = 0.f;
        int cur = j >> lg;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int idx = (j + nt * 8) >> lg;  // warp-uniform
          if (idx != cur) {
            cs = WarpSum(cs);
            if (lane == 0 && cs != 0.f) wCol[cur - cb0] += cs;
            cs = 0.f;
            cur = idx;
          }
          cs += csum[nt];
        }
        cs = WarpSum(cs);
        if (lane == 0 && cs != 0.f) wCol[cur - cb0] += cs;
#pragma unroll
        for (int kk = 0; kk < kSlots; ++kk) {
          if (__any_sync(0xffffffffu, ss[kk] != 0.f)) {
            const float v = WarpSum(ss[kk]);
            const int idx = sb_base + kk - sb_lo;
            if (lane == 0 && v != 0.f && idx >= 0 && idx < n_sb) wSlash[idx] += v;
          }
        }
      }
    }
    if constexpr (!kWg) __syncthreads();  // kWg: the next tile's top barrier
  }
  CpAsyncWait<0>();

  if constexpr (!kScores) {
    if (active) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = QuadSum(l_run[h]);
        if (t4 == 0 && row_ok[h]) {
          a.partial[static_cast<int64_t>(blockIdx.x) * kSaRows + row0 + g + 8 * h] =
              make_float2(m_run[h], l);
        }
      }
    }
  } else {
    // The span's sums over the warps, in warp order.
    __syncthreads();
    float* out = a.item_scores + static_cast<int64_t>(blockIdx.x) * 2 * kSaAcc;
    for (int i = tid; i < kSaAcc; i += kSaThreads) {
      float c = 0.f, sl = 0.f;
#pragma unroll
      for (int w = 0; w < kSaWarps; ++w) {
        c += sCol[w * kSaAcc + i];
        sl += sSlash[w * kSaAcc + i];
      }
      out[i] = c;
      out[kSaAcc + i] = sl;
    }
  }
}

template <typename T, int kD, bool kScores, int kSlots = kSaSlots, bool kOne = false,
          bool kWg = false, bool kSplit = false>
__global__ void __launch_bounds__(kSaThreads) SaPassKernel(SaArgs a) {
  SaPassBody<T, kD, kScores, kSlots, kOne, kWg, kSplit, false>(a);
}
template <typename T, int kD, bool kHoist>
__global__ void __launch_bounds__(kSaThreads, 3) SaPassWaveKernel(SaArgs a) {
  SaPassBody<T, kD, false, kSaSlots, true, true, true, true, kHoist>(a);
}

// Scores of each unit: its spans' sums, added in span order.
__global__ void SaReduceKernel(SaArgs a) {
  const SaUnit u = a.units[blockIdx.x];
  const AttnParams& p = a.p;
  const int q_len = p.cu_seqlens_q[u.seq + 1] - p.cu_seqlens_q[u.seq];
  const int k_len = p.cu_seqlens_k[u.seq + 1] - p.cu_seqlens_k[u.seq];
  const int pos0 = k_len - q_len + u.s0;
  const int lg = __ffs(a.block_size) - 1;
  for (int e = threadIdx.x; e < u.n_col + u.n_slash; e += blockDim.x) {
    double sum = 0;
    for (int it = u.item_begin; it < u.item_begin + u.item_count; ++it) {
      int cb0, n_cb, sb_lo, n_sb;
      SaWindow(u, a.items[it], pos0, lg, cb0, n_cb, sb_lo, n_sb);
      const float* sc = a.item_scores + static_cast<int64_t>(it) * 2 * kSaAcc;
      if (e < u.n_col) {
        const int i = e - cb0;
        if (i >= 0 && i < n_cb) sum += sc[i];
      } else {
        const int i = e - u.n_col + u.sb_min - sb_lo;
        if (i >= 0 && i < n_sb) sum += sc[kSaAcc + i];
      }
    }
    a.scores[u.score_off + e] = static_cast<float>(sum);
  }
}

// Row log2-sum-exp2 of sampled row r (< kSaRows) of unit u from the spans' partials; NaN when the
// row has no finite score or a non-finite sum (the CPU builder skips such rows). One code for
// SaCombineKernel and SaOneCombineKernel<true> (the same value in both).
__device__ __forceinline__ float SaRowLse2(const SaArgs& a, const SaUnit& u, int r) {
  float out = __int_as_float(0x7fffffff);
  if (r < u.s1 - u.s0) {
    float m = kNegInf;
    for (int i = 0; i < u.item_count; ++i) {
      m = fmaxf(m, a.partial[static_cast<int64_t>(u.item_begin + i) * kSaRows + r].x);
    }
    if (isfinite(m)) {
      float l = 0.f;
      for (int i = 0; i < u.item_count; ++i) {
        const float2 pl = a.partial[static_cast<int64_t>(u.item_begin + i) * kSaRows + r];
        l += Rescale2(pl.y, pl.x, m);
      }
      if (isfinite(l) && l > 0.f) out = m + log2f(l);
    }
  }
  return out;
}

// Every sampled row's lse2 (SaRowLse2), one CTA per unit.
__global__ void SaCombineKernel(SaArgs a) {
  const SaUnit u = a.units[blockIdx.x];
  const int r = threadIdx.x;
  if (r >= kSaRows) return;
  a.lse2[static_cast<int64_t>(blockIdx.x) * kSaRows + r] = SaRowLse2(a, u, r);
}

// One pass's scores (replaces pass 2 and SaReduceKernel): entry e of unit blockIdx.x (a column
// block, then the slash blocks from sb_min) in CTA blockIdx.y's range of kOneEntries, one warp
// per entry: sum over the unit's spans (in order) and its sampled rows of the block partials
// times 2^(m - lse) of the row (rows without a vote, lse NaN, skipped), in double. kLse: the
// CTA makes its unit's lse2 itself (SaRowLse2, into shared memory) instead of reading
// SaCombineKernel's: one launch fewer (s32-sa; SPATTN_SA_LEAN=0 launches SaCombineKernel).
constexpr int kOneEntries = 64;
template <bool kLse>
__global__ void __launch_bounds__(256) SaOneCombineKernel(SaArgs a) {
  const SaUnit u = a.units[blockIdx.x];
  const int total = u.n_col + u.n_slash;
  const int e_begin = blockIdx.y * kOneEntries;
  if (e_begin >= total) return;
  __shared__ float lse_s[kLse ? kSaRows : 1];
  if constexpr (kLse) {
    static_assert(kSaRows <= 256, "a thread per sampled row");
    if (threadIdx.x < kSaRows) lse_s[threadIdx.x] = SaRowLse2(a, u, threadIdx.x);
    __syncthreads();
  }
  const int e_end = min(total, e_begin + kOneEntries);
  const AttnParams& p = a.p;
  const int q_len = p.cu_seqlens_q[u.seq + 1] - p.cu_seqlens_q[u.seq];
  const int k_len = p.cu_seqlens_k[u.seq + 1] - p.cu_seqlens_k[u.seq];
  const int pos0 = k_len - q_len + u.s0;
  const int lg = __ffs(a.block_size) - 1;
  const int rows = u.s1 - u.s0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float lse[kSaRows / 32];
#pragma unroll
  for (int k = 0; k < kSaRows / 32; ++k) {
    const int r = lane + 32 * k;
    if constexpr (kLse) {
      lse[k] = r < rows ? lse_s[r] : __int_as_float(0x7fffffff);
    } else {
      lse[k] = r < rows ? a.lse2[static_cast<int64_t>(blockIdx.x) * kSaRows + r]
                        : __int_as_float(0x7fffffff);
    }
  }
  for (int e = e_begin + warp; e < e_end; e += 8) {
    const bool is_col = e < u.n_col;
    const int b = e - u.n_col + u.sb_min;  // slash block (when !is_col)
    double sum = 0;
    for (int it = u.item_begin; it < u.item_begin + u.item_count; ++it) {
      const SaItem item = a.items[it];
      int cb0, n_cb, sb_lo, n_sb;
      SaWindow(u, item, pos0, lg, cb0, n_cb, sb_lo, n_sb);
      const int i = is_col ? e - cb0 : b - sb_lo;
      if (i < 0 || i >= (is_col ? n_cb : n_sb)) continue;
      const float2* src =
          a.op_partial +
          (static_cast<int64_t>(it) * a.op_entries + (is_col ? i : a.op_ncol + i)) * kSaRows;
#pragma unroll
      for (int k = 0; k < kSaRows / 32; ++k) {
        const int r = lane + 32 * k;
        if (r >= rows || isnan(lse[k])) continue;
        if (!is_col) {
          const int pos = pos0 + r;
          if (b < ((pos - (item.key_end - 1)) >> lg) || b > ((pos - item.key_begin) >> lg)) {
            continue;
          }
        }
        const float2 v = src[r];
        sum += static_cast<double>(v.y * exp2f(v.x - lse[k]));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) a.scores[u.score_off + e] = static_cast<float>(sum);
  }
}

constexpr int kCraThreads = 256;

// CRA of one (unit, kind): kind 0 = column blocks with alpha_c, 1 = slash blocks with alpha_s.
__global__ void __launch_bounds__(kCraThreads) SaCraKernel(SaArgs a) {
  using Reduce = cub::BlockReduce<double, kCraThreads>;
  using IReduce = cub::BlockReduce<int, kCraThreads>;
  using Scan = cub::BlockScan<int, kCraThreads>;
  __shared__ typename Reduce::TempStorage red;
  __shared__ typename IReduce::TempStorage ired;
  __shared__ typename Scan::TempStorage scan;
  __shared__ double s_bcast;
  __shared__ int s_ibcast;

  const int kind = blockIdx.x & 1;
  const SaUnit u = a.units[blockIdx.x >> 1];
  const int n = kind == 0 ? u.n_col : u.n_slash;
  const int64_t off = u.score_off + (kind == 0 ? 0 : u.n_col);
  const float* sc = a.scores + off;
  int32_t* sel = a.selected + off;
  const int tid = threadIdx.x;
  const int per = (n + kCraThreads - 1) / kCraThreads;
  const int i0 = min(n, tid * per), i1 = min(n, i0 + per);

  auto sum_at_least = [&](uint32_t key) -> double {
    double s = 0;
    for (int i = i0; i < i1; ++i) {
      if (FloatKey(sc[i]) >= key) s += sc[i];
    }
    const double total = Reduce(red).Sum(s);
    if (tid == 0) s_bcast = total;
    __syncthreads();
    const double r = s_bcast;
    __syncthreads();
    return r;
  };
  auto count_key = [&](uint32_t key) -> int {
    int c = 0;
    for (int i = i0; i < i1; ++i) c += FloatKey(sc[i]) == key ? 1 : 0;
    const int total = IReduce(ired).Sum(c);
    if (tid == 0) s_ibcast = total;
    __syncthreads();
    const int r = s_ibcast;
    __syncthreads();
    return r;
  };

  const double total = sum_at_least(1u);  // every positive score
  int32_t* count_out = a.selected_n + (blockIdx.x >> 1) * 2 + kind;
  if (!(total > 0)) {
    if (tid == 0) *count_out = 0;
    return;
  }
  const double target = static_cast<double>(kind == 0 ? a.alpha_c : a.alpha_s) * total;
  // Largest T with sum(scores >= T) >= target: the score of the last block CRA takes.
  uint32_t lo = 1u, hi = 0x7f800000u;
  while (hi - lo > 1u) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (sum_at_least(mid) >= target) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const uint32_t t_key = lo;
  const double above = sum_at_least(t_key + 1u);
  const int ties = count_key(t_key);
  // How many blocks scoring exactly T (in block order) the prefix takes.
  if (tid == 0) {
    const double v = static_cast<double>(__uint_as_float(t_key));
    double cum = above;
    int need = 0;
    while (need < ties) {
      cum += v;
      ++need;
      if (cum >= target) break;
    }
    s_ibcast = need;
  }
  __syncthreads();
  const int need = s_ibcast;
  __syncthreads();
  int my_ties = 0;
  for (int i = i0; i < i1; ++i) my_ties += FloatKey(sc[i]) == t_key ? 1 : 0;
  int tie_rank = 0;
  Scan(scan).ExclusiveSum(my_ties, tie_rank);
  __syncthreads();
  int my_sel = 0;
  {
    int r = tie_rank;
    for (int i = i0; i < i1; ++i) {
      const uint32_t k = FloatKey(sc[i]);
      if (k > t_key) {
        ++my_sel;
      } else if (k == t_key) {
        if (r < need) ++my_sel;
        ++r;
      }
    }
  }
  int out_pos = 0, n_sel = 0;
  Scan(scan).ExclusiveSum(my_sel, out_pos, n_sel);
  {
    int r = tie_rank;
    for (int i = i0; i < i1; ++i) {
      const uint32_t k = FloatKey(sc[i]);
      bool take = false;
      if (k > t_key) {
        take = true;
      } else if (k == t_key) {
        take = r < need;
        ++r;
      }
      if (take) sel[out_pos++] = kind == 0 ? i : i + u.sb_min;
    }
  }
  if (tid == 0) *count_out = n_sel;
}

// Assembly source: a (slot, block) row takes the spans of the chunks its rows belong to. Begin
// also reads the selection of the row's first two chunks (a row of 128 queries meets one or two
// of its sequence's chunk_n chunks), so that SetBits reads only their selected blocks: with the
// assembler's row records (made before the count pass) Begin's loads are off the rows' path.
struct SaSrc {
  SaAsmArgs a;
  static constexpr bool kAsmRecords = true;  // row_assembly.cuh's row records
  static constexpr int kPre = 2;
  struct Shared {
    int u_lo, u_hi;
    int first, last;
    int nc[kPre], ns[kPre], n_col[kPre];
    int64_t score_off[kPre];
  };
  __device__ void Begin(int unit, Shared& sh, RowCtx& ctx) const {
    const int slot = unit / a.num_blocks, block = unit - slot * a.num_blocks;
    const BlockGeoDev g = a.geo[block];
    ctx.key_end = g.key_end;
    ctx.block = block;
    ctx.num_slots = 1;
    ctx.slots[0] = slot;
    sh.first = g.first_pos;
    sh.last = g.last_pos;
    int lo = a.unit_first[slot * a.batch + g.seq];
    int hi = a.unit_first[slot * a.batch + g.seq + 1];
    // First chunk ending after the block's first row (chunks are in row order).
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (a.units[mid].row_end <= g.q_begin) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const int end = a.unit_first[slot * a.batch + g.seq + 1];
    int e = lo;
    while (e < end && a.units[e].row_begin < g.q_end) ++e;
    sh.u_lo = lo;
    sh.u_hi = e;
    for (int j = 0; j < kPre && lo + j < e; ++j) {
      const SaUnit& u = a.units[lo + j];
      sh.nc[j] = a.selected_n[2 * (lo + j)];
      sh.ns[j] = a.selected_n[2 * (lo + j) + 1];
      sh.n_col[j] = u.n_col;
      sh.score_off[j] = u.score_off;
    }
  }
  // Span rows (row_assembly.cuh): the spans SetBits ORs, in its order (each chunk's selected
  // column blocks, then its slash blocks; the local window last); no column bits.
  static constexpr bool kAsmSpans = true;
  __device__ void UnitSel(const Shared& sh, int ui, int* nc, int* ns, int* n_col,
                          int64_t* score_off) const {
    const int j = ui - sh.u_lo;
    if (j < kPre) {
      *nc = sh.nc[j];
      *ns = sh.ns[j];
      *n_col = sh.n_col[j];
      *score_off = sh.score_off[j];
    } else {
      *nc = a.selected_n[2 * ui];
      *ns = a.selected_n[2 * ui + 1];
      *n_col = a.units[ui].n_col;
      *score_off = a.units[ui].score_off;
    }
  }
  __device__ int NumSpans(const RowCtx&, const Shared& sh) const {
    int n = a.local_tokens > 0 ? 1 : 0;
    for (int ui = sh.u_lo; ui < sh.u_hi; ++ui) {
      int nc, ns, n_col;
      int64_t score_off;
      UnitSel(sh, ui, &nc, &ns, &n_col, &score_off);
      n += nc + ns;
    }
    return n;
  }
  __device__ void SpanAt(const RowCtx&, const Shared& sh, int i, int64_t* s, int64_t* e) const {
    const int64_t blk = a.block_size;
    for (int ui = sh.u_lo; ui < sh.u_hi; ++ui) {
      int nc, ns, n_col;
      int64_t score_off;
      UnitSel(sh, ui, &nc, &ns, &n_col, &score_off);
      if (i < nc + ns) {
        const int32_t* sel = a.selected + score_off;
        if (i < nc) {
          const int64_t cb = sel[i];
          *s = cb * blk;
          *e = (cb + 1) * blk;
        } else {
          const int64_t sb = sel[n_col + (i - nc)];
          *s = sh.first - (sb + 1) * blk + 1;
          *e = sh.last - sb * blk + 1;
        }
        return;
      }
      i -= nc + ns;
    }
    *s = static_cast<int64_t>(sh.first) - a.local_tokens + 1;  // the local window
    *e = static_cast<int64_t>(sh.last) + 1;
  }
  __device__ void SetBits(const RowCtx& ctx, const Shared& sh, uint32_t* R, uint32_t* /*C*/,
                          int64_t wbase) const {
    const int64_t blk = a.block_size;
    for (int ui = sh.u_lo; ui < sh.u_hi; ++ui) {
      const int j = ui - sh.u_lo;
      int nc, ns, n_col;
      int64_t score_off;
      if (j < kPre) {
        nc = sh.nc[j];
        ns = sh.ns[j];
        n_col = sh.n_col[j];
        score_off = sh.score_off[j];
      } else {
        const SaUnit& u = a.units[ui];
        nc = a.selected_n[2 * ui];
        ns = a.selected_n[2 * ui + 1];
        n_col = u.n_col;
        score_off = u.score_off;
      }
      const int32_t* sel = a.selected + score_off;
      for (int t = threadIdx.x; t < nc + ns; t += blockDim.x) {
        if (t < nc) {
          const int64_t cb = sel[t];
          OrSpan(R, wbase, cb * blk, (cb + 1) * blk);
        } else {
          const int64_t sb = sel[n_col + (t - nc)];
          OrSpan(R, wbase, sh.first - (sb + 1) * blk + 1, sh.last - sb * blk + 1);
        }
      }
    }
    if (a.local_tokens > 0) {
      OrSpanBlock(R, wbase, static_cast<int64_t>(sh.first) - a.local_tokens + 1,
                  static_cast<int64_t>(sh.last) + 1);
    }
  }
};

// ---- s33-sa: the record and the sort of SaSpanCountKernel by the whole warp ------------------
//
// SaSrc::Begin's fields by the warp's lanes: every lane reads the block's geometry and its
// sequence's unit range (broadcast loads), the lanes read one chunk each (chunks of a (slot, seq)
// are in row order, row_begin and row_end increasing): the chunks ending at or before the block's
// first row are a prefix (Begin's binary search finds its end), those beginning before the
// block's end too (Begin's walk stops at its end), both counted by ballots; lanes 0 .. kPre - 1
// read the first chunks' selections. Three dependent loads instead of Begin's ~8 on one lane.
__device__ __forceinline__ void SaBeginWarp(const SaSrc& src, int unit, SaSrc::Shared& sh,
                                            RowCtx& ctx, int lane) {
  const SaAsmArgs& a = src.a;
  const int slot = unit / a.num_blocks, block = unit - slot * a.num_blocks;
  const BlockGeoDev g = a.geo[block];
  const int lo0 = a.unit_first[slot * a.batch + g.seq];
  const int end = a.unit_first[slot * a.batch + g.seq + 1];
  int n_before = 0, n_begun = 0;
  for (int base = lo0; base < end; base += 32) {
    const int u = base + lane;
    bool before = false, begun = false;
    if (u < end) {
      before = a.units[u].row_end <= g.q_begin;
      begun = a.units[u].row_begin < g.q_end;
    }
    n_before += __popc(__ballot_sync(0xffffffffu, before));
    n_begun += __popc(__ballot_sync(0xffffffffu, begun));
  }
  const int lo = lo0 + n_before;
  const int e = lo0 + n_begun > lo ? lo0 + n_begun : lo;
  if (lane < SaSrc::kPre && lo + lane < e) {
    const int ui = lo + lane;
    sh.nc[lane] = a.selected_n[2 * ui];
    sh.ns[lane] = a.selected_n[2 * ui + 1];
    sh.n_col[lane] = a.units[ui].n_col;
    sh.score_off[lane] = a.units[ui].score_off;
  }
  if (lane == 0) {
    ctx.key_end = g.key_end;
    ctx.block = block;
    ctx.num_slots = 1;
    ctx.slots[0] = slot;
    sh.first = g.first_pos;
    sh.last = g.last_pos;
    sh.u_lo = lo;
    sh.u_hi = e;
  }
}

// row_assembly::AsmSortSpans' keys and length (np = 32 * R), sorted in registers instead of by
// shared-memory passes with a warp barrier per step: key i = r * 32 + lane in v[r], the bitonic
// network's exchanges across lanes by shuffles (j < 32), across registers in place (j >= 32);
// then one store of the sorted keys into buf[0, np) for the walk. A sort: the same keys in the
// same order as AsmSortSpans leaves them.
template <int R>
__device__ __forceinline__ void SaSortSpansRegs(const SaSrc& src, const RowCtx& ctx,
                                                const SaSrc::Shared& sh, int n,
                                                unsigned long long* buf, int lane) {
  const int64_t key_end = ctx.key_end;
  unsigned long long v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    v[r] = row_assembly::AsmSpanKey(src, ctx, sh, r * 32 + lane, n, key_end);
  }
  constexpr int kLog = R == 1 ? 5 : R == 2 ? 6 : R == 4 ? 7 : 8;
  static_assert(32 * R == 1 << kLog, "R is a power of two up to 8");
#pragma unroll
  for (int lk = 1; lk <= kLog; ++lk) {
    const int k = 1 << lk;
#pragma unroll
    for (int lj = lk - 1; lj >= 0; --lj) {
      const int j = 1 << lj;
      if (lj >= 5) {
        const int jr = j >> 5;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int r2 = r ^ jr;
          if (r2 > r) {
            const bool asc = ((r * 32) & k) == 0;  // lane < 32 <= j < k: k's bit is r's
            const unsigned long long x = v[r], y = v[r2];
            if ((x > y) == asc) {
              v[r] = y;
              v[r2] = x;
            }
          }
        }
      } else {
        const bool lower = (lane & j) == 0;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const unsigned long long x = v[r];
          const unsigned long long y = __shfl_xor_sync(0xffffffffu, x, j);
          const bool asc = ((r * 32 + lane) & k) == 0;
          v[r] = (lower == asc) == (x < y) ? x : y;  // lower (ascending): the smaller
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) buf[r * 32 + lane] = v[r];
  __syncwarp();
}
__device__ __forceinline__ int SaSortSpans(const SaSrc& src, const RowCtx& ctx,
                                           const SaSrc::Shared& sh, unsigned long long* buf,
                                           int lane) {
  const int n = src.NumSpans(ctx, sh);
  if (n <= 32) {
    SaSortSpansRegs<1>(src, ctx, sh, n, buf, lane);
    return 32;
  }
  if (n <= 64) {
    SaSortSpansRegs<2>(src, ctx, sh, n, buf, lane);
    return 64;
  }
  if (n <= 128) {
    SaSortSpansRegs<4>(src, ctx, sh, n, buf, lane);
    return 128;
  }
  if (n <= 256) {
    SaSortSpansRegs<8>(src, ctx, sh, n, buf, lane);
    return 256;
  }
  // Longer rows (few): the shared-memory sort (16 keys a lane would cost the common rows'
  // occupancy in registers).
  return row_assembly::AsmSortSpans(src, ctx, sh, buf, lane);
}

// ---- The lean count launch (s32-sa; sample_attention_host.cc's SaAssembleLean) ----------------
//
// row_assembly.cuh's span count kernel (AssembleSpansKernel<SaSrc, false>) with the row's record
// made in the warp (SaSrc::Begin on lane 0 into the warp's shared slice, then written out for the
// bitmap kernel and the fill launch: AssembleRecordsKernel's words) instead of by a launch
// before it; the same span rows, keys, sort and walk, so the same counts. With `kept` (else
// null) it also keeps what the fill launch's span kernel would find again: each span row's
// ranges as (start, end) pairs at kept + unit * 2 * kAsmSpanCap (a span row has at most
// span_cap <= kAsmSpanCap spans, so as many ranges), written at their ranks as that kernel
// writes them, and span_row[unit] = 1 (0 for the rows left to the bitmap kernel), for
// SaSpanCopyKernel.
//
// kWarp (s33-sa, the default): the record by SaBeginWarp and the sort by SaSortSpans (the whole
// warp; the same record fields, the same sorted keys).
template <bool kWarp>
__global__ void __launch_bounds__(row_assembly::kAsmSpanWarps * 32, kWarp ? 5 : 1)
    SaSpanCountKernel(SaSrc src, int num_units, AsmOut out, int32_t* kept, int32_t* span_row) {
  using row_assembly::AsmRec;
  using row_assembly::kAsmRecWords;
  using row_assembly::kAsmSpanCap;
  using row_assembly::kAsmSpanWarps;
  __shared__ AsmRec<SaSrc> rec_s[kAsmSpanWarps];
  __shared__ unsigned long long buf_s[kAsmSpanWarps][kAsmSpanCap];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned long long* const buf = buf_s[warp];
  AsmRec<SaSrc>& rec = rec_s[warp];
  const uint32_t* const rw = reinterpret_cast<const uint32_t*>(&rec);
  // The record's used words (AssembleRecordsKernel's): the header, then ctx.num_slots slots.
  const int header_words = static_cast<int>(
      (reinterpret_cast<const char*>(rec.ctx.slots) - reinterpret_cast<const char*>(&rec)) / 4);
  const int stride = gridDim.x * kAsmSpanWarps;
  for (int unit = blockIdx.x * kAsmSpanWarps + warp; unit < num_units; unit += stride) {
    __syncwarp();  // the previous row's reads of the record and the buffer are done
    if constexpr (kWarp) {
      SaBeginWarp(src, unit, rec.sh, rec.ctx, lane);
    } else if (lane == 0) {
      src.Begin(unit, rec.sh, rec.ctx);
    }
    __syncwarp();
    const RowCtx& ctx = rec.ctx;
    const SaSrc::Shared& sh = rec.sh;
    uint32_t* const dst = out.rec + static_cast<int64_t>(unit) * kAsmRecWords;
    for (int i = lane; i < header_words + ctx.num_slots; i += 32) dst[i] = rw[i];
    const bool span = row_assembly::AsmSpanRow(src, ctx, sh, out);
    if (kept != nullptr && lane == 0) span_row[unit] = span ? 1 : 0;
    if (!span) {
      if (lane == 0 && out.span_rest != nullptr) atomicAdd(out.span_rest, 1u);
      continue;
    }
    int32_t* const pairs =
        kept == nullptr ? nullptr : kept + static_cast<int64_t>(unit) * 2 * kAsmSpanCap;
    const int np = kWarp ? SaSortSpans(src, ctx, sh, buf, lane)
                         : row_assembly::AsmSortSpans(src, ctx, sh, buf, lane);
    int run_end;
    const int ranges = row_assembly::AsmWalkSpans<false>(buf, np, lane, pairs, &run_end);
    if (pairs != nullptr && lane == 0 && ranges > 0) pairs[2 * ranges - 1] = run_end;
    for (int si = lane; si < ctx.num_slots; si += 32) {
      const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
      out.count_ranges[row] = ranges;
      out.count_cols[row] = 0;
    }
  }
}

// The fill launch's span rows from the pairs SaSpanCountKernel kept, a warp a unit: starts and
// lengths at the row's offset, coalesced (what AssembleSpansKernel<SaSrc, true> writes). A
// sample_attention unit is one row of one slot (SaSrc::Begin: num_slots 1), row = unit.
__global__ void __launch_bounds__(256)
    SaSpanCopyKernel(int num_units, const int32_t* kept, const int32_t* span_row, AsmOut out) {
  const int lane = threadIdx.x & 31;
  const int stride = gridDim.x * (blockDim.x >> 5);
  for (int unit = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); unit < num_units;
       unit += stride) {
    if (span_row[unit] == 0) continue;
    const int64_t ro = out.off_ranges[unit];
    const int ranges = static_cast<int>(out.off_ranges[unit + 1] - ro);
    const int32_t* const pairs = kept + static_cast<int64_t>(unit) * 2 * row_assembly::kAsmSpanCap;
    for (int r = lane; r < ranges; r += 32) {
      const int2 p = reinterpret_cast<const int2*>(pairs)[r];
      out.range_start[ro + r] = p.x;
      out.range_len[ro + r] = p.y - p.x;
    }
  }
}

// Both offset arrays by one CTA (scan.cu's ScanKernel<long long, false, true> on each, in one
// launch): exclusive prefix sums in place (the fill launch's off_ranges / off_cols), the same
// as int32 into the index's indptr arrays (what LaunchNarrow64 wrote), and the two totals into
// totals[0, 2) (one copy to the host). (ptxas spills ~300 bytes here since s32-sa: 1024 threads
// cap registers at 64. 512 threads of 8 with the arrays one after the other spilled nothing but
// read ~11 us slower in the count stage on an H200: kept as is.)
constexpr int kSaScanThreads = 1024;
constexpr int kSaScanItems = 4;
__global__ void __launch_bounds__(kSaScanThreads)
    SaScanOffsetsKernel(long long* ranges, long long* cols, int64_t n, int32_t* range_indptr,
                        int32_t* col_indptr, long long* totals, const uint32_t* span_rest) {
  using Scan = cub::BlockScan<long long, kSaScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ long long carry[2];
  if (threadIdx.x < 2) carry[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kSaScanThreads * kSaScanItems) {
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      long long* const data = a == 0 ? ranges : cols;
      int32_t* const narrow = a == 0 ? range_indptr : col_indptr;
      long long items[kSaScanItems];
#pragma unroll
      for (int j = 0; j < kSaScanItems; ++j) {
        const int64_t i = base + threadIdx.x * kSaScanItems + j;
        items[j] = i < n ? data[i] : 0ll;
      }
      long long chunk_total = 0;
      Scan(temp).ExclusiveSum(items, items, chunk_total);
      const long long c = carry[a];
#pragma unroll
      for (int j = 0; j < kSaScanItems; ++j) {
        const int64_t i = base + threadIdx.x * kSaScanItems + j;
        if (i < n) {
          data[i] = items[j] + c;
          narrow[i] = static_cast<int32_t>(items[j] + c);
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) carry[a] = c + chunk_total;
      __syncthreads();
    }
  }
  if (threadIdx.x < 2) {
    const long long t = carry[threadIdx.x];
    (threadIdx.x == 0 ? ranges : cols)[n] = t;
    (threadIdx.x == 0 ? range_indptr : col_indptr)[n] = static_cast<int32_t>(t);
    totals[threadIdx.x] = t;
  }
  // s33-sa: the rows the span kernel left to the bitmap kernels, with the totals (the host
  // skips the bitmap fill launch where there are none).
  if (span_rest != nullptr && threadIdx.x == 2) totals[2] = n > 0 ? *span_rest : 0;
}

// The one pass's products by wgmma (Tile64ProductsRs) on compute capability 9.0 (the sm_90a image);
// SPATTN_SA_WGMMA=0 (read at each build): mma.sync, main's pass until session 31.
bool SaUsesWgmma() {
  if (const char* e = std::getenv("SPATTN_SA_WGMMA"); e != nullptr && e[0] == '0') return false;
  return CurrentDeviceIsSm90();
}

// The one pass's later forms, each read at every build (tests flip them between builds); "0"
// selects the form before it: SPATTN_SA_SPLIT (s35-sa2: the slash split by SaSplitStep, the same
// bits; 0: main's selects and adds), SPATTN_SA_WAVE (s36-sa: kSs, one wave; 0: the RS pass, two
// CTAs per SM), SPATTN_SA_HOIST (s36-sa2: kHoist, the descriptors once a tile and the key test
// relative to the tile; 0: s36-sa's wave kernel).
bool SaKnobOn(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || e[0] != '0';
}

// cudaFuncSetAttribute(kernel, max dynamic shared memory) once per device and process (s33-sa2:
// a driver call less per build ahead of the first launch); `done` holds a bit per device set.
template <class K>
cudaError_t SaSetSmemOnce(K* kernel, int bytes, std::atomic<uint64_t>& done) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

template <typename T, int kD>
cudaError_t SaLaunchTyped(const SaArgs& a, cudaStream_t stream) {
  constexpr int smem = SaSmemBytes<kD>();
  if (a.op_partial != nullptr) {
    const bool wg = SaUsesWgmma();
    const bool split = wg && SaKnobOn("SPATTN_SA_SPLIT");
    const bool wave = split && SaKnobOn("SPATTN_SA_WAVE");
    const bool hoist = wave && SaKnobOn("SPATTN_SA_HOIST");
    auto one = hoist   ? SaPassWaveKernel<T, kD, true>
               : wave  ? SaPassWaveKernel<T, kD, false>
               : split ? SaPassKernel<T, kD, false, kSaSlots, true, true, true>
               : wg    ? SaPassKernel<T, kD, false, kSaSlots, true, true>
                       : SaPassKernel<T, kD, false, kSaSlots, true>;
    const int one_smem = wave ? SaSsSmemBytes<kD>() : wg ? SaWgSmemBytes<kD>() : smem;
    static std::atomic<uint64_t> one_set[5];
    cudaError_t err =
        SaSetSmemOnce(one, one_smem, one_set[hoist ? 4 : wave ? 3 : split ? 2 : wg ? 1 : 0]);
    if (err != cudaSuccess) return err;
    one<<<a.num_items, kSaThreads, one_smem, stream>>>(a);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const bool lean = a.lean;  // s32-sa: the lse in SaOneCombineKernel
    if (!lean) {
      SaCombineKernel<<<a.num_units, kSaRows, 0, stream>>>(a);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    if (a.pass1_done != nullptr && (err = cudaEventRecord(a.pass1_done, stream)) != cudaSuccess) {
      return err;
    }
    const dim3 grid(a.num_units, a.op_ctas_y);
    if (lean) {
      SaOneCombineKernel<true><<<grid, 256, 0, stream>>>(a);
    } else {
      SaOneCombineKernel<false><<<grid, 256, 0, stream>>>(a);
    }
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    if (a.pass2_done != nullptr && (err = cudaEventRecord(a.pass2_done, stream)) != cudaSuccess) {
      return err;
    }
    SaCraKernel<<<a.num_units * 2, kCraThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  auto pass1 = SaPassKernel<T, kD, false>;
  auto pass2 = SaPassKernel<T, kD, true>;  // blk 16 / 32 (the one pass takes 64 and 128)
  cudaError_t err = cudaFuncSetAttribute(pass1, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(pass2, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  pass1<<<a.num_items, kSaThreads, smem, stream>>>(a);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  SaCombineKernel<<<a.num_units, kSaRows, 0, stream>>>(a);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if (a.pass1_done != nullptr && (err = cudaEventRecord(a.pass1_done, stream)) != cudaSuccess) {
    return err;
  }
  pass2<<<a.num_items, kSaThreads, smem, stream>>>(a);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  SaReduceKernel<<<a.num_units, 256, 0, stream>>>(a);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if (a.pass2_done != nullptr && (err = cudaEventRecord(a.pass2_done, stream)) != cudaSuccess) {
    return err;
  }
  SaCraKernel<<<a.num_units * 2, kCraThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace
}  // namespace assembled

cudaError_t LaunchSampleAttentionSelect(const SaArgs& a, cudaStream_t stream) {
  using namespace assembled;
  if (a.num_units == 0) return cudaSuccess;
  if (a.block_size < 16 || a.block_size > 128 || (a.block_size & (a.block_size - 1)) != 0) {
    return cudaErrorInvalidValue;
  }
  if (a.num_items > 0) {
    const bool bf16 = a.p.dtype == DType::kBF16;
    cudaError_t err = cudaErrorInvalidValue;
    if (a.p.head_dim == 64) {
      err =
          bf16 ? SaLaunchTyped<__nv_bfloat16, 64>(a, stream) : SaLaunchTyped<__half, 64>(a, stream);
    } else if (a.p.head_dim == 128) {
      err = bf16 ? SaLaunchTyped<__nv_bfloat16, 128>(a, stream)
                 : SaLaunchTyped<__half, 128>(a, stream);
    }
    return err;
  }
  // No keys anywhere: nothing is selected.
  return cudaMemsetAsync(a.selected_n, 0, sizeof(int32_t) * 2 * a.num_units, stream);
}

cudaError_t LaunchSampleAttentionLeanCount(const SaAsmArgs& a, const AsmOut& out,
                                           int32_t* range_indptr, int32_t* col_indptr,
                                           int64_t* totals, int32_t* kept, int32_t* span_row,
                                           bool warp, cudaStream_t stream) {
  using namespace assembled;
  const int num_units = a.num_slots * a.num_blocks;
  cudaError_t err = cudaSuccess;
  if (num_units > 0) {
    if (out.rec == nullptr || out.span_rest == nullptr) return cudaErrorInvalidValue;
    if ((kept == nullptr) != (span_row == nullptr)) return cudaErrorInvalidValue;
    int sms = 0;
    if ((err = row_assembly::AsmSmCount(&sms)) != cudaSuccess) return err;
    AsmOut o = out;
    o.span_cap = row_assembly::AsmSpanCapFromEnv(out.span_cap);
    const int warps = row_assembly::kAsmSpanWarps;
    const int span_grid = std::min((num_units + warps - 1) / warps, sms * 16);
    SaSrc src{a};
    if (warp) {
      SaSpanCountKernel<true>
          <<<span_grid, warps * 32, 0, stream>>>(src, num_units, o, kept, span_row);
    } else {
      SaSpanCountKernel<false>
          <<<span_grid, warps * 32, 0, stream>>>(src, num_units, o, kept, span_row);
    }
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int grid = std::min(num_units, sms * 8);
    row_assembly::AssembleKernel<SaSrc, false, true>
        <<<grid, row_assembly::kAsmThreads, 0, stream>>>(src, num_units, o);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  SaScanOffsetsKernel<<<1, kSaScanThreads, 0, stream>>>(
      reinterpret_cast<long long*>(out.count_ranges), reinterpret_cast<long long*>(out.count_cols),
      static_cast<int64_t>(num_units), range_indptr, col_indptr,
      reinterpret_cast<long long*>(totals), warp ? out.span_rest : nullptr);
  return cudaGetLastError();
}

cudaError_t LaunchScanBothOffsets(const AsmOut& out, int64_t n, int32_t* range_indptr,
                                  int32_t* col_indptr, int64_t* totals, cudaStream_t stream) {
  assembled::SaScanOffsetsKernel<<<1, assembled::kSaScanThreads, 0, stream>>>(
      reinterpret_cast<long long*>(out.count_ranges), reinterpret_cast<long long*>(out.count_cols),
      n, range_indptr, col_indptr, reinterpret_cast<long long*>(totals), nullptr);
  return cudaGetLastError();
}

cudaError_t LaunchSampleAttentionLeanFill(const SaAsmArgs& a, const AsmOut& out,
                                          const int32_t* kept, const int32_t* span_row,
                                          bool bitmap_rows, cudaStream_t stream) {
  using namespace assembled;
  if (kept == nullptr) return LaunchSampleAttentionAssemble(a, out, true, stream);
  const int num_units = a.num_slots * a.num_blocks;
  if (num_units <= 0) return cudaSuccess;
  int sms = 0;
  cudaError_t err = row_assembly::AsmSmCount(&sms);
  if (err != cudaSuccess) return err;
  AsmOut o = out;
  o.span_cap = row_assembly::AsmSpanCapFromEnv(out.span_cap);
  if (o.span_cap > 0) {
    SaSpanCopyKernel<<<std::min((num_units + 7) / 8, sms * 8), 256, 0, stream>>>(num_units, kept,
                                                                                 span_row, o);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  // The rows left to the bitmap kernel, as LaunchAssemble's fill launch (none: it would return
  // at once).
  if (!bitmap_rows) return cudaSuccess;
  static std::atomic<uint64_t> fill_set;
  err = SaSetSmemOnce(row_assembly::AssembleKernel<SaSrc, true, true>,
                      row_assembly::kAsmStageBytes, fill_set);
  if (err != cudaSuccess) return err;
  row_assembly::AssembleKernel<SaSrc, true, true>
      <<<std::min(num_units, sms * 8), row_assembly::kAsmThreads, row_assembly::kAsmStageBytes,
         stream>>>(SaSrc{a}, num_units, o);
  return cudaGetLastError();
}

cudaError_t LaunchSampleAttentionAssemble(const SaAsmArgs& a, const AsmOut& out, bool fill,
                                          cudaStream_t stream) {
  assembled::SaSrc src{a};
  return assembled::LaunchAssemble(src, a.num_slots * a.num_blocks, out, fill, stream);
}

}  // namespace cuda
}  // namespace spattn
