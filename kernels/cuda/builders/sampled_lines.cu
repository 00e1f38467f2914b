// GPU index builder of sampled_lines (issue 11): the twin of kernels/builders/sampled_lines.cc.
// See sampled_lines_kernels.h for the passes. The CPU computes the sampled rows' probabilities
// with its own exp and fp32 dot products, so masses next to a bin edge may fall in the
// neighbouring bin here: indexes agree up to such entries (build_index_gpu_test's tolerances).
#include <math_constants.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/builders/sampled_lines_bar.h"
#include "kernels/cuda/builders/assembled_common.cuh"
#include "kernels/cuda/builders/sampled_lines_kernels.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/row_assembly.cuh"
#include "kernels/cuda/common/wgmma_tile64.cuh"

namespace spattn {
namespace cuda {
namespace {

using detail::AccCol;
using detail::Exp2;  // ex2.approx.ftz: the same in every pass
using detail::LdMatrixX4;
using detail::Mma;

constexpr int kThreads = 128;
constexpr int kTile = 64;
constexpr unsigned kFull = 0xffffffffu;
// Pass 2's fixed-point mass unit: a block's masses sum to <= ~1, so bins fit u32.
constexpr float kFixedOne = 2147483648.f;
constexpr int kFixedKeyShift = 31 * 8;  // bin key (fp32 bits >> 20) of m * kFixedOne - that of m

// Shared memory: passes 1 and 3 two swizzled [64][kD] tiles (assembled_common.cuh's layout;
// buffer 1 holds the Q tile until its fragments are in registers, then both buffers take turns
// for the key tiles, loaded one tile ahead by cp.async: 4 CTAs per SM). Pass 2 one tile (Q, then
// every key tile in turn, each loaded once the warps have the previous one's products) plus the
// per-block mass histograms (fixed point, no counts): 49 KB, 4 CTAs per SM. Measured slower on an
// H100 and removed (NOTES.md "Session 22 — s22-slbuild"): pass 2 on two buffers at 65 KB / 3 CTAs
// per SM (2.59 vs 3.00 ms at 32K, 29.6 vs 30.9 ms at 128K; with one barrier per tile histogram
// 16.10 vs 20.58 ms at 128K) and passes 1 and 3 on three buffers, 48 KB, each tile loaded two
// ahead (index build 46.90 vs 47.29 ms at 128K, 4.35 vs 4.53 at 32K). Pass 3's 5-CTA wgmma
// instance (session 28, the default on sm_90a) keeps the Q tile in buffer 1 for the SS wgmma and
// loads the key tiles into buffer 0 alone, as pass 2: the same 33 KB (emit 8.64 -> 8.39-8.54 ms at
// 128K, 0.658 -> 0.628 at 32K on an H100, NOTES.md "Session 28 — s28-slemit").
struct SlSmem {
  int64_t tile, hm, total;
};
// Key buffers of pass `pass`.
__host__ __device__ inline constexpr int PassBuffers(int pass) { return pass == 2 ? 1 : 2; }
// kWg: the key tiles in wgmma's 128-byte swizzle layout (Tile64KeyOff), whose descriptors need a
// 1024-byte aligned base: 1024 bytes more to align it (tile sizes are multiples of 1024).
// Pass 2's histograms: `hist_blocks` (SlArgs::hist_blocks, the build's largest group) x kSlBins.
__host__ __device__ inline SlSmem Layout(int head_dim, int pass, bool wg = false,
                                         int hist_blocks = kSlGroupBlocks) {
  SlSmem l;
  l.tile = static_cast<int64_t>(kTile) * head_dim * 2;
  l.hm = PassBuffers(pass) * l.tile;
  l.total = pass == 2 ? l.hm + static_cast<int64_t>(hist_blocks) * kSlBins * 4 : l.hm;
  if (wg) l.total += 1024;
  return l;
}

__device__ __forceinline__ float Sanitize(float x) {
  if (isnan(x)) return -CUDART_INF_F;
  if (x == CUDART_INF_F) return FLT_MAX;
  return x;
}

// max that returns NaN when either input is NaN (fmaxf drops NaN): pass 1's fast path sees a
// NaN logit in the tile maximum.
__device__ __forceinline__ float MaxNaN(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

// The maximum of a thread's 16 accumulator entries of row half h (fragment elements 2 h, 2 h +
// 1 of every n-tile) by a tree of depth 4: MaxNaN (kNaN) or fmaxf (NaN dropped; NaN only if all
// are).
template <bool kNaN>
__device__ __forceinline__ float TreeMax(const float (&acc)[8][4], int h) {
  auto mx = [](float x, float y) { return kNaN ? MaxNaN(x, y) : fmaxf(x, y); };
  float m[8];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) m[nt] = mx(acc[nt][2 * h], acc[nt][2 * h + 1]);
#pragma unroll
  for (int w = 4; w >= 1; w >>= 1) {
#pragma unroll
    for (int i = 0; i < w; ++i) m[i] = mx(m[i], m[i + w]);
  }
  return m[0];
}

// S = Q K^T for the warp's 16 rows (A fragments `qf`, kept in registers) x the 64 keys of the
// swizzled tile at shared address `ks`: acc[n-tile][fragment].
template <typename T, int kD>
__device__ __forceinline__ void TileLogits(const uint32_t (&qf)[kD / 16][4], uint32_t ks,
                                           float (&acc)[8][4], int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      assembled::LoadB2(ks, np * 16, kk, kD / 8, lane, b);
      Mma<T>::Run(acc[2 * np], qf[kk], b[0], b[1]);
      Mma<T>::Run(acc[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }
}

// ---- Key tiles by wgmma (sm_90a; SlKnobs::wgmma) ----
//
// The same products as TileLogits from one warpgroup instruction stream: the CTA's 128 threads
// are one warpgroup, each warp's 16 rows are its 16 rows of an m64n64k16 wgmma whose A operand
// is the warp's Q fragments in registers (the mma.sync A layout, as the RS form reads them) and
// whose B operand is the key tile read from shared memory by a descriptor. Its accumulators are
// mma.sync's acc[n-tile][fragment] layout (d[4 nt + e]), so everything after the products is
// unchanged. Per warp and tile 8 instructions instead of 64 mma.sync + 32 ldmatrix.x4 (+ their
// address arithmetic), and the tile is read from shared memory once per CTA instead of once per
// warp. The key tiles are stored in the 128-byte swizzle layout the descriptor describes:
// [kD / 64 sub-tiles][64 keys][128 bytes], 16-byte chunk index XOR key % 8.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPATTN_SL_SM90A 1
#else
#define SPATTN_SL_SM90A 0
#endif

// Shared memory written by cp.async (the generic proxy) made visible to wgmma (the async proxy);
// every writer before the barrier that publishes the tile.
__device__ __forceinline__ void SlFenceProxyAsync() {
#if SPATTN_SL_SM90A
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// TileLogits by wgmma for the key tile at `ks` (Tile64KeyOff layout, 1024-byte aligned). Every
// thread of the CTA calls it (one warpgroup). The first k step does not add the accumulators
// (scale-d 0): acc starts from the products, as mma.sync's from +0 (a sum of products that is -0
// may come out +0 there; no Exp2 or comparison downstream tells them apart).
// In two halves (pass 3 runs the previous tile's flush between them, under the tensor cores'
// work): TileLogitsWgIssue starts the products, TileLogitsWgWait waits for them; code between
// the two must not touch acc or qf.
template <typename T, int kD>
__device__ __forceinline__ void TileLogitsWgIssue(const uint32_t (&qf)[kD / 16][4], uint32_t ks,
                                                  float (&acc)[8][4]) {
#if SPATTN_SL_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    Tile64Wgmma<T>::RS(acc, qf[kk], Tile64SmemDesc(ks + (kk >> 2) * (kTile * 128) + (kk & 3) * 32),
                       kk > 0 ? 1 : 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// TileLogitsWgIssue with the Q tile read from shared memory at `qs` (Tile64KeyOff layout, 1024-byte
// aligned; the SS form): the same products (the same instruction shape and k steps, only A's
// source differs).
template <typename T, int kD>
__device__ __forceinline__ void TileLogitsWgIssueSs(uint32_t qs, uint32_t ks, float (&acc)[8][4]) {
#if SPATTN_SL_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t off = (kk >> 2) * (kTile * 128) + (kk & 3) * 32;
    Tile64Wgmma<T>::SS(acc, Tile64SmemDesc(qs + off), Tile64SmemDesc(ks + off), kk > 0 ? 1 : 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void TileLogitsWgWait(float (&acc)[8][4]) {
#if SPATTN_SL_SM90A
  Tile64Wait(acc);
#else
  __trap();
#endif
}
template <typename T, int kD>
__device__ __forceinline__ void TileLogitsWg(const uint32_t (&qf)[kD / 16][4], uint32_t ks,
                                             float (&acc)[8][4]) {
  TileLogitsWgIssue<T, kD>(qf, ks, acc);
  TileLogitsWgWait(acc);
}

// Floats in their order as unsigned keys (-inf -> 0x007fffff, -0 -> 0x7fffffff, +0 ->
// 0x80000000, +inf -> 0xff800000; NaNs outside that range) and back.
__device__ __forceinline__ uint32_t OrderedKey(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float FromOrderedKey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The smallest float x with keep(x) for a keep test non-decreasing over the floats in order (by
// bisection, 32 evaluations); NaN (nothing kept) where keep(+inf) is false.
template <typename Keep>
__device__ __forceinline__ float SmallestKept(Keep keep) {
  if (!keep(CUDART_INF_F)) return CUDART_NAN_F;
  uint32_t lo = OrderedKey(-CUDART_INF_F), hi = OrderedKey(CUDART_INF_F);
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (keep(FromOrderedKey(mid))) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return FromOrderedKey(lo);
}

// Evidence rows that see key x (column) / reach offset x (diagonal): sampled_lines.cc's
// SampledLinesColumnRows / SampledLinesDiagonalRows.
__device__ __forceinline__ int ColumnRows(int fp, int lp, bool causal, int key) {
  if (!causal) return lp - fp + 1;
  const int lo = key > fp ? key : fp;
  return lp - lo + 1 > 0 ? lp - lo + 1 : 0;
}
__device__ __forceinline__ int DiagonalRows(int fp, int lp, int kl, bool causal, int offset) {
  int hi = lp;
  if (!causal && offset + kl - 1 < hi) hi = offset + kl - 1;
  const int lo = offset > fp ? offset : fp;
  return hi - lo + 1 > 0 ? hi - lo + 1 : 0;
}

// Bin i's lower edge in fixed-point units (0 for bin 0, which takes everything below bin 1).
__device__ __forceinline__ double BinEdgeFixed(int i) {
  return i == 0
             ? 0.0
             : static_cast<double>(__uint_as_float(static_cast<unsigned>(i + kSlBinFloor) << 20)) *
                   static_cast<double>(kFixedOne);
}

// Per block from its fixed-point mass histogram `bm`, the live rows' weight sum `part` and its
// entries `all`: the threshold bin (the highest whose bins from the top reach gamma * total) and a
// bound on the entries at or above it, the slice pass 3 writes into: an entry of bin i weighs >=
// edge(i) (its lower edge), i.e. >= E(i) - 1/2 fixed-point units after rounding, so bin i holds <=
// M(i) / (E(i) - 1/2) entries (+1 for the division's rounding): within 12.5 % (+1 per bin) of the
// count. Where E(thr) <= 1 (bin 0 takes everything below its edge; entries rounded to 0 units may
// sit in such bins) the bound is the block's entry count. Pass 3 writes the entries and their true
// count.
// One warp, every lane calls it and gets the result: lane l takes bins [9 l, 9 l + 9), the sums
// from the top are a suffix scan over the lanes, the threshold bin the highest whose sum from the
// top reaches the target (the sums grow as the bin falls, so that is where one walk from the top
// stops), the bound a warp sum of the bins' integer terms. Every sum is of integers, so thr and
// the bound are those of one lane walking the bins from the top (which this replaced: its serial
// walk, up to 258 steps with a double division each, held the pass-2 CTA's tail).
// Slot `slot`'s gamma: its own (heads of different gammas in one build), else the build's.
__device__ __forceinline__ float SlGamma(const SlArgs& a, int slot) {
  return a.gammas != nullptr ? a.gammas[slot] : a.gamma;
}

__device__ void BlockThresholdWarp(const unsigned* bm, float part, long long all, float gamma,
                                   int lane, int* thr_out, long long* kept_out) {
  constexpr int kPer = (kSlBins + 31) / 32;
  const double target = static_cast<double>(gamma * part);
  int thr = kSlBins;
  long long cap = 0;
  if (part > 0.f) {
    const int lo = lane * kPer;
    unsigned v[kPer];
    unsigned long long own = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      v[k] = lo + k < kSlBins ? bm[lo + k] : 0u;
      own += v[k];
    }
    unsigned long long incl = own;  // the bins of lanes >= this one
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) {
      const unsigned long long o = __shfl_down_sync(kFull, incl, x);
      if (lane + x < 32) incl += o;
    }
    unsigned long long cum = incl - own;  // the bins above this lane's
    int best = -1;
#pragma unroll
    for (int k = kPer - 1; k >= 0; --k) {
      cum += v[k];
      if (best < 0 && lo + k < kSlBins && static_cast<double>(cum) * (1.0 / kFixedOne) >= target) {
        best = lo + k;
      }
    }
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) best = max(best, __shfl_xor_sync(kFull, best, x));
    // None: gamma within rounding of 1, the bins' sum (fixed point, each row normalized by pass
    // 1's fp32 sum) may stay a hair below gamma * total; then every bin is kept.
    thr = best < 0 ? 0 : best;
    if (!(BinEdgeFixed(thr) > 1.0)) {
      cap = all;
    } else {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int i = lo + k;
        if (i < kSlBins && i >= thr && v[k] != 0u) {
          cap += static_cast<long long>(static_cast<double>(v[k]) / (BinEdgeFixed(i) - 0.5)) + 1;
        }
      }
#pragma unroll
      for (int x = 1; x < 32; x <<= 1) cap += __shfl_xor_sync(kFull, cap, x);
    }
  }
  *thr_out = thr;
  *kept_out = thr == kSlBins ? 0 : (cap < all ? cap : all);
}

// The CTA's item and slot. Default (order_band 0): blockIdx.x = item * num_slots + slot (items
// longest first, every slot of an item next to each other). order_band B > 0 (SlKnobs::
// order_band1-3, session 30): the items in bands of B (launch order); within a band the slots'
// kv-head runs (kv_run consecutive slots of one kv head) one after the other; within a run its
// items, each item's slots of the run next to each other: the CTAs in flight read few kv heads'
// key tiles. The index does not depend on the order (every CTA's work is the same).
__device__ __forceinline__ void SlCtaUnit(const SlArgs& a, int b, int* item, int* slot) {
  const int units = a.num_slots;  // CTAs per item
  if (a.order_band <= 0) {
    *item = b / units;
    *slot = b - *item * units;
    return;
  }
  const int per_run = a.kv_run;  // CTAs per (item, kv-head run)
  const int band_ctas = a.order_band * units;
  const int band = b / band_ctas, r = b - band * band_ctas;
  const int bi = min(a.order_band, a.num_items - band * a.order_band);  // items in this band
  const int run = r / (bi * per_run), r2 = r - run * (bi * per_run);
  *item = band * a.order_band + r2 / per_run;
  *slot = run * a.kv_run + (r2 - (r2 / per_run) * per_run);
}

// One pass over key tiles [tile_begin, tile_end) of one group (an item) for one head slot.
// blockIdx.x: SlCtaUnit.
// kCensus (SPATTN_SL_TILE_CENSUS=1, a separate instance so the default code is unchanged): every
// warp also counts its key tiles and those that add nothing (pass 2: skipped, no entry reaches its
// row's cut; pass 3: no entry kept) into g_sl_census, which the host prints: how much of each
// pass's tensor-core work a per-tile bound known in advance could skip.
__device__ unsigned long long g_sl_census[4];  // pass 2 tiles, skipped; pass 3 tiles, no keep

// kWg (SlKnobs::wgmma): the products by TileLogitsWg on the sm_90a image (elsewhere the
// mma.sync path of kWg false), the key tiles in its layout at a 1024-byte aligned base.
// kMinCtas: the CTAs per SM the registers are capped for (__launch_bounds__): 4 (128 registers),
// or 5 (96; the wgmma instances of passes 1 and 2, SlKnobs::ctas1 / ctas2).
template <typename T, int kD, int kPass, bool kCensus = false, bool kWg = false, int kMinCtas = 4>
__global__ void __launch_bounds__(kThreads, kMinCtas) SlPassKernel(SlArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr bool kUseWg = kWg && SPATTN_SL_SM90A;
  constexpr int kBufs = PassBuffers(kPass);
  // Pass 3's 5-CTA instance (96 registers; SlKnobs::ctas3): the Q tile stays in buffer 1 in the
  // wgmma layout and the products read it there (SS form; its 32 fragment registers would not
  // fit), the key tiles take turns in buffer 0 alone, each loaded once every warp has the previous
  // one's products (as pass 2): the same shared memory, 33 KB.
  constexpr bool kSsQ = kUseWg && kPass == 3 && kMinCtas >= 5;
  constexpr int kKeyBufs = kSsQ ? 1 : kBufs;
  const SlSmem lay = Layout(kD, kPass, kWg, a.hist_blocks);
  constexpr int kChunks = kD / 8;  // 16-byte chunks per tile row
  const uint32_t sraw = detail::SmemAddr(smem);
  const uint32_t sbuf = kWg ? (sraw + 1023u) & ~1023u : sraw;
  unsigned* hm = reinterpret_cast<unsigned*>(smem + (sbuf - sraw) + lay.hm);
  __shared__ int blk_thr[kSlGroupBlocks];
  __shared__ int blk_cursor[kSlGroupBlocks];
  __shared__ int blk_count[kSlGroupBlocks];
  __shared__ int blk_first[kSlGroupBlocks];
  __shared__ long long blk_base[kSlGroupBlocks];
  // Pass 2: per block the sum of its live rows' weights (the block's total mass: each live row's
  // masses sum to its weight, the CPU's total up to rounding) and visible keys (the cut, below).
  __shared__ float blk_wsum[kSlGroupBlocks];
  __shared__ float blk_vsum[kSlGroupBlocks];
  __shared__ int blk_vis[kSlGroupBlocks];  // pass 2: entries of the block (its rows' visible keys)
  // Session 41 (SlArgs::tile_list): per group row the Sanitize'd logit its tile bound must reach
  // (+inf: none), and the item's first kTlWords * 32 key tiles that some row needs (bit per tile).
  constexpr int kTlWords = 64;
  __shared__ float tl_need[kSlGroupRows];
  __shared__ unsigned tl_mask[kTlWords];
  __shared__ int tl_info[2];  // the walk's first tile and the first past the recorded ones
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Items longest first (the host's order); SlCtaUnit: the launch order of (item, slot).
  int item_i = 0, slot = 0;
  SlCtaUnit(a, blockIdx.x, &item_i, &slot);
  const SlItem it = a.items[item_i];
  const SlGroup g = a.groups[it.group];
  const bool split = g.parts > 1;
  const int t_begin = it.tile_begin, t_end = it.tile_end;
  const int qh = a.heads[slot];
  const int kvh = qh / a.p.group;
  const T* qg = static_cast<const T*>(a.p.q);
  const T* kg = static_cast<const T*>(a.p.k);
  // Sequence token bases from the device cu_seqlens.
  const int64_t qtok = a.p.cu_seqlens_q[g.seq];
  const int64_t ktok = a.p.cu_seqlens_k[g.seq];
  const int kl = a.p.cu_seqlens_k[g.seq + 1] - a.p.cu_seqlens_k[g.seq];
  // The wgmma path's key copies (load_keys): this thread's chunk and first row, their shared
  // offset and global address in tile 0, the bytes between key rows.
  constexpr int kRowStep = kThreads / kChunks;           // 8 (d 128) or 16 (d 64)
  constexpr int kKeyIters = kTile * kChunks / kThreads;  // 8 or 4
  static_assert(kRowStep % 8 == 0 && kKeyIters * kThreads == kTile * kChunks, "key copies");
  const int k_r0 = tid / kChunks, k_ch = tid % kChunks;
  const int64_t k_row_bytes = a.p.k_token_stride * static_cast<int64_t>(sizeof(T));
  const uint32_t k_off0 = Tile64KeyOff(k_r0, k_ch);
  const char* k_src0 = reinterpret_cast<const char*>(kg + (ktok + k_r0) * a.p.k_token_stride +
                                                     kvh * a.p.k_head_stride) +
                       k_ch * 16;
  // Key tile t's buffer: they take turns (one buffer: always 0).
  auto buf_of = [&](int t) {
    return sbuf + (kKeyBufs == 1 ? 0 : (t - t_begin) % kBufs) * static_cast<uint32_t>(lay.tile);
  };
  auto load_keys = [&](int t) {
    const int j0 = t * kTile;
    auto row_ptr = [&](int r) {
      return kg + (ktok + j0 + r) * a.p.k_token_stride + kvh * a.p.k_head_stride;
    };
    if constexpr (kUseWg) {
      // assembled::LoadTileAsync's copies into Tile64KeyOff's layout, from per-thread bases: the
      // thread's chunks are chunk k_ch of rows k_r0 + m * kRowStep, so its shared offsets are
      // k_off0 + m * kRowStep * 128 (the swizzle's row & 7 is k_r0's) and its global addresses
      // k_src0 + (j0 + m * kRowStep) rows. The generic loop's 64-bit address arithmetic per
      // chunk (a division, a row pointer, a multiply) was ~1/4 of pass 1's instructions.
      const uint32_t dst = buf_of(t) + k_off0;
      const char* src = k_src0 + static_cast<int64_t>(j0) * k_row_bytes;
      const int valid_rows = min(kTile, kl - j0);
      if (valid_rows == kTile) {
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          detail::CpAsync16(dst + m * kRowStep * 128, src, true);
          src += kRowStep * k_row_bytes;
        }
      } else {  // rows past the keys zero-filled (their source: the tile's row 0, not read)
        const char* row0 = src - static_cast<int64_t>(k_r0) * k_row_bytes;
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          const bool valid = k_r0 + m * kRowStep < valid_rows;
          detail::CpAsync16(dst + m * kRowStep * 128, valid ? src : row0, valid);
          src += kRowStep * k_row_bytes;
        }
      }
    } else {
      assembled::LoadTileAsync(buf_of(t), kTile, min(kTile, kl - j0), kChunks, row_ptr, tid,
                               kThreads);
    }
  };
  // The Q tile into the last buffer (0 with one buffer), the first key tile into buffer 0.
  const uint32_t qbuf = sbuf + (kBufs - 1) * static_cast<uint32_t>(lay.tile);
  auto q_row_ptr = [&](int r) {
    return qg + (qtok + a.rows[g.row_begin + r].q_row) * a.p.q_token_stride +
           qh * a.p.q_head_stride;
  };
  if constexpr (kSsQ) {  // Tile64KeyOff's layout (rows past the group's zero-filled)
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks, ch = i - r * kChunks;
      const bool valid = r < g.rows;
      const char* src =
          reinterpret_cast<const char*>(q_row_ptr(valid ? r : 0)) + (valid ? ch * 16 : 0);
      detail::CpAsync16(qbuf + Tile64KeyOff(r, ch), src, valid);
    }
  } else {
    assembled::LoadTileAsync(qbuf, kTile, g.rows, kChunks, q_row_ptr, tid, kThreads);
  }
  // Session 41: passes 2 and 3's one-key-buffer instances may walk only the key tiles some row
  // needs (SlArgs::tile_max; the conditions of hist_skip / logit_thr below).
  // The mma.sync instances (SlKnobs::wgmma off; elsewhere than sm_90a) walk every tile: pass 2's
  // spilled 12 bytes with the list.
  constexpr bool kListable = kUseWg && !kCensus && kKeyBufs == 1 && (kPass == 2 || kPass == 3);
  const bool use_list = kListable && a.tile_max != nullptr &&
                        (a.tile_list & (kPass == 2 ? 1 : 2)) != 0 &&
                        !(kPass == 2 ? a.hist_exact : a.emit_exact) && a.p.scale_log2 > 0.f &&
                        a.p.scale_log2 < CUDART_INF_F;
  if ((kBufs == 2 || kSsQ) && t_end > t_begin && !use_list) load_keys(t_begin);
  detail::CpAsyncCommit();

  if (kListable && tid < kTlWords) tl_mask[tid] = 0u;  // ordered by the setup barriers below
  if (kPass == 2) {
    for (int i = tid; i < g.blocks * kSlBins; i += kThreads) hm[i] = 0u;
    if (tid < kSlGroupBlocks) {
      blk_wsum[tid] = 0.f;
      blk_vsum[tid] = 0.f;
      blk_vis[tid] = 0;
    }
  }
  if (kPass == 3 && tid < g.blocks) {
    const int64_t row = static_cast<int64_t>(slot) * a.num_blocks + g.block_begin + tid;
    blk_thr[tid] = a.thr[row];
    blk_cursor[tid] = 0;
    blk_base[tid] = a.kept[row];
    blk_count[tid] = static_cast<int>(a.kept[row + 1] - a.kept[row]);
    blk_first[tid] = a.geo[g.block_begin + tid].first_pos;
  }

  // This thread's two rows (fragment rows lane/4 and lane/4 + 8 of its warp).
  int rl[2] = {warp * 16 + (lane >> 2), warp * 16 + (lane >> 2) + 8};
  int pos[2], vis[2], blk[2];
  float w[2], mx[2], inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    pos[h] = 0;
    vis[h] = 0;
    blk[h] = 0;
    w[h] = 0.f;
    mx[h] = -CUDART_INF_F;
    inv[h] = 0.f;
    if (rl[h] < g.rows) {
      const SlRow r = a.rows[g.row_begin + rl[h]];
      pos[h] = r.pos;
      vis[h] = a.p.causal ? r.pos + 1 : kl;
      blk[h] = r.block - g.block_begin;
      w[h] = r.w;
      if (kPass >= 2) {
        const int64_t at = static_cast<int64_t>(slot) * a.num_rows + g.row_begin + rl[h];
        mx[h] = a.row_max2[at];
        inv[h] = a.row_inv[at];
      }
    }
  }
  // Pass 2 skips the histogram update of entries below a per-block cut bin `cut`: a row whose
  // probabilities sum to ~1 has mass ~w, so a block's total is the sum of w over its live rows
  // (within rounding; >= 0.99 of it is all the bound uses), while the entries in bins below `cut`
  // weigh < (visible keys of its rows) * (lower edge of bin cut). The cut is the highest bin whose
  // lower edge keeps that product <= half of (1 - gamma) * 0.99 * the total, so the mass above the
  // cut alone reaches gamma * total: the threshold bin is >= cut and neither it nor the kept count
  // (both from bins >= thr) changes.
  // Pass 2 works on t = m * 2^31 (m's fixed-point mass before rounding; for a normal m its bits are
  // m's plus 31 << 23), taken as RN(RN(e * inv) * (w * 2^31)): the same as RN(m * 2^31) for
  // every normal m, and < 1/2 where m is subnormal (then neither counts). An entry counts iff t >=
  // t_min (bin key >= cut, and RN(t) > 0, i.e. t > 1/2); its slot is (bits(t) >> 20) + slot_base.
  float w2[2] = {0.f, 0.f}, t_min[2] = {CUDART_INF_F, CUDART_INF_F};
  int slot_base[2] = {0, 0};
  // Pass 2 skips a warp's tile when none of its raw products q . k reaches its row's x_cut, the
  // smallest float whose entry counts (t >= t_min as a function of q . k is monotone, as pass 3's
  // keep test, below): such a tile adds nothing to the histograms. Off with hist_exact.
  const bool hist_skip =
      kPass == 2 && !a.hist_exact && a.p.scale_log2 > 0.f && a.p.scale_log2 < CUDART_INF_F;
  float x_cut[2] = {CUDART_NAN_F, CUDART_NAN_F};
  if (kPass == 2) {
    int cut[2] = {0, 0};
    __syncthreads();  // blk_* zeroed
    if ((lane & 3) == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (rl[h] < g.rows && mx[h] != -CUDART_INF_F && inv[h] > 0.f) {
          atomicAdd(blk_wsum + blk[h], w[h]);
          atomicAdd(blk_vsum + blk[h], static_cast<float>(vis[h]));
          atomicAdd(blk_vis + blk[h], vis[h]);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float vs = blk_vsum[blk[h]];
      const float bound =
          vs > 0.f ? 0.5f * (1.f - SlGamma(a, slot)) * 0.99f * blk_wsum[blk[h]] / vs : 0.f;
      if (bound > 0.f && bound < 1.f) {
        const int key = static_cast<int>(__float_as_uint(bound) >> 20) - kSlBinFloor;
        cut[h] = key < 0 ? 0 : (key >= kSlBins ? kSlBins - 1 : key);
      }
      w2[h] = w[h] * kFixedOne;
      t_min[h] = fmaxf(
          __uint_as_float(0x3f000001u),  // the float after 1/2
          __uint_as_float(static_cast<unsigned>(cut[h] + kSlBinFloor + kFixedKeyShift) << 20));
      slot_base[h] = blk[h] * kSlBins - kSlBinFloor - kFixedKeyShift;
      // The count test of the masked path below as a function of x = q . k (the plain path's t
      // is the same for every non-NaN x there, and NaN counts in neither).
      if (hist_skip && rl[h] < g.rows && mx[h] != -CUDART_INF_F) {
        x_cut[h] = SmallestKept([&](float x) {
          const float l2 = Sanitize(__fmul_rn(x, a.p.scale_log2));
          const float t = __fmul_rn(__fmul_rn(Exp2(__fsub_rn(l2, mx[h])), inv[h]), w2[h]);
          return t >= t_min[h];
        });
      }
      // Session 41: an entry that counts has x >= x_cut, so Sanitize(x * scale_log2) >= need
      // (both round monotonically); NaN x_cut: nothing of the row counts.
      if (use_list && (lane & 3) == 0) {
        tl_need[rl[h]] =
            isnan(x_cut[h]) ? CUDART_INF_F : Sanitize(__fmul_rn(x_cut[h], a.p.scale_log2));
      }
    }
  }
  // Pass 3: the rows' threshold bins as masses (for m > 0, SampledLinesBin(m) >= thr <=> m >= the
  // lower edge of bin thr, 0 for bin 0; +inf keeps nothing) and their blocks' peer lanes (the lanes
  // of one block are consecutive: rows are ordered by block), for one cursor atomic per block and
  // tile: the block's shared cursor, or for a split group the global one in `counts`.
  float thr_m[2] = {CUDART_INF_F, CUDART_INF_F};
  unsigned peers[2] = {0u, 0u};
  int first_l[2] = {0, 0}, last_l[2] = {0, 0};  // the first / last lane of the row's block
  // Pass 3 keeps an entry iff its raw product q . k >= x_thr (see below), unless emit_exact.
  const bool logit_thr =
      kPass == 3 && !a.emit_exact && a.p.scale_log2 > 0.f && a.p.scale_log2 < CUDART_INF_F;
  float x_thr[2] = {CUDART_NAN_F, CUDART_NAN_F};
  int rel[2] = {0, 0};  // row position relative to its block's first row position
  // Pass 3: each row's slice (its block's) in registers, read once after the setup barrier
  // below (the flush, further down): the flush loop read both from shared memory per kept entry
  // (two dependent loads in every round).
  int slice_cap[2] = {0, 0};
  int32_t* slice[2] = {a.entries, a.entries};
  if (kPass == 3) {
    __syncthreads();  // blk_* written
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool live = rl[h] < g.rows && mx[h] != -CUDART_INF_F;
      slice_cap[h] = blk_count[blk[h]];
      slice[h] = a.entries + blk_base[blk[h]];
      if (live) {
        const int thr = blk_thr[blk[h]];
        rel[h] = pos[h] - blk_first[blk[h]];
        if (thr < kSlBins) {
          thr_m[h] =
              thr == 0 ? 0.f : __uint_as_float(static_cast<unsigned>(thr + kSlBinFloor) << 20);
        }
      }
      peers[h] = __match_any_sync(kFull, live ? blk[h] : -1 - warp);
      first_l[h] = __ffs(peers[h]) - 1;
      last_l[h] = 31 - __clz(peers[h]);
      // The keep test below as a function of the raw product x = q . k: Sanitize, the products
      // and subtraction round monotonically (scale > 0, inv and w >= 0) and Exp2 is non-decreasing
      // over every float (ex2.approx.ftz on sm_90, checked exhaustively by
      // sampled_lines_gpu_test), so keep(x) <=> x >= the smallest float x with keep(x): found by
      // bisection over the floats in order; NaN (never kept) where keep(+inf) is false.
      if (logit_thr) {
        auto keep_x = [&](float x) {
          const float l2 = Sanitize(__fmul_rn(x, a.p.scale_log2));
          const float m = __fmul_rn(__fmul_rn(Exp2(__fsub_rn(l2, mx[h])), inv[h]), w[h]);
          return m > 0.f && m >= thr_m[h];
        };
        if (live) x_thr[h] = SmallestKept(keep_x);
      }
      // Session 41: as pass 2's, for the keep test (NaN x_thr: nothing of the row is kept).
      if (use_list && (lane & 3) == 0) {
        tl_need[rl[h]] =
            isnan(x_thr[h]) ? CUDART_INF_F : Sanitize(__fmul_rn(x_thr[h], a.p.scale_log2));
      }
    }
  }
  // Pass 3's slots of one tile are taken from the cursor in that tile and used in the next (the
  // atomic's latency, global for a split group, behind the next tile's products).
  uint32_t p_keep = 0;
  bool p_any = false;
  int p_j0 = 0, p_base[2] = {0, 0}, p_at[2] = {0, 0};
  auto flush = [&]() {
    if (!p_any) return;  // warp-uniform
    int at0 = __shfl_sync(kFull, p_base[0], last_l[0]) + p_at[0];
    int at1 = __shfl_sync(kFull, p_base[1], last_l[1]) + p_at[1];
    // Key j = p_j0 + AccCol(b >> 2, b & 3, lane) = jb + (b >> 2) * 8 + (b & 1).
    const int jb = p_j0 + (lane & 3) * 2;
    const int code0 = rel[0] * kl + jb, code1 = rel[1] * kl + jb;
    // Only the kept bits, lowest first (a warp runs as many rounds as its fullest lane).
    for (uint32_t k = p_keep; k != 0u; k &= k - 1u) {
      const int b = __ffs(k) - 1;  // nt * 4 + e
      const int jo = (b >> 2) * 8 + (b & 1);
      if ((b >> 1) & 1) {
        if (at1 < slice_cap[1]) slice[1][at1] = code1 + jo;
        ++at1;
      } else {
        if (at0 < slice_cap[0]) slice[0][at0] = code0 + jo;
        ++at0;
      }
    }
  };
  float run_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
  float run_sum[2] = {0.f, 0.f};
  // Passes 1 and 2: the keys every row of the warp sees (-1 if a row of the warp is past the
  // group's): tiles below it need no mask.
  int warp_vis = min(rl[0] < g.rows ? vis[0] : -1, rl[1] < g.rows ? vis[1] : -1);
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) warp_vis = min(warp_vis, __shfl_xor_sync(kFull, warp_vis, x));

  // Session 41: the item's tiles some row needs (tile bound >= the row's need; NaN bounds kept),
  // from pass 1's records (16-byte loads: 8 rows of one tile a thread), then the walk's first.
  // The walk's state in shared memory (tl_info; read per tile, not held in registers through the
  // products: pass 3's 96-register instance spilled with it in registers).
  const int tl_n = min(t_end - t_begin, kTlWords * 32);
  auto next_tile = [&](int t) -> int {  // CTA-uniform
    // Pass 2 keeps the walk's state in registers, pass 3 reads it from shared memory (where each
    // keeps ptxas from spilling: pass 2's 96-register instance spills less than main's this way).
    const int base = kPass == 2 ? t_begin : tl_info[0];
    const int end = kPass == 2 ? (use_list ? t_begin + tl_n : INT_MIN) : tl_info[1];
    if (t + 1 >= end) return t + 1;  // past the recorded tiles (or the item): every one
    const int i = t + 1 - base;
    int wd = i >> 5;
    unsigned m = tl_mask[wd] & (~0u << (i & 31));
    while (m == 0u) {
      if (++wd * 32 >= end - base) return end;
      m = tl_mask[wd];
    }
    return base + wd * 32 + __ffs(m) - 1;
  };
  if (kListable && kPass == 3 && tid == 0) {
    tl_info[0] = t_begin;
    tl_info[1] = use_list ? t_begin + tl_n : INT_MIN;  // INT_MIN: no list, every tile
  }
  int t_first = t_begin;
  if (use_list) {
    __syncthreads();  // tl_need written, tl_mask zeroed
    const int c = tid & 7;
    float nd[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) nd[r] = tl_need[c * 8 + r];
    const uint16_t* rec = a.tile_max + slot * a.tile_stride +
                          static_cast<int64_t>(g.tile_base + t_begin) * kSlGroupRows + c * 8;
    for (int i = tid >> 3; i < tl_n; i += kThreads / 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(rec + static_cast<int64_t>(i) * kSlGroupRows);
      const unsigned u[4] = {v.x, v.y, v.z, v.w};
      bool need = false;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        need |= !(__uint_as_float(u[k] << 16) < nd[2 * k]);
        need |= !(__uint_as_float(u[k] & 0xffff0000u) < nd[2 * k + 1]);
      }
      if (need) atomicOr(tl_mask + (i >> 5), 1u << (i & 31));
    }
    __syncthreads();
    t_first = next_tile(t_begin - 1);
    if constexpr (kSsQ) {
      if (t_first < t_end) load_keys(t_first);
      detail::CpAsyncCommit();
    }
  }

  // The Q fragments into registers. With two buffers the Q buffer takes a key tile only after the
  // first iteration's barrier, which every warp reaches with its fragments loaded.
  uint32_t qf[kD / 16][4];
  if constexpr (!kSsQ) {
    detail::CpAsyncWait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      assembled::LoadA(qbuf, warp * 16, kk, kChunks, lane, qf[kk]);
    }
  }
  // One buffer (pass 2): the Q tile has left it, the first key tile goes in; each next tile is
  // loaded as soon as every warp has its products of the current one, behind that tile's
  // histogram work (before, each tile's load waited for the previous tile's updates).
  if (kBufs == 1) {
    __syncthreads();
    if (t_first < t_end) {
      load_keys(t_first);
      detail::CpAsyncCommit();
    }
  }

  unsigned census_tiles = 0, census_none = 0;  // kCensus: this warp's tiles, those adding nothing
  int t_next = t_first;
  for (int t = t_first; t < t_end; t = t_next) {
    t_next = t + 1;
    const int j0 = t * kTile;
    if (kCensus) ++census_tiles;
    detail::CpAsyncWait<0>();
    if (kUseWg) SlFenceProxyAsync();  // this thread's copies of tile t, for wgmma
    // Key tile t is in for every warp, and (two buffers) every warp is past tile t - 1, so its
    // buffer (the Q buffer for t_begin) takes tile t + 1, loaded behind tile t's work: one barrier
    // per tile (before, tile t + 1 was loaded ahead of this barrier and a second one after the
    // products had to free tile t's buffer).
    __syncthreads();
    // The next tile (tl_info / tl_mask were written before this barrier): pass 3 here, before
    // its products; pass 2 at its load below (where each placement keeps ptxas from spilling).
    if (kListable && kPass == 3) t_next = next_tile(t);
    if (kKeyBufs == 2) {
      if (t + 1 < t_end) load_keys(t + 1);
      detail::CpAsyncCommit();
    }
    // Pass 3: the previous tile's entries before this tile's products (acc is not live yet),
    // with wgmma while the tensor cores compute them.
    if (kPass == 3 && !kUseWg) flush();
    float acc[8][4];
    if constexpr (kUseWg) {
      if constexpr (kSsQ) {
        TileLogitsWgIssueSs<T, kD>(qbuf, buf_of(t), acc);
        if (!a.emit_flush_late) flush();
      } else {
        TileLogitsWgIssue<T, kD>(qf, buf_of(t), acc);
        if (kPass == 3) flush();
      }
      TileLogitsWgWait(acc);
    } else {
      TileLogits<T, kD>(qf, buf_of(t), acc, lane);
    }
    if (kKeyBufs == 1) {
      __syncthreads();  // every warp has read tile t: the buffer takes the next tile
      if (kListable && kPass == 2) t_next = next_tile(t);
      if (t_next < t_end) {
        load_keys(t_next);
        detail::CpAsyncCommit();
      }
    }
    // SlArgs::emit_flush_late: the previous tile's entries under tile t + 1's load instead.
    if (kSsQ && a.emit_flush_late) flush();
    if (kPass == 1) {
      // Log2-domain logits of this thread's entries (-inf where masked), then one rescale of
      // each row's running sum per tile. Fast path (same sums, bit for bit): a tile every row of
      // the warp sees whole needs no mask, and where the thread's tile maxima are finite
      // (MaxNaN: no NaN either) every logit is finite or -inf, so neither Sanitize nor the -inf
      // test of the sum changes anything (Exp2(-inf) adds +0).
      float tmax[2] = {-CUDART_INF_F, -CUDART_INF_F};
      bool fast = j0 + kTile <= warp_vis;  // warp-uniform
      if (fast) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] = __fmul_rn(acc[nt][e], a.p.scale_log2);
        }
        // Each row half's maximum by a tree (depth 4; was a chain of 16): MaxNaN's value does
        // not depend on the order (a NaN anywhere gives NaN; otherwise the largest value, up to
        // the sign of a zero maximum, which changes no Exp2 below).
#pragma unroll
        for (int h = 0; h < 2; ++h) tmax[h] = TreeMax<true>(acc, h);
        fast = isfinite(tmax[0]) && isfinite(tmax[1]);
        if (!fast) {
          tmax[0] = tmax[1] = -CUDART_INF_F;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[nt][e] = Sanitize(acc[nt][e]);
              tmax[e >> 1] = fmaxf(tmax[e >> 1], acc[nt][e]);
            }
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            const int j = j0 + AccCol(nt, e, lane);
            const bool valid = rl[h] < g.rows && j < vis[h];
            const float l2 =
                valid ? Sanitize(__fmul_rn(acc[nt][e], a.p.scale_log2)) : -CUDART_INF_F;
            acc[nt][e] = l2;
            tmax[h] = fmaxf(tmax[h], l2);
          }
        }
      }
      // Session 41 (SlArgs::tile_max): the rows' tile maxima (Sanitize'd logits of visible keys,
      // -inf where none), rounded up to bf16, for passes 2 and 3's tile lists.
      if (a.tile_max != nullptr) {
        uint16_t* rec = a.tile_max + slot * a.tile_stride +
                        static_cast<int64_t>(g.tile_base + t) * kSlGroupRows;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float m = fmaxf(tmax[h], __shfl_xor_sync(kFull, tmax[h], 1));
          m = fmaxf(m, __shfl_xor_sync(kFull, m, 2));
          if ((lane & 3) == 0) rec[rl[h]] = __bfloat16_as_ushort(__float2bfloat16_ru(m));
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (tmax[h] > run_max[h]) {
          if (run_max[h] != -CUDART_INF_F) {
            run_sum[h] = __fmul_rn(run_sum[h], Exp2(__fsub_rn(run_max[h], tmax[h])));
          }
          run_max[h] = tmax[h];
        }
      }
      if (fast) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            run_sum[e >> 1] += Exp2(__fsub_rn(acc[nt][e], run_max[e >> 1]));
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            if (acc[nt][e] != -CUDART_INF_F) {
              run_sum[h] += Exp2(__fsub_rn(acc[nt][e], run_max[h]));
            }
          }
        }
      }
      continue;
    }
    if (kPass == 2) {
      // All of the thread's masses and histogram slots first (independent chains), then the
      // updates: one fixed-point atomic per entry at or above its block's cut. An entry counts
      // iff its fixed-point mass mu is > 0 (so m > 2^-32, and its bin key (fp32 bits >> 20) -
      // kSlBinFloor is in [1, 257]: no clamp as in SampledLinesBin) and the key is >= cut: one
      // test t >= t_min (above; NaN fails it). Plain path (same masses bit for bit): a tile every
      // row of the warp sees whole needs no mask, and where the rows' maxima are below FLT_MAX no
      // logit is +inf, so Sanitize changes nothing that counts (NaN and -inf give t NaN or 0
      // either way), nor does a dead row (mx -inf, inv 0: t is NaN or 0).
      if (hist_skip) {
        // Some product >= its row's x_cut <=> the row half's largest non-NaN product is (fmaxf
        // drops NaN, which is never >= x_cut): a tree (depth 4) instead of a chain of 32 tests.
        const bool any = TreeMax<false>(acc, 0) >= x_cut[0] || TreeMax<false>(acc, 1) >= x_cut[1];
        if (!__any_sync(kFull, any)) {
          if (kCensus) ++census_none;
          continue;
        }
      }
      const bool plain = j0 + kTile <= warp_vis && mx[0] < FLT_MAX && mx[1] < FLT_MAX;
      // Every entry's t first (the plain / masked choice once per tile, so the 32 chains are one
      // block of independent chains: with the choice per entry, each entry's chain was its own
      // branch block), then one shared update per counted entry (t >= t_min; NaN fails): slot
      // (bits(t) >> 20) + slot_base, fixed-point mass RN(t).
      float tv[8][4];
      if (plain) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            const float l2 = __fmul_rn(acc[nt][e], a.p.scale_log2);
            tv[nt][e] = __fmul_rn(__fmul_rn(Exp2(__fsub_rn(l2, mx[h])), inv[h]), w2[h]);
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            const int j = j0 + AccCol(nt, e, lane);
            float t = 0.f;
            if (rl[h] < g.rows && j < vis[h] && mx[h] != -CUDART_INF_F) {
              const float l2 = Sanitize(__fmul_rn(acc[nt][e], a.p.scale_log2));
              t = __fmul_rn(__fmul_rn(Exp2(__fsub_rn(l2, mx[h])), inv[h]), w2[h]);
            }
            tv[nt][e] = t;
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          if (tv[nt][e] >= t_min[h]) {
            atomicAdd(hm + static_cast<int>(__float_as_uint(tv[nt][e]) >> 20) + slot_base[h],
                      __float2uint_rn(tv[nt][e]));
          }
        }
      }
      continue;
    }
    // Pass 3: the previous tile's entries, then which of this thread's entries are kept (bit nt * 4
    // + e), then per row half one slot range of its block's slice per tile (a scan over the warp's
    // lanes, one atomic by the last lane of each block's lanes); the entries are (row position -
    // block's first row position) * k_len + key; SlClassifyKernel makes them columns or diagonals.
    uint32_t keep = 0;
    if (logit_thr && j0 + kTile <= warp_vis) {  // every row of the warp sees the whole tile
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (acc[nt][e] >= x_thr[e >> 1]) keep |= 1u << (nt * 4 + e);
        }
      }
    } else if (logit_thr) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int j = j0 + AccCol(nt, e, lane);
          if (j < vis[h] && acc[nt][e] >= x_thr[h]) keep |= 1u << (nt * 4 + e);
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int j = j0 + AccCol(nt, e, lane);
          const float l2 = Sanitize(__fmul_rn(acc[nt][e], a.p.scale_log2));
          const float m = __fmul_rn(__fmul_rn(Exp2(__fsub_rn(l2, mx[h])), inv[h]), w[h]);
          if (j < vis[h] && m > 0.f && m >= thr_m[h]) keep |= 1u << (nt * 4 + e);
        }
      }
    }
    p_keep = keep;
    p_j0 = j0;
    p_any = __any_sync(kFull, keep != 0);
    if (kCensus && !p_any) ++census_none;
    if (!p_any) continue;
    // Bit nt * 4 + e belongs to row half e >> 1.
    const int cnt[2] = {__popc(keep & 0x33333333u), __popc(keep & 0xccccccccu)};
    // Both halves' inclusive scans in one (half 1 in the high 16 bits: a half's sum over the
    // warp is <= 32 x 16 = 512, so neither spills into the other).
    int incl2 = cnt[0] | (cnt[1] << 16);
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) {
      const int o = __shfl_up_sync(kFull, incl2, x);
      if (lane >= x) incl2 += o;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int incl = h ? incl2 >> 16 : incl2 & 0xffff;
      const int first = first_l[h], last = last_l[h];
      const int before = __shfl_sync(kFull, incl, first > 0 ? first - 1 : 0);
      const int seg_before = first > 0 ? before : 0;
      const int seg_total = __shfl_sync(kFull, incl, last) - seg_before;
      p_base[h] = 0;
      if (lane == last && thr_m[h] != CUDART_INF_F && seg_total > 0)
        p_base[h] = atomicAdd(
            split ? a.counts + static_cast<int64_t>(slot) * a.num_blocks + g.block_begin + blk[h]
                  : blk_cursor + blk[h],
            seg_total);
      p_at[h] = incl - cnt[h] - seg_before;
    }
  }
  if (kCensus && lane == 0 && kPass >= 2) {
    atomicAdd(g_sl_census + 2 * (kPass - 2), static_cast<unsigned long long>(census_tiles));
    atomicAdd(g_sl_census + 2 * (kPass - 2) + 1, static_cast<unsigned long long>(census_none));
  }
  if (kPass == 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = run_max[h], s = run_sum[h];
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        const float om = __shfl_xor_sync(kFull, m, x);
        const float os = __shfl_xor_sync(kFull, s, x);
        const float nm = fmaxf(m, om);
        float ns = 0.f;
        if (nm != -CUDART_INF_F) {
          ns = (m == -CUDART_INF_F ? 0.f : s * Exp2(m - nm)) +
               (om == -CUDART_INF_F ? 0.f : os * Exp2(om - nm));
        }
        m = nm;
        s = ns;
      }
      if ((lane & 3) == 0 && rl[h] < g.rows) {
        if (split) {  // merged by SlMergeStatsKernel
          const int64_t at =
              (static_cast<int64_t>(slot) * a.num_items + g.part_begin + it.split) * kSlGroupRows +
              rl[h];
          a.part_max[at] = m;
          a.part_sum[at] = s;
        } else {
          const int64_t at = static_cast<int64_t>(slot) * a.num_rows + g.row_begin + rl[h];
          a.row_max2[at] = m;
          a.row_inv[at] = (m == -CUDART_INF_F || !(s > 0.f)) ? 0.f : 1.f / s;
        }
      }
    }
  } else if (kPass == 2) {
    __syncthreads();
    if (split) {
      // This item's bins into the group's global histograms (SlSplitThresholdKernel takes it
      // from there); split 0 also leaves the blocks' weight sums and entry counts.
      const int64_t hb = static_cast<int64_t>(slot) * a.split_blocks + g.split_block;
      unsigned* gh = a.split_hist + hb * kSlBins;
      for (int i = tid; i < g.blocks * kSlBins; i += kThreads) {
        const unsigned v = hm[i];
        if (v != 0u) atomicAdd(gh + i, v);
      }
      if (it.split == 0 && tid < g.blocks) {
        a.split_wsum[hb + tid] = blk_wsum[tid];
        a.split_vis[hb + tid] = blk_vis[tid];
      }
    } else {
      for (int b = warp; b < g.blocks; b += kThreads / 32) {
        int thr;
        long long cap;
        BlockThresholdWarp(hm + b * kSlBins, blk_wsum[b], blk_vis[b], SlGamma(a, slot), lane, &thr,
                           &cap);
        if (lane == 0) {
          const int64_t row = static_cast<int64_t>(slot) * a.num_blocks + g.block_begin + b;
          a.thr[row] = thr;
          a.kept[row] = cap;
        }
      }
    }
  } else if (kPass == 3) {
    flush();
    __syncthreads();  // every cursor final
    if (!split && tid < g.blocks) {
      const int64_t row = static_cast<int64_t>(slot) * a.num_blocks + g.block_begin + tid;
      a.counts[row] = min(blk_cursor[tid], blk_count[tid]);
    }
  }
}

// Split groups' rows: their items' (max, sum) merged in split order into row_max2 / row_inv.
__global__ void SlMergeStatsKernel(SlArgs a) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= static_cast<int64_t>(a.num_slots) * a.num_rows) return;
  const int slot = static_cast<int>(u / a.num_rows), r = static_cast<int>(u % a.num_rows);
  const SlGroup g = a.groups[a.rows[r].group];
  if (g.parts <= 1) return;
  const int64_t base =
      (static_cast<int64_t>(slot) * a.num_items + g.part_begin) * kSlGroupRows + (r - g.row_begin);
  float m = -CUDART_INF_F;
  for (int s = 0; s < g.parts; ++s) m = fmaxf(m, a.part_max[base + s * kSlGroupRows]);
  float sum = 0.f;
  if (m != -CUDART_INF_F) {
    for (int s = 0; s < g.parts; ++s) {
      const float ms = a.part_max[base + s * kSlGroupRows];
      if (ms != -CUDART_INF_F) sum += a.part_sum[base + s * kSlGroupRows] * Exp2(ms - m);
    }
  }
  a.row_max2[u] = m;
  a.row_inv[u] = (m == -CUDART_INF_F || !(sum > 0.f)) ? 0.f : 1.f / sum;
}

// Split groups' blocks, one warp each: thr and the kept bound from the global histogram.
__global__ void SlSplitThresholdKernel(SlArgs a) {
  __shared__ unsigned h[4][kSlBins];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * 4 + warp;  // slot * split_blocks + block
  if (u >= static_cast<int64_t>(a.num_slots) * a.split_blocks) return;
  for (int i = lane; i < kSlBins; i += 32) h[warp][i] = a.split_hist[u * kSlBins + i];
  __syncwarp();
  int thr;
  long long cap;
  const int slot = static_cast<int>(u / a.split_blocks);
  BlockThresholdWarp(h[warp], a.split_wsum[u], a.split_vis[u], SlGamma(a, slot), lane, &thr, &cap);
  if (lane == 0) {
    const int block = a.split_block_ids[u % a.split_blocks];
    const int64_t row = static_cast<int64_t>(slot) * a.num_blocks + block;
    a.thr[row] = thr;
    a.kept[row] = cap;
  }
}

// Split groups' rows: the global cursor clamped to the slice (a no-op for the others).
__global__ void SlClampCountsKernel(SlArgs a) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= static_cast<int64_t>(a.num_slots) * a.num_blocks) return;
  a.counts[u] = min(a.counts[u], static_cast<int>(a.kept[u + 1] - a.kept[u]));
}

// Exp2's inversions over the floats in order: pairs of neighbours x < y with Exp2(x) > Exp2(y).
__global__ void SlExp2InversionsKernel(unsigned long long* count) {
  const uint64_t lo = 0x007fffffu, hi = 0xff800000u;  // -inf .. +inf
  unsigned long long n = 0;
  for (uint64_t k = lo + static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < hi;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = FromOrderedKey(static_cast<uint32_t>(k));
    const float y = FromOrderedKey(static_cast<uint32_t>(k + 1));
    if (Exp2(x) > Exp2(y)) ++n;
  }
  if (n > 0) atomicAdd(count, n);
}

// CountSampledLinesTileMismatches: per CTA one tile of 64 query rows x 64 keys of pseudo-random
// values (magnitudes and signs varied per tile: scales 2^-8 .. 2^8, heavy outliers, zeros, runs
// of equal values, mixed-sign sums that cancel), its products by TileLogits (mma.sync, from the
// swizzled tiles of the passes with kWg false) and by TileLogitsWg (wgmma, Tile64KeyOff's layout),
// compared bit for bit (two NaNs count as equal: every NaN is treated alike downstream).
__device__ __forceinline__ uint32_t SlHash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__device__ __forceinline__ float SlTestValue(uint64_t seed, int tile, int m, int r, int c) {
  const uint32_t ht = SlHash(seed * 1315423911ull + static_cast<uint64_t>(tile) * 4 + m);
  const uint32_t h = SlHash((static_cast<uint64_t>(ht) << 20) ^ (static_cast<uint64_t>(r) << 8) ^
                            static_cast<uint64_t>(c) ^ (static_cast<uint64_t>(m) << 40));
  // Sum of two uniforms in [-1, 1): a triangular spread around 0.
  float v = (static_cast<float>(h & 0xffff) - 32768.f) / 32768.f +
            (static_cast<float>(h >> 16) - 32768.f) / 32768.f;
  const int kind = ht % 8;
  v *= exp2f(static_cast<float>(static_cast<int>(ht >> 8) % 17 - 8));
  if (kind == 1 && (h % 61) == 0) v *= 4096.f;                   // a few heavy outliers
  if (kind == 2 && (h % 3) == 0) v = 0.f;                        // zeros
  if (kind == 3) v = (c & 1) ? 1.f : -1.f;                       // cancelling sums
  if (kind == 4 && m == 1) v = static_cast<float>(r % 5) - 2.f;  // equal keys
  if (kind == 5) v = ldexpf(v, (h >> 28) * 2 - 15);              // per-element exponents
  return v;
}
template <typename T>
__device__ __forceinline__ unsigned short SlTestBits(float v);
template <>
__device__ __forceinline__ unsigned short SlTestBits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <>
__device__ __forceinline__ unsigned short SlTestBits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    SlTileCheckKernel(uint64_t seed, unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kChunks = kD / 8;
  constexpr uint32_t kTileBytes = kTile * kD * 2;
  const uint32_t sraw = detail::SmemAddr(smem);
  const uint32_t sbuf = (sraw + 1023u) & ~1023u;
  unsigned char* base = smem + (sbuf - sraw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Q (swizzled as the passes' Q tile), K as the mma.sync passes hold it, K in Tile64KeyOff's
  // layout.
  for (int i = tid; i < kTile * kD; i += kThreads) {
    const int r = i / kD, c = i - r * kD;
    const unsigned short q = SlTestBits<T>(SlTestValue(seed, blockIdx.x, 0, r, c));
    const unsigned short k = SlTestBits<T>(SlTestValue(seed, blockIdx.x, 1, r, c));
    *reinterpret_cast<unsigned short*>(base + assembled::TileElemOff(r, c, kChunks)) = q;
    *reinterpret_cast<unsigned short*>(base + kTileBytes + assembled::TileElemOff(r, c, kChunks)) =
        k;
    *reinterpret_cast<unsigned short*>(base + 2 * kTileBytes + Tile64KeyOff(r, c >> 3) +
                                       (c & 7) * 2) = k;
    // Q in Tile64KeyOff's layout too: pass 3's SS form (TileLogitsWgIssueSs).
    *reinterpret_cast<unsigned short*>(base + 3 * kTileBytes + Tile64KeyOff(r, c >> 3) +
                                       (c & 7) * 2) = q;
  }
  SlFenceProxyAsync();
  __syncthreads();
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) assembled::LoadA(sbuf, warp * 16, kk, kChunks, lane, qf[kk]);
  float ref[8][4], wg[8][4], ss[8][4];
  TileLogits<T, kD>(qf, sbuf + kTileBytes, ref, lane);
  TileLogitsWg<T, kD>(qf, sbuf + 2 * kTileBytes, wg);
  TileLogitsWgIssueSs<T, kD>(sbuf + 3 * kTileBytes, sbuf + 2 * kTileBytes, ss);
  TileLogitsWgWait(ss);
  // An entry counts once where the RS or the SS form differs from mma.sync's.
  unsigned long long bad = 0;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool same = __float_as_uint(ref[nt][e]) == __float_as_uint(wg[nt][e]) ||
                        (isnan(ref[nt][e]) && isnan(wg[nt][e]));
      const bool same_ss = __float_as_uint(ref[nt][e]) == __float_as_uint(ss[nt][e]) ||
                           (isnan(ref[nt][e]) && isnan(ss[nt][e]));
      if (!same || !same_ss) ++bad;
    }
  }
  if (bad != 0) atomicAdd(out, bad);
  if (tid == 0) atomicAdd(out + 1, static_cast<unsigned long long>(kTile) * kTile);
}

// V(j) of one (slot, sequence) per blockIdx.y = slot * batch + seq.
__global__ void SlColumnEvidenceKernel(SlArgs a) {
  const int slot = blockIdx.y / a.batch, seq = blockIdx.y % a.batch;
  const merged::EstimateSeq es = a.ev_seqs[seq];
  if (es.n == 0) return;
  const int fp = es.first_pos, lp = es.first_pos + es.n - 1;
  const int64_t cb = slot * a.col_stride + es.col_base;
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < es.kl; x += gridDim.x * blockDim.x) {
    const int cnt = ColumnRows(fp, lp, a.p.causal, x);
    a.col_mean[cb + x] = cnt > 0 ? static_cast<float>(a.col_sums[cb + x] / cnt) : 0.f;
  }
}

// D(o) of one (slot, sequence), 0 where a column explains it (sampled_lines.cc's
// SampledLinesColumnLeak: D(o) * rows <= min(kSlColumnLeak, rows / 4) x the largest V(j) over
// the keys j = pos - o of the evidence rows). After SlColumnEvidenceKernel.
__global__ void SlDiagonalEvidenceKernel(SlArgs a) {
  const int slot = blockIdx.y / a.batch, seq = blockIdx.y % a.batch;
  const merged::EstimateSeq es = a.ev_seqs[seq];
  if (es.n == 0) return;
  const int fp = es.first_pos, lp = es.first_pos + es.n - 1;
  const float* col = a.col_mean + slot * a.col_stride + es.col_base;
  const int64_t db = slot * a.diag_stride + es.diag_base;
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < es.num_offsets;
       x += gridDim.x * blockDim.x) {
    const int o = es.min_offset + x;
    const int cnt = DiagonalRows(fp, lp, es.kl, a.p.causal, o);
    const float d = cnt > 0 ? static_cast<float>(a.diag_sums[db + x] / cnt) : 0.f;
    const int lo = max(0, fp - o), hi = min(es.kl - 1, lp - o);
    float vmax = 0.f;
    for (int j = lo; j <= hi; ++j) vmax = fmaxf(vmax, col[j]);
    const float c = fminf(kSlColumnLeak, 0.25f * static_cast<float>(cnt));
    a.diag_mean[db + x] = __fmul_rn(d, static_cast<float>(cnt)) > __fmul_rn(c, vmax) ? d : 0.f;
  }
}

// The entries of each index row, from (row position - its block's first row position) * k_len +
// key j to the assembler's codes: j (column) or -1 - (o + k_len) (diagonal o = row position - j),
// by the last-rows evidence (sampled_lines.cc: D(o) > V(j), D(o) > SampledLinesFloor and
// D(o) > SampledLinesDiagonalBar, the CPU's own function: diagonal_cost x the block's rows x its
// threshold bin's edge).
// With clip_diagonals a diagonal code also carries its sampled row (rel; SlDiagonalKeys).
// One CTA per index row; its loads are independent (pass 3's hot loop has none).
static_assert(kSlBins == kSampledLinesBins && kSlBinFloor == kSampledLinesBinFloor,
              "sampled_lines_kernels.h's bins are sampled_lines_bar.h's");
constexpr int kSlClassifyBatch = 4;  // entries per thread in flight (SlArgs::classify_batch)
__global__ void SlClassifyKernel(SlArgs a) {
  const int unit = blockIdx.x;
  const int n = a.counts[unit];
  if (n == 0) return;
  const int slot = unit / a.num_blocks, block = unit % a.num_blocks;
  const BlockGeoDev g = a.geo[block];
  const int kl = a.p.cu_seqlens_k[g.seq + 1] - a.p.cu_seqlens_k[g.seq];
  const merged::EstimateSeq es = a.ev_seqs[g.seq];
  const float* col = a.col_mean + slot * a.col_stride + es.col_base;
  const float* diag = a.diag_mean + slot * a.diag_stride + es.diag_base;
  const float diag_floor = SampledLinesFloor(a.diagonal_floor, a.short_floor, kl);
  const int thr = a.thr[unit];
  const float diag_bar = SampledLinesDiagonalBar(a.diagonal_cost, g.q_end - g.q_begin, thr);
  int32_t* e = a.entries + a.kept[unit];
  // One entry's code from its pass-3 form and its two evidence values.
  auto classify = [&](int32_t code, int rel, int j, int o, float d, float c) {
    const bool line = d > c && d > diag_floor && d > diag_bar;
    return !line ? j : (a.clip_diagonals ? -1 - ((o + kl) * kSlClipRows + rel) : -1 - (o + kl));
  };
  if (!a.classify_batch) {  // SPATTN_SL_CLASSIFY_BATCH=0: main's loop, one entry per step
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int32_t code = e[i];
      const int rel = code / kl, j = code - rel * kl;
      const int o = g.first_pos + rel - j;
      const int oi = o - es.min_offset;
      const float d = oi >= 0 && oi < es.num_offsets ? diag[oi] : 0.f;
      e[i] = classify(code, rel, j, o, d, col[j]);
    }
    return;
  }
  // kSlClassifyBatch entries per thread and step: their loads, then their evidence gathers, all
  // independent, then the stores (the loop above waited for a load and two dependent gathers per
  // entry: 1.44 ms of pass 3's 8.4 ms stage at 128K on an H100, latency-bound). The same code per
  // entry; a lane past the slice reads code 0 (key 0, always there) and stores nothing.
  constexpr int kB = kSlClassifyBatch;
  const int step = static_cast<int>(blockDim.x);
  for (int i0 = threadIdx.x; i0 < n; i0 += kB * step) {
    int32_t code[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) code[u] = i0 + u * step < n ? e[i0 + u * step] : 0;
    int rel[kB], j[kB], o[kB];
    float d[kB], c[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      rel[u] = code[u] / kl;
      j[u] = code[u] - rel[u] * kl;
      o[u] = g.first_pos + rel[u] - j[u];
      const int oi = o[u] - es.min_offset;
      d[u] = oi >= 0 && oi < es.num_offsets ? diag[oi] : 0.f;
      c[u] = col[j[u]];
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      if (i0 + u * step < n) e[i0 + u * step] = classify(code[u], rel[u], j[u], o[u], d[u], c[u]);
    }
  }
}

// The CTAs per SM an instance keeps resident with the build's shared memory (after setting its
// dynamic shared memory limit; resident null: only the limit).
template <typename T, int kD, int kPass, bool kCensus, bool kWg, int kMinCtas>
cudaError_t PassResident(const SlArgs& a, int* resident) {
  const int64_t bytes = Layout(kD, kPass, kWg, a.hist_blocks).total;
  cudaError_t err =
      cudaFuncSetAttribute(SlPassKernel<T, kD, kPass, kCensus, kWg, kMinCtas>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess || resident == nullptr) return err;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      resident, SlPassKernel<T, kD, kPass, kCensus, kWg, kMinCtas>, kThreads, bytes);
}

// The instance capped for kMinCtas > 4 CTAs per SM runs only where the shared memory lets that
// many stay (pass 2: histograms of <= 21 blocks, e.g. 3 sampled rows per block); else the
// 128-register instance. *ctas (if not null): the resident CTAs per SM of the one launched.
template <typename T, int kD, int kPass, bool kCensus, bool kWg, int kMinCtas = 4>
cudaError_t LaunchPassAs(const SlArgs& a, cudaStream_t stream, int* ctas = nullptr) {
  // The occupancy query only where it decides something (the 4-CTA launch as main's).
  int resident = 0;
  cudaError_t err = PassResident<T, kD, kPass, kCensus, kWg, kMinCtas>(
      a, kMinCtas > 4 || ctas != nullptr ? &resident : nullptr);
  if (err != cudaSuccess) return err;
  if constexpr (kMinCtas > 4) {
    if (resident < kMinCtas) return LaunchPassAs<T, kD, kPass, kCensus, kWg, 4>(a, stream, ctas);
  }
  if (ctas != nullptr) {
    *ctas = resident;
    return cudaSuccess;  // the query only (SampledLinesPassCtas)
  }
  SlPassKernel<T, kD, kPass, kCensus, kWg, kMinCtas>
      <<<static_cast<unsigned>(a.num_items) * a.num_slots, kThreads,
         Layout(kD, kPass, kWg, a.hist_blocks).total, stream>>>(a);
  return cudaGetLastError();
}

// The wgmma instances (SlKnobs::wgmma, default) on a compute capability 9.0 device, whose sm_90a
// image has them; elsewhere main's mma.sync instances.
bool SlUseWgmma() { return SampledLinesKnobs().wgmma && CurrentDeviceIsSm90(); }

template <typename T, int kD, int kPass, bool kCensus>
cudaError_t LaunchPass(const SlArgs& a, cudaStream_t stream, int* ctas = nullptr) {
  if (!SlUseWgmma()) return LaunchPassAs<T, kD, kPass, kCensus, false>(a, stream, ctas);
  // SlKnobs::ctas1 / ctas2 / ctas3: the wgmma instances capped for 5 CTAs per SM (pass 3's with
  // Q read from shared memory: its RS form capped at 96 registers spilled 140 bytes and was 33 %
  // slower, NOTES.md "Session 27 — s27-slhist").
  const SlKnobs& k = SampledLinesKnobs();
  if ((kPass == 1 ? k.ctas1 : (kPass == 2 ? k.ctas2 : k.ctas3)) == 5) {
    return LaunchPassAs<T, kD, kPass, kCensus, true, 5>(a, stream, ctas);
  }
  return LaunchPassAs<T, kD, kPass, kCensus, true>(a, stream, ctas);
}

template <int kPass, bool kCensus = false>
cudaError_t Dispatch(const SlArgs& args, cudaStream_t stream, int* ctas = nullptr) {
  // The pass's launch order (SlKnobs::order_band1-3; a band of all items or more: kv-head runs
  // over the whole launch).
  SlArgs a = args;
  const SlKnobs& k = SampledLinesKnobs();
  a.order_band = std::min(kPass == 1 ? k.order_band1 : (kPass == 2 ? k.order_band2 : k.order_band3),
                          a.num_items);
  if (a.kv_run < 1 || a.num_slots % a.kv_run != 0) a.kv_run = 1;
  const bool bf16 = a.p.dtype == DType::kBF16;
  if (a.p.head_dim == 128) {
    return bf16 ? LaunchPass<__nv_bfloat16, 128, kPass, kCensus>(a, stream, ctas)
                : LaunchPass<__half, 128, kPass, kCensus>(a, stream, ctas);
  }
  if (a.p.head_dim == 64) {
    return bf16 ? LaunchPass<__nv_bfloat16, 64, kPass, kCensus>(a, stream, ctas)
                : LaunchPass<__half, 64, kPass, kCensus>(a, stream, ctas);
  }
  return cudaErrorInvalidValue;
}

// ---- Row assembly ----
//
// The assembler (common/row_assembly.cuh) walks a row's keys in 64K-key segments; its source sets
// the segment's bits from the row's entries. Reading every entry of the row once per segment made
// assembly O(entries x segments) per row, quadratic in the length (the 1M chunk: 17 segments,
// count + fill 772 ms of a 1216 ms build at block_m 64, H100). So long rows are first bucketed in
// place by segment (SlBucketKernel: a count pass, then a fill pass through a per-CTA copy of the
// row), and each segment reads only its buckets: every entry once per pass. The bits set are the
// same, so is the index.

// Segments of row_assembly's kernel whose bit arrays hold key word w (segment s holds words
// [s * kAsmSegWords - 1, s * kAsmSegWords + kAsmSegWords], one halo word on each side); w >= 0.
__device__ __forceinline__ int SegFirst(int64_t w) {
  return w <= 0 ? 0 : static_cast<int>((w - 1) / row_assembly::kAsmSegWords);
}
__device__ __forceinline__ int SegLast(int64_t w) {
  return static_cast<int>((w + 1) / row_assembly::kAsmSegWords);
}

// The keys [*st, *en) of a diagonal code (< 0) of a row of block `g`: o = row position - key
// for every row of the block, or with clip_diagonals for the rows [lo, hi] its sampled row rel
// stands for (SampledLinesRowSpan; sampled_lines.cc's clip_diagonals ranges).
__device__ __forceinline__ void SlDiagonalKeys(const SlAsmArgs& a, int32_t code,
                                               const BlockGeoDev& g, int kl, int64_t* st,
                                               int64_t* en) {
  const int64_t c = -1 - static_cast<int64_t>(code);
  if (!a.clip_diagonals) {
    *st = g.first_pos - (c - kl);
    *en = g.last_pos - (c - kl) + 1;
    return;
  }
  const int64_t o = c / kSlClipRows - kl;
  const int rel = static_cast<int>(c % kSlClipRows);
  int lo, hi;
  SampledLinesRowSpan(rel, g.q_end - g.q_begin, a.rows_per_block, a.edge_rows, &lo, &hi);
  *st = g.first_pos + lo - o;
  *en = g.first_pos + hi - o + 1;
}

// The keys [*st, *en) an entry sets in its row (clipped to [0, key_end), outside which the
// assembler masks every bit); false when none.
__device__ __forceinline__ bool EntryKeys(const SlAsmArgs& a, int32_t code, const BlockGeoDev& g,
                                          int kl, int64_t* st, int64_t* en) {
  if (code >= 0) {
    *st = code;
    *en = static_cast<int64_t>(code) + 1;
  } else {
    SlDiagonalKeys(a, code, g, kl, st, en);
  }
  if (*st < 0) *st = 0;
  if (*en > g.key_end) *en = g.key_end;
  return *st < *en;
}

// An entry's bucket (sampled_lines_kernels.h): 2 s for the first segment s it reaches, + 1 when
// it reaches s + 1's too; -1 for none. A span is at most a block's rows (<= 128 keys), so it
// never reaches three segments.
__device__ __forceinline__ int EntryBucket(const SlAsmArgs& a, int32_t code, const BlockGeoDev& g,
                                           int kl) {
  int64_t st, en;
  if (!EntryKeys(a, code, g, kl, &st, &en)) return -1;
  const int s = SegFirst(st >> 5);
  return 2 * s + (SegLast((en - 1) >> 5) > s ? 1 : 0);
}

static_assert(kSlAsmSegWords == row_assembly::kAsmSegWords, "sampled_lines_kernels.h");
constexpr int kSlBucketThreads = 256;

// Count pass (one CTA per index row): the row's bucket sizes into seg[row * (2 max_segs + 1) +
// k], its slice length into max_count (atomicMax). Fill pass (staging_rows CTAs, each taking rows
// in turn): the row's slice copied to the CTA's staging, seg turned into bucket starts (relative
// to the slice; seg[.. + 2 max_segs] = the kept entries), then each entry written back at its
// bucket's cursor (a bucket's order is the atomics': the bits its segment sets do not depend on
// it). The lanes of a warp that go to one bucket take their places with one shared atomic
// (pass 3 emits in key order, so neighbours mostly share a bucket).
//
// kLoads entries per thread are loaded before any is bucketed or copied (session 31, opt-in:
// SlAsmArgs::bucket_loads; 1 = main's loops, one dependent load per thread and step). The fill
// pass runs on few CTAs (staging_rows, 459 at the 1M chunk), each thread with one load in flight
// per step; not measured (NOTES.md "Session 31 — s31-slasm"). The same buckets: a lane's entries
// and their order in each warp step are main's.
template <int kLoads>
__global__ void __launch_bounds__(kSlBucketThreads) SlBucketKernel(SlAsmArgs a, bool fill) {
  __shared__ int cnt[2 * kSlMaxAsmSegs];
  const int nb = 2 * a.max_segs;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int step = static_cast<int>(blockDim.x);
  for (int unit = blockIdx.x; unit < a.num_rows; unit += gridDim.x) {
    const BlockGeoDev g = a.geo[unit % a.num_blocks];
    const int kl = a.k_lens[g.seq];
    int32_t* seg = a.seg + static_cast<int64_t>(unit) * (nb + 1);
    const int n = a.counts[unit];
    int32_t* slice = a.bucketed + a.offsets[unit];
    int32_t* copy = fill ? a.staging + static_cast<int64_t>(blockIdx.x) * a.staging_len : nullptr;
    if (!fill) {
      for (int k = threadIdx.x; k < nb; k += blockDim.x) cnt[k] = 0;
      if (threadIdx.x == 0 && n > 0) atomicMax(a.max_count, n);
    } else {
      for (int i0 = threadIdx.x; i0 < n; i0 += kLoads * step) {
        int32_t v[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) v[u] = i0 + u * step < n ? slice[i0 + u * step] : 0;
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          if (i0 + u * step < n) copy[i0 + u * step] = v[u];
        }
      }
      if (threadIdx.x == 0) {
        int run = 0;
        for (int k = 0; k < nb; ++k) {
          const int c = seg[k];
          seg[k] = run;
          cnt[k] = run;
          run += c;
        }
        seg[nb] = run;
      }
    }
    __syncthreads();
    const int32_t* src = fill ? copy : slice;
    // Whole warps step together (the match below needs every lane).
    for (int w0 = static_cast<int>(threadIdx.x & ~31u); w0 < n; w0 += kLoads * step) {
      int32_t codes[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = w0 + u * step + lane;
        codes[u] = i < n ? src[i] : 0;
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i = w0 + u * step + lane;
        const int32_t code = codes[u];
        const int k = i < n ? EntryBucket(a, code, g, kl) : -1;
        const unsigned peers = __match_any_sync(kFull, k);
        if (k >= 0) {
          const int leader = __ffs(peers) - 1;
          int at = 0;
          if (lane == leader) at = atomicAdd(&cnt[k], __popc(peers));
          at = __shfl_sync(peers, at, leader);
          if (fill) slice[at + __popc(peers & ((1u << lane) - 1u))] = code;
        }
      }
    }
    __syncthreads();
    if (!fill) {
      for (int k = threadIdx.x; k < nb; k += blockDim.x) seg[k] = cnt[k];
    }
    __syncthreads();
  }
}

// The assembler's source: each row's entries (SlClassifyKernel's codes) plus its sink and local
// ranges; with buckets, segment s reads buckets 2 s - 1 .. 2 s + 1 (consecutive in the slice).
struct SlAsmSrc {
  SlAsmArgs a;
  // clip_diagonals: a block's sampled rows (relative to its first row) and the rows [lo, hi] each
  // stands for, found once per row in Begin rather than per diagonal entry and segment
  // (SampledLinesRowSpan costs a 64-bit division per sampled row, three per entry). spans = 0:
  // none kept (more sampled rows than kSlSpanRows), each entry calls SampledLinesRowSpan itself.
  static constexpr int kSlSpanRows = 8;
  struct Shared {
    BlockGeoDev g;
    int kl;
    long long e_begin, e_end;
    const int32_t* seg;  // bucket starts (null: no buckets)
    int spans;
    int span_rel[kSlSpanRows], span_lo[kSlSpanRows], span_hi[kSlSpanRows];
  };
  __device__ void Begin(int unit, Shared& sh, row_assembly::RowCtx& ctx) const {
    const int slot = unit / a.num_blocks, block = unit % a.num_blocks;
    const BlockGeoDev g = a.geo[block];
    ctx.key_end = g.key_end;
    ctx.block = block;
    ctx.num_slots = 1;
    ctx.slots[0] = slot;
    sh.g = g;
    sh.kl = a.k_lens[g.seq];
    sh.e_begin = a.offsets[unit];
    sh.e_end = sh.e_begin + a.counts[unit];
    sh.seg = a.seg != nullptr ? a.seg + static_cast<int64_t>(unit) * (2 * a.max_segs + 1) : nullptr;
    sh.spans = 0;
    if (a.clip_diagonals && a.row_spans) {
      // SampledLinesRowSpan(rel, n, ...) for each sampled row rel = SampledLinesRowAt(i, ...):
      // the same loop over the same rows, their positions computed once.
      const int n = g.q_end - g.q_begin;
      const int s = a.rows_per_block < n ? a.rows_per_block : n;
      if (s >= 1 && s <= kSlSpanRows) {
        // SampledLinesRowAt in 32 bits where its products fit (n < 64K rows: < 2^20), else itself.
        for (int i = 0; i < s; ++i) {
          sh.span_rel[i] = n >= 65536             ? SampledLinesRowAt(i, n, s, a.edge_rows)
                           : a.edge_rows && s > 1 ? i * (n - 1) / (s - 1)
                                                  : (2 * i + 1) * n / (2 * s);
        }
        for (int i = 0; i < s; ++i) {
          const int rel = sh.span_rel[i];
          int prev = -1, next = n;
          for (int j = 0; j < s; ++j) {
            const int at = sh.span_rel[j];
            if (at < rel && at > prev) prev = at;
            if (at > rel && at < next) next = at;
          }
          sh.span_lo[i] = prev < 0 ? 0 : (prev + rel) / 2 + 1;
          sh.span_hi[i] = next >= n ? n - 1 : (rel + next) / 2;
        }
        sh.spans = s;
      }
    }
  }
  // SlDiagonalKeys with the row's spans, in 32 bits: keys, positions and offsets are within
  // +-2^25 (k_len <= kSlMaxAsmSegs x 64K = 8M), and c = -1 - code >= 0 fits an int.
  __device__ __forceinline__ void DiagonalKeys32(const Shared& sh, int32_t code, int* st,
                                                 int* en) const {
    const int c = -1 - code;
    if (!a.clip_diagonals) {
      *st = sh.g.first_pos - (c - sh.kl);
      *en = sh.g.last_pos - (c - sh.kl) + 1;
      return;
    }
    const int o = c / kSlClipRows - sh.kl;
    const int rel = c % kSlClipRows;
    int lo = -1, hi = -1;
    for (int i = 0; i < sh.spans; ++i) {
      if (sh.span_rel[i] == rel) {
        lo = sh.span_lo[i];
        hi = sh.span_hi[i];
        break;
      }
    }
    if (lo < 0) {  // no spans kept, or not a sampled row of this block: the function's answer
      SampledLinesRowSpan(rel, sh.g.q_end - sh.g.q_begin, a.rows_per_block, a.edge_rows, &lo, &hi);
    }
    *st = sh.g.first_pos + lo - o;
    *en = sh.g.first_pos + hi - o + 1;
  }
  __device__ void SetBits(const row_assembly::RowCtx& ctx, const Shared& sh, uint32_t* ranges,
                          uint32_t* cols, int64_t wbase) const {
    using row_assembly::kAsmArrayWords;
    using row_assembly::OrSpan;
    if (threadIdx.x == 0) {
      if (a.sink_tokens > 0) OrSpan(ranges, wbase, 0, a.sink_tokens);
      if (a.local_tokens > 0) {
        OrSpan(ranges, wbase, static_cast<int64_t>(sh.g.first_pos) - a.local_tokens + 1,
               static_cast<int64_t>(sh.g.last_pos) + 1);
      }
    }
    long long e_begin = sh.e_begin, e_end = sh.e_end;
    if (sh.seg != nullptr) {
      const int s = static_cast<int>((wbase + 1) / row_assembly::kAsmSegWords);
      e_begin = sh.e_begin + sh.seg[s > 0 ? 2 * s - 1 : 0];
      e_end = sh.e_begin + sh.seg[2 * s + 2];
    }
    if (!a.row_spans) {  // main's loop (SPATTN_SL_ASM_SPANS=0)
      for (long long e = e_begin + threadIdx.x; e < e_end; e += blockDim.x) {
        const int32_t code = a.entries[e];
        if (code >= 0) {
          const int64_t i = (code >> 5) - wbase;
          if (i >= 0 && i < kAsmArrayWords) atomicOr(cols + i, 1u << (code & 31));
        } else {
          int64_t st, en;
          SlDiagonalKeys(a, code, sh.g, sh.kl, &st, &en);
          OrSpan(ranges, wbase, st, en);
        }
      }
      return;
    }
    // The same bits in 32-bit arithmetic (all keys and word indices < 2^25, DiagonalKeys32). The
    // keys of this segment's arrays (OrSpan's clip): [lo_key, hi_key). A diagonal whose keys for
    // every row of the block, [first_pos - o, last_pos - o], miss them sets nothing here (its
    // clipped keys are a part of those), so it is skipped before its span is found.
    const int wb = static_cast<int>(wbase);
    const int lo_key = (wb < 0 ? 0 : wb) * 32;
    const int hi_key = (wb + kAsmArrayWords) * 32;
    auto set = [&](int32_t code) {
      if (code >= 0) {
        const int i = (code >> 5) - wb;
        if (i >= 0 && i < kAsmArrayWords) atomicOr(cols + i, 1u << (code & 31));
        return;
      }
      const int c = -1 - code;
      const int o = (a.clip_diagonals ? c / kSlClipRows : c) - sh.kl;
      if (sh.g.last_pos - o + 1 <= lo_key || sh.g.first_pos - o >= hi_key) return;
      int st, en;
      DiagonalKeys32(sh, code, &st, &en);
      // OrSpan's clip and words (SpanBits of each word the span meets).
      if (st < lo_key) st = lo_key;
      if (en > hi_key) en = hi_key;
      if (st >= en) return;
      for (int w = st >> 5; w <= (en - 1) >> 5; ++w) {
        const int lo = st - w * 32 > 0 ? st - w * 32 : 0;
        const int hi = en - w * 32 < 32 ? en - w * 32 : 32;
        const uint32_t bits = (hi == 32 ? 0xffffffffu : ((1u << hi) - 1u)) & ~((1u << lo) - 1u);
        atomicOr(ranges + (w - wb), bits);
      }
    };
    // kSlAsmLoads entries per thread loaded before any is set: the loop was one dependent global
    // load per thread and step (the bits are the same; OR is order-free). 4 keeps both assembler
    // kernels at main's registers (sm_90a: fill 72, count 71; 3 CTAs per SM); 6 takes the fill to
    // 108 (2 CTAs).
    constexpr int kSlAsmLoads = 4;
    const long long stride = static_cast<long long>(blockDim.x);
    for (long long e0 = e_begin + threadIdx.x; e0 < e_end; e0 += kSlAsmLoads * stride) {
      int32_t code[kSlAsmLoads];
#pragma unroll
      for (int u = 0; u < kSlAsmLoads; ++u) {
        const long long e = e0 + u * stride;
        code[u] = e < e_end ? a.entries[e] : 0;
      }
#pragma unroll
      for (int u = 0; u < kSlAsmLoads; ++u) {
        if (e0 + u * stride < e_end) set(code[u]);
      }
    }
  }
};

}  // namespace

SlKnobs& SampledLinesKnobs() {
  static SlKnobs knobs = [] {
    SlKnobs k;
    if (const char* t = std::getenv("SPATTN_SL_SPLIT_TILES")) k.split_tiles = std::atoi(t);
    if (const char* w = std::getenv("SPATTN_SL_SPLIT_WAVES")) k.split_waves = std::atoi(w);
    if (const char* x = std::getenv("SPATTN_SL_EMIT_EXACT")) k.emit_exact = x[0] == '1';
    if (const char* x = std::getenv("SPATTN_SL_EMIT_FLUSH")) k.emit_flush_late = x[0] == 'l';
    if (const char* x = std::getenv("SPATTN_SL_CLASSIFY_BATCH")) k.classify_batch = x[0] != '0';
    if (const char* x = std::getenv("SPATTN_SL_HIST_EXACT")) k.hist_exact = x[0] == '1';
    const char* b = std::getenv("SPATTN_SL_ASM_BUCKET");
    if (b != nullptr && b[0] != '\0') k.asm_bucket = b[0] != '0' ? 1 : 0;
    if (const char* c = std::getenv("SPATTN_SL_TILE_CENSUS")) k.tile_census = c[0] == '1';
    if (const char* c = std::getenv("SPATTN_SL_ASM_SPANS")) k.asm_spans = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SL_BUCKET_LOADS")) k.bucket_loads = std::atoi(c);
    if (const char* c = std::getenv("SPATTN_SL_WGMMA")) k.wgmma = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SL_EST_STREAM")) k.est_stream = std::atoi(c);
    if (const char* c = std::getenv("SPATTN_SL_ONE_UPLOAD")) k.one_upload = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SL_EARLY_EST")) k.early_est = c[0] == '1';
    if (const char* c = std::getenv("SPATTN_SL_TILE_LIST")) k.tile_list = std::atoi(c) & 3;
    if (const char* c = std::getenv("SPATTN_SL_ORDER_BAND")) {  // "B1,B2,B3" (a missing value 0)
      k.order_band1 = std::atoi(c);
      const char* comma = std::strchr(c, ',');
      k.order_band2 = comma != nullptr ? std::atoi(comma + 1) : 0;
      const char* comma2 = comma != nullptr ? std::strchr(comma + 1, ',') : nullptr;
      k.order_band3 = comma2 != nullptr ? std::atoi(comma2 + 1) : 0;
    }
    if (const char* c = std::getenv("SPATTN_SL_CTAS")) {  // "P1,P2,P3"
      k.ctas1 = std::atoi(c);
      const char* comma = std::strchr(c, ',');
      k.ctas2 = comma != nullptr ? std::atoi(comma + 1) : 4;
      const char* comma2 = comma != nullptr ? std::strchr(comma + 1, ',') : nullptr;
      k.ctas3 = comma2 != nullptr ? std::atoi(comma2 + 1) : 4;
    }
    return k;
  }();
  return knobs;
}

cudaError_t LaunchSampledLinesStats(const SlArgs& a, cudaStream_t stream) {
  if (a.num_items == 0 || a.num_slots == 0) return cudaSuccess;
  const cudaError_t err = Dispatch<1>(a, stream);
  if (err != cudaSuccess || a.split_blocks == 0) return err;
  const int64_t n = static_cast<int64_t>(a.num_slots) * a.num_rows;
  SlMergeStatsKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchSampledLinesHistogram(const SlArgs& a, cudaStream_t stream) {
  if (a.num_items == 0 || a.num_slots == 0) return cudaSuccess;
  const cudaError_t err =
      SampledLinesKnobs().tile_census ? Dispatch<2, true>(a, stream) : Dispatch<2>(a, stream);
  if (err != cudaSuccess || a.split_blocks == 0) return err;
  const int64_t n = static_cast<int64_t>(a.num_slots) * a.split_blocks;
  SlSplitThresholdKernel<<<static_cast<unsigned>((n + 3) / 4), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchSampledLinesEvidence(const SlArgs& a, cudaStream_t stream) {
  if (a.num_items == 0 || a.num_slots == 0) return cudaSuccess;
  SlColumnEvidenceKernel<<<dim3(64, a.num_slots * a.batch), 256, 0, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  SlDiagonalEvidenceKernel<<<dim3(64, a.num_slots * a.batch), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchSampledLinesEmit(const SlArgs& a, cudaStream_t stream) {
  if (a.num_items == 0 || a.num_slots == 0) return cudaSuccess;
  cudaError_t err = a.evidence_ready ? cudaSuccess : LaunchSampledLinesEvidence(a, stream);
  if (err != cudaSuccess) return err;
  const cudaError_t perr =
      SampledLinesKnobs().tile_census ? Dispatch<3, true>(a, stream) : Dispatch<3>(a, stream);
  if (perr != cudaSuccess) return perr;
  if (SampledLinesKnobs().tile_census) {  // diagnostics: synchronous, then reset
    unsigned long long c[4] = {0, 0, 0, 0};
    err = cudaMemcpyFromSymbolAsync(c, g_sl_census, sizeof(c), 0, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) return err;
    std::fprintf(
        stderr,
        "sampled_lines tile census: pass 2 warp tiles %llu, skipped (no entry at its "
        "rows' cut) %llu (%.1f %%); pass 3 warp tiles %llu, no entry kept %llu (%.1f %%)\n",
        c[0], c[1], c[0] ? 100.0 * c[1] / c[0] : 0.0, c[2], c[3], c[2] ? 100.0 * c[3] / c[2] : 0.0);
    const unsigned long long zero[4] = {0, 0, 0, 0};
    err =
        cudaMemcpyToSymbolAsync(g_sl_census, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) return err;
  }
  if (a.split_blocks > 0) {
    const int64_t n = static_cast<int64_t>(a.num_slots) * a.num_blocks;
    SlClampCountsKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(a);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  SlClassifyKernel<<<a.num_slots * a.num_blocks, 128, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t CountSampledLinesExp2Inversions(unsigned long long* inversions) {
  unsigned long long* d = nullptr;
  cudaError_t err = cudaMalloc(&d, sizeof(*d));
  if (err != cudaSuccess) return err;
  err = cudaMemset(d, 0, sizeof(*d));
  if (err == cudaSuccess) {
    SlExp2InversionsKernel<<<4096, 256>>>(d);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(inversions, d, sizeof(*d), cudaMemcpyDeviceToHost);
  const cudaError_t ferr = cudaFree(d);
  return err != cudaSuccess ? err : ferr;
}

namespace {
template <typename T, int kD>
cudaError_t CheckTiles(int tiles, uint64_t seed, unsigned long long* d) {
  const int bytes = 4 * kTile * kD * 2 + 1024;
  cudaError_t err = cudaFuncSetAttribute(SlTileCheckKernel<T, kD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  SlTileCheckKernel<T, kD><<<tiles, kThreads, bytes>>>(seed, d);
  return cudaGetLastError();
}
}  // namespace

cudaError_t CountSampledLinesTileMismatches(int head_dim, bool bf16, int tiles, uint64_t seed,
                                            unsigned long long* mismatches,
                                            unsigned long long* compared) {
  if (!CurrentDeviceIsSm90()) return cudaErrorNotSupported;
  if ((head_dim != 64 && head_dim != 128) || tiles < 1) return cudaErrorInvalidValue;
  unsigned long long* d = nullptr;
  cudaError_t err = cudaMalloc(&d, 2 * sizeof(*d));
  if (err != cudaSuccess) return err;
  err = cudaMemset(d, 0, 2 * sizeof(*d));
  if (err == cudaSuccess) {
    err = head_dim == 128 ? (bf16 ? CheckTiles<__nv_bfloat16, 128>(tiles, seed, d)
                                  : CheckTiles<__half, 128>(tiles, seed, d))
                          : (bf16 ? CheckTiles<__nv_bfloat16, 64>(tiles, seed, d)
                                  : CheckTiles<__half, 64>(tiles, seed, d));
  }
  unsigned long long h[2] = {0, 0};
  if (err == cudaSuccess) err = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  const cudaError_t ferr = cudaFree(d);
  *mismatches = h[0];
  *compared = h[1];
  return err != cudaSuccess ? err : ferr;
}

cudaError_t SampledLinesPassCtas(int pass, int head_dim, bool bf16, int hist_blocks, int* ctas,
                                 int* capped_for) {
  if (pass < 1 || pass > 3 || (head_dim != 64 && head_dim != 128) || hist_blocks < 1 ||
      hist_blocks > kSlGroupBlocks) {
    return cudaErrorInvalidValue;
  }
  const SlKnobs& k = SampledLinesKnobs();
  *capped_for =
      SlUseWgmma() && (pass == 1 ? k.ctas1 : (pass == 2 ? k.ctas2 : k.ctas3)) == 5 ? 5 : 4;
  SlArgs a;
  a.p.head_dim = head_dim;
  a.p.dtype = bf16 ? DType::kBF16 : DType::kF16;
  a.hist_blocks = hist_blocks;
  *ctas = 0;
  return pass == 1 ? Dispatch<1>(a, nullptr, ctas)
                   : (pass == 2 ? Dispatch<2>(a, nullptr, ctas) : Dispatch<3>(a, nullptr, ctas));
}

cudaError_t LaunchSampledLinesAssemble(const SlAsmArgs& a, const row_assembly::AsmOut& out,
                                       bool fill, cudaStream_t stream) {
  SlAsmSrc src;
  src.a = a;
  return row_assembly::LaunchAssemble(src, a.num_rows, out, fill, stream);
}

cudaError_t LaunchSampledLinesBucket(const SlAsmArgs& a, bool fill, cudaStream_t stream) {
  if (a.num_rows <= 0) return cudaSuccess;
  if (a.max_segs < 1 || a.max_segs > kSlMaxAsmSegs) return cudaErrorInvalidValue;
  const int grid = fill ? a.staging_rows : a.num_rows;
  if (grid < 1) return cudaErrorInvalidValue;
  if (a.bucket_loads > 1) {
    SlBucketKernel<8><<<grid, kSlBucketThreads, 0, stream>>>(a, fill);
  } else {
    SlBucketKernel<1><<<grid, kSlBucketThreads, 0, stream>>>(a, fill);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
