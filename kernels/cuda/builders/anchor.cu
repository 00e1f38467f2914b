// AnchorAttention (seed 002) on the GPU, the twin of kernels/builders/anchor.cc:
//  1. Anchor pass, one CTA per (pair of slots, query block): the max of q.k * scale of every row
//     over the init keys [0, r1) and the group's local window [gfp, row) (tensor-core tiles:
//     wgmma on sm_90a, AnAnchorWgKernel; mma.sync elsewhere and with SPATTN_ANCHOR_WGMMA=0,
//     AnAnchorKernel), averaged over the block (x_a), and the block's mean scaled query (the
//     CPU's float sums, same order).
//  2. Stripe scan: a GEMM of the pooled queries (split into bf16 hi + lo, so the products keep
//     ~16 mantissa bits) against the keys between the init keys and each group's window; a key
//     is kept for a group when some pooled query of the group has x_a - qbar.k <= theta. Kept
//     keys go to a bitmap per group.
//  3. Assembly: init range, the group's local range and its kept keys (as columns) per row.
#include <cstdlib>
#include <mutex>
#include <vector>

#include "kernels/cuda/builders/anchor_knobs.h"
#include "kernels/cuda/builders/assembled_common.cuh"
#include "kernels/cuda/common/wgmma_tile64.cuh"

namespace spattn {
namespace cuda {
namespace assembled {
namespace {

constexpr int kAnThreads = 256;
constexpr int kAnRows = 128;
constexpr int kAnTileN = 64;

// Anchor pass CTAs: one per (pair of slots, query block). Slots 2 i and 2 i + 1 of the same kv
// head share every K tile (one load for 256 query rows: the pass streamed each K tile from L2 once
// per 128 rows); a pair of different kv heads (or an odd last slot) runs one slot per sweep.
constexpr int kAnPair = 2;
// Warp w takes slot w / 4 of the sweep and its rows 32 (w % 4) .. + 32 (two m16 tiles, A fragments
// in registers), all 64 keys of a tile, 16 keys at a time: every B fragment read from shared
// memory feeds four MMAs.
constexpr int kAnWarpRows = 32;

template <int kD>
constexpr int AnAnchorSmemBytes() {
  return kAnPair * kAnRows * kD * 2 + 2 * kAnTileN * kD * 2 + kAnPair * kAnRows * 4;
}
template <int kD>
constexpr int AnStripeSmemBytes() {
  return 2 * kAnTileN * kD * 2;
}

// What both anchor-pass kernels (mma.sync and wgmma) derive from their CTA index: CTA x takes
// slot pair x / num_blocks (two slots of one kv head share one sweep) and query block
// x % num_blocks; its anchor keys are [0, r1) then [gfp, hi), in kAnTileN-key tiles.
struct AnCta {
  BlockGeoDev geo;
  AnGroup grp;
  int block, s0, sweeps, rows, q_tok0, k_tok0, hi, t1, ntiles;
  bool shared_kv;
  // Tile t's first key and its number of keys.
  __device__ __forceinline__ void TileSpan(int t, int& start, int& n) const {
    if (t < t1) {
      start = t * kAnTileN;
      n = min(kAnTileN, grp.r1 - start);
    } else {
      start = grp.gfp + (t - t1) * kAnTileN;
      n = min(kAnTileN, hi - start);
    }
  }
};

__device__ __forceinline__ AnCta AnCtaOf(const AnArgs& a) {
  AnCta c;
  const AttnParams& p = a.p;
  const int pair = blockIdx.x / a.num_blocks;
  const int block = blockIdx.x - pair * a.num_blocks;
  c.block = block;
  c.geo = a.geo[block];
  c.s0 = kAnPair * pair;
  const bool has1 = c.s0 + 1 < a.num_slots;
  c.shared_kv = has1 && a.heads[c.s0] / p.group == a.heads[c.s0 + 1] / p.group;
  c.sweeps = has1 && !c.shared_kv ? 2 : 1;
  c.q_tok0 = p.cu_seqlens_q[c.geo.seq];
  c.k_tok0 = p.cu_seqlens_k[c.geo.seq];
  c.rows = c.geo.q_end - c.geo.q_begin;
  // Every slot has the same groups (geometry per sequence), so slot s0's group serves both.
  c.grp = a.groups[c.s0 * a.groups_per_slot + a.group_of_block[block]];
  // Causal rows see the window up to their own position.
  c.hi = p.causal ? c.geo.last_pos + 1 : c.grp.r2_end;
  c.t1 = (c.grp.r1 + kAnTileN - 1) / kAnTileN;
  c.ntiles = c.t1 + (c.hi > c.grp.gfp ? (c.hi - c.grp.gfp + kAnTileN - 1) / kAnTileN : 0);
  return c;
}

// s40-anchor (AnKnobs::lean): the kept-key bitmaps zeroed by the anchor pass's CTAs (16-byte
// stores, grid-stride, after the CTA's sweeps) instead of a cudaMemsetAsync before
// the pass; the stripe scan, the next launch on the stream, sets their bits. The host passes
// clear_words only where a.bitmaps is 16-byte aligned.
__device__ __forceinline__ void AnClearBitmaps(const AnArgs& a) {
  const int64_t n4 = a.clear_words >> 2;
  uint4* const w4 = reinterpret_cast<uint4*>(a.bitmaps);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += stride) {
    w4[i] = make_uint4(0u, 0u, 0u, 0u);
  }
  if (blockIdx.x == 0 && threadIdx.x < (a.clear_words & 3)) a.bitmaps[4 * n4 + threadIdx.x] = 0u;
}

template <typename T, int kD>
__global__ void __launch_bounds__(kAnThreads, 2) AnAnchorKernel(AnArgs a) {
  constexpr int kCh = kD / 8;
  constexpr int kKS = kD / 16;
  constexpr int kQBytes = kAnRows * kD * 2;
  extern __shared__ __align__(128) char smem[];
  const uint32_t sQa = SmemAddr(smem);  // [kAnPair][kAnRows][kD]
  const uint32_t sKa = sQa + kAnPair * kQBytes;
  float* sMax = reinterpret_cast<float*>(smem + kAnPair * kQBytes + 2 * kAnTileN * kD * 2);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const AnCta c = AnCtaOf(a);
  const BlockGeoDev& geo = c.geo;
  const AttnParams& p = a.p;
  const int block = c.block, s0 = c.s0, sweeps = c.sweeps, rows = c.rows, ntiles = c.ntiles;
  const bool shared_kv = c.shared_kv;
  const int q_tok0 = c.q_tok0, k_tok0 = c.k_tok0;
  auto tile_span = [&](int t, int& start, int& n) { c.TileSpan(t, start, n); };
  const int row0 = (warp & 3) * kAnWarpRows;
  const int sub = warp >> 2;

  for (int sweep = 0; sweep < sweeps; ++sweep) {
    const int first = s0 + sweep;  // the sweep's first slot
    const int nsub = shared_kv ? kAnPair : 1;
    const int kvh = a.heads[first] / p.group;
    const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;
    for (int u = 0; u < nsub; ++u) {
      const T* qg =
          static_cast<const T*>(p.q) + static_cast<int64_t>(a.heads[first + u]) * p.q_head_stride;
      LoadTileAsync(
          sQa + u * kQBytes, kAnRows, rows, kCh,
          [&](int r) {
            return qg + static_cast<int64_t>(q_tok0 + geo.q_begin + r) * p.q_token_stride;
          },
          tid, kAnThreads);
    }
    auto issue = [&](int t) {
      int start, n;
      tile_span(t, start, n);
      LoadTileAsync(
          sKa + (t & 1) * kAnTileN * kD * 2, kAnTileN, n, kCh,
          [&](int r) { return kg + static_cast<int64_t>(k_tok0 + start + r) * p.k_token_stride; },
          tid, kAnThreads);
    };
    if (ntiles > 0) issue(0);
    CpAsyncCommit();

    const bool active = sub < nsub && row0 < rows;
    const uint32_t sQw = sQa + sub * kQBytes;
    // Unscaled maxima of rows row0 + 16 m + g + 8 h (index 2 m + h): scale > 0 and rounding is
    // monotone, so max(s) * scale == max(s * scale) bit for bit.
    float mx[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    int pos_r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pos_r[i] = geo.first_pos + row0 + 16 * (i >> 1) + g + 8 * (i & 1);
    const int warp_last = geo.first_pos + row0 + kAnWarpRows - 1;  // warp-uniform
    uint32_t qf[2][kKS][4];
    if (ntiles == 0) CpAsyncWait<0>();

    for (int t = 0; t < ntiles; ++t) {
      AwaitTile(t, ntiles, issue);
      if (t == 0 && active) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
#pragma unroll
          for (int ks = 0; ks < kKS; ++ks) LoadA(sQw, row0 + 16 * m, ks, kCh, lane, qf[m][ks]);
        }
      }
      int start, n;
      tile_span(t, start, n);
      if (active) {
        const uint32_t kst = sKa + (t & 1) * kAnTileN * kD * 2;
#pragma unroll
        for (int np = 0; np < kAnTileN / 16; ++np) {
          const int c0 = np * 16;
          // Warp-uniform skips (the MMAs are warp-wide): keys past the tile's end, or causal
          // keys past every row of the warp.
          if (c0 >= n || (p.causal && start + c0 > warp_last)) continue;
          float s[2][2][4];
#pragma unroll
          for (int m = 0; m < 2; ++m) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
              for (int e = 0; e < 4; ++e) s[m][nt][e] = 0.f;
            }
          }
#pragma unroll
          for (int ks = 0; ks < kKS; ++ks) {
            uint32_t b[4];
            LoadB2(kst, c0, ks, kCh, lane, b);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              Mma<T>::Run(s[m][0], qf[m][ks], b[0], b[1]);
              Mma<T>::Run(s[m][1], qf[m][ks], b[2], b[3]);
            }
          }
          const bool full = c0 + 16 <= n && (!p.causal || start + c0 + 15 <= pos_r[0]);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int col = c0 + nt * 8 + 2 * t4 + (e & 1);
                const int i = 2 * m + (e >> 1);
                const bool ok = full || (col < n && (!p.causal || start + col <= pos_r[i]));
                if (ok) mx[i] = fmaxf(mx[i], s[m][nt][e]);
              }
            }
          }
        }
      }
      __syncthreads();
    }
    CpAsyncWait<0>();
    __syncthreads();
    if (active) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float m = QuadMax(mx[i]);
        const int r = row0 + 16 * (i >> 1) + g + 8 * (i & 1);
        if (t4 == 0 && r < rows) sMax[sub * kAnRows + r] = m * a.softmax_scale;
      }
    }
    __syncthreads();
    // x_a: the CPU's double sum in row order (warp u's lane 0 for slot u).
    if (lane == 0 && warp < nsub) {
      double sum = 0;
      for (int r = 0; r < rows; ++r) sum += sMax[warp * kAnRows + r];
      a.xa[static_cast<int64_t>(first + warp) * a.num_blocks + block] =
          static_cast<float>(sum / rows);
    }
    // Pooled scaled query: the CPU's float sums in row order.
    const float scale = a.softmax_scale;
    for (int i = tid; i < nsub * kD; i += kAnThreads) {
      const int u = i / kD, c = i - u * kD;
      const char* q = smem + u * kQBytes;
      float acc = 0.f;
      for (int r = 0; r < rows; ++r) {
        const T v = *reinterpret_cast<const T*>(q + TileElemOff(r, c, kCh));
        acc = __fadd_rn(acc, __fmul_rn(ToF(v), scale));
      }
      const int64_t out = static_cast<int64_t>(first + u) * a.num_blocks + block;
      a.qbar[out * kD + c] = __fdiv_rn(acc, static_cast<float>(rows));
    }
    __syncthreads();  // the next sweep reuses the Q tiles and sMax
  }
  if (a.clear_words > 0) AnClearBitmaps(a);  // after the sweeps: no live values to spill
}

// ---- Anchor pass by wgmma (sm_90a; AnchorKnobs().wgmma, anchor_knobs.h) ----
//
// The CTA of AnAnchorKernel (one per (pair of slots, query block), 256 threads, two CTAs per SM),
// its Q tiles (same layout, read by ldmatrix into the mma.sync A fragments and by the pooled-query
// sums) and its products bit for bit, from one warpgroup instruction stream per slot: warpgroup u
// (warps 4 u .. 4 u + 3) takes slot u's 128 rows as two m64 halves, warp w's 16 rows of half h
// (rows 64 h + 16 (w % 4) ..) are its rows of an m64n64k16 wgmma whose A operand is the warp's Q
// fragments in registers (the mma.sync A layout: the RS form reads them) and whose B operand is
// the key tile read from shared memory by a descriptor. Its accumulators are mma.sync's
// acc[n-tile][fragment] layout (d[4 nt + e]), each k step added in k order: the same sums (the
// wgmma and mma.sync products of sampled_lines compare equal bit for bit, sampled_lines_gpu_test;
// here build_index_gpu_test's WgmmaAnchorPassIsTheMmaSyncPass compares x_a and qbar; the sign of
// a zero sum aside, Tile64ProductsRs). Per warp and 64-key tile 16 instructions instead of 128
// mma.sync + 32 ldmatrix.x4, and the tile read from shared memory once per warpgroup instead of
// once per warp. The key tiles are stored in the 128-byte swizzle layout the descriptor describes:
// [kD / 64 sub-tiles][64 keys][128 bytes], 16-byte chunk index XOR key % 8 (Tile64KeyOff), at
// 1024-byte aligned bases. The pooled queries are summed before the key loop, so that the Q
// tiles' space takes four key tiles once the warps hold their fragments: six key buffers, each
// tile loaded five tiles ahead (two buffers, one ahead, ran the pass in 2.10 ms at 32K on an H100,
// six in 1.37; kernels/cuda/NOTES.md "Session 28 — s28-anchor").
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPATTN_AN_SM90A 1
#else
#define SPATTN_AN_SM90A 0
#endif

// The wgmma pass's key tiles are in Tile64KeyOff's layout and its products come from
// Tile64ProductsRs (wgmma_tile64.cuh), whose first k step starts from the products (scale-d 0):
// a sum of products that is -0 there is +0 under mma.sync; no maximum, x_a or stripe comparison
// downstream tells them apart (fmaxf of +-0 and the x_a sums differ at most in the sign of a
// zero, and xa - s <= theta reads +0 and -0 alike), so the index is the same.

constexpr int kAnWgBufs = 6;  // key buffers of the wgmma pass (2 + 4 in the Q tiles' space)

template <int kD>
constexpr int AnAnchorWgSmemBytes() {
  return kAnPair * kAnRows * kD * 2 + 1024 + 2 * kAnTileN * kD * 2 + kAnPair * kAnRows * 4;
}

template <typename T, int kD>
__global__ void __launch_bounds__(kAnThreads, 2) AnAnchorWgKernel(AnArgs a) {
  constexpr int kCh = kD / 8;
  constexpr int kKS = kD / 16;
  constexpr int kQBytes = kAnRows * kD * 2;
  constexpr int kKBytes = kAnTileN * kD * 2;
  // Key copies from per-thread bases: chunk k_ch of rows k_r0 + m * kRowStep.
  constexpr int kRowStep = kAnThreads / kCh;              // 16 (d 128) or 32 (d 64)
  constexpr int kKeyIters = kAnTileN * kCh / kAnThreads;  // 4 or 2
  static_assert(kRowStep % 8 == 0 && kKeyIters * kAnThreads == kAnTileN * kCh, "key copies");
  // Shared memory from a 1024-byte aligned base: the Q tiles [kAnPair][kAnRows][kD] (swizzled as
  // AnAnchorKernel's), two key buffers (Tile64KeyOff layout), the row maxima. Once the warps have
  // their Q fragments and the pooled queries are written, the Q tiles' space holds four more key
  // buffers: key tile t goes to buffer t % kAnWgBufs (0, 1: the key buffers; 2..5: the Q space),
  // loaded kAnWgBufs - 1 tiles ahead.
  extern __shared__ __align__(128) char smem[];
  const uint32_t sQa = (SmemAddr(smem) + 1023u) & ~1023u;
  char* const qsm = smem + (sQa - SmemAddr(smem));
  const uint32_t sKa = sQa + kAnPair * kQBytes;
  float* sMax = reinterpret_cast<float*>(qsm + kAnPair * kQBytes + 2 * kKBytes);
  static_assert(kAnPair * kQBytes == (kAnWgBufs - 2) * kKBytes, "the Q space holds 4 key tiles");
  auto buf_of = [&](int t) {
    const int b = t % kAnWgBufs;
    return b < 2 ? sKa + b * kKBytes : sQa + (b - 2) * kKBytes;
  };

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const AnCta c = AnCtaOf(a);
  const BlockGeoDev& geo = c.geo;
  const AttnParams& p = a.p;
  const int block = c.block, s0 = c.s0, sweeps = c.sweeps, rows = c.rows, ntiles = c.ntiles;
  const bool shared_kv = c.shared_kv;
  const int q_tok0 = c.q_tok0, k_tok0 = c.k_tok0;
  auto tile_span = [&](int t, int& start, int& n) { c.TileSpan(t, start, n); };
  const int sub = warp >> 2;         // warpgroup = slot of the sweep
  const int wrow = (warp & 3) * 16;  // the warp's rows in each half: wrow + 64 h ..
  const int k_r0 = tid / kCh, k_ch = tid % kCh;
  const uint32_t k_off0 = Tile64KeyOff(k_r0, k_ch);
  const int64_t k_row_bytes = p.k_token_stride * static_cast<int64_t>(sizeof(T));

  for (int sweep = 0; sweep < sweeps; ++sweep) {
    const int first = s0 + sweep;
    const int nsub = shared_kv ? kAnPair : 1;
    const int kvh = a.heads[first] / p.group;
    const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;
    for (int u = 0; u < nsub; ++u) {
      const T* qg =
          static_cast<const T*>(p.q) + static_cast<int64_t>(a.heads[first + u]) * p.q_head_stride;
      LoadTileAsync(
          sQa + u * kQBytes, kAnRows, rows, kCh,
          [&](int r) {
            return qg + static_cast<int64_t>(q_tok0 + geo.q_begin + r) * p.q_token_stride;
          },
          tid, kAnThreads);
    }
    const char* k_base =
        reinterpret_cast<const char*>(kg + static_cast<int64_t>(k_tok0) * p.k_token_stride) +
        k_ch * 16;
    auto issue = [&](int t) {
      int start, n;
      tile_span(t, start, n);
      const uint32_t dst = buf_of(t) + k_off0;
      const char* row0 = k_base + static_cast<int64_t>(start) * k_row_bytes;
      const char* src = row0 + static_cast<int64_t>(k_r0) * k_row_bytes;
      if (n == kAnTileN) {
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          CpAsync16(dst + m * kRowStep * 128, src, true);
          src += kRowStep * k_row_bytes;
        }
      } else {  // rows past the span zero-filled (their source: the span's row 0, not read)
#pragma unroll
        for (int m = 0; m < kKeyIters; ++m) {
          const bool valid = k_r0 + m * kRowStep < n;
          CpAsync16(dst + m * kRowStep * 128, valid ? src : row0, valid);
          src += kRowStep * k_row_bytes;
        }
      }
    };
    // One commit group per key tile (empty past the last): Q with tile 0, tile 1; then, once the
    // Q space is free, tiles 2 .. kAnWgBufs - 2; tile t + kAnWgBufs - 1 at the top of tile t.
    if (ntiles > 0) issue(0);
    CpAsyncCommit();
    if (ntiles > 1) issue(1);
    CpAsyncCommit();

    const bool active = sub < nsub;
    const uint32_t sQw = sQa + sub * kQBytes;
    // Unscaled maxima of rows wrow + 64 h + g + 8 i (index 2 h + i), as AnAnchorKernel's.
    float mx[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    int pos_r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pos_r[i] = geo.first_pos + wrow + 64 * (i >> 1) + g + 8 * (i & 1);
    uint32_t qf[2][kKS][4];
    CpAsyncWait<1>();  // Q and tile 0
    __syncthreads();
    if (active) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) LoadA(sQw, wrow + 64 * h, ks, kCh, lane, qf[h][ks]);
      }
    }
    // Pooled scaled query: the CPU's float sums in row order (AnAnchorKernel's, before the keys
    // here: the Q space then takes key tiles).
    {
      const float scale = a.softmax_scale;
      for (int i = tid; i < nsub * kD; i += kAnThreads) {
        const int u = i / kD, c = i - u * kD;
        const char* q = qsm + u * kQBytes;
        float acc = 0.f;
        for (int r = 0; r < rows; ++r) {
          const T v = *reinterpret_cast<const T*>(q + TileElemOff(r, c, kCh));
          acc = __fadd_rn(acc, __fmul_rn(ToF(v), scale));
        }
        const int64_t out = static_cast<int64_t>(first + u) * a.num_blocks + block;
        a.qbar[out * kD + c] = __fdiv_rn(acc, static_cast<float>(rows));
      }
    }
    __syncthreads();  // every read of the Q tiles is done
#pragma unroll
    for (int t = 2; t < kAnWgBufs - 1; ++t) {
      if (t < ntiles) issue(t);
      CpAsyncCommit();
    }

    for (int t = 0; t < ntiles; ++t) {
      // Tile t has landed (this thread's copies, then the barrier for everyone's; tiles t + 1 ..
      // t + kAnWgBufs - 2 may still be in flight), visible to wgmma (fence.proxy.async); every
      // warpgroup is past tile t - 1, whose buffer takes tile t + kAnWgBufs - 1.
      CpAsyncWait<kAnWgBufs - 2>();
#if SPATTN_AN_SM90A
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
      __syncthreads();
      if (t + kAnWgBufs - 1 < ntiles) issue(t + kAnWgBufs - 1);
      CpAsyncCommit();
      int start, n;
      tile_span(t, start, n);
      if (active) {
        const uint32_t kst = buf_of(t);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // Warpgroup-uniform skips: rows past the block, or causal keys past every row of the
          // half.
          if (64 * h >= rows || (p.causal && start > geo.first_pos + 64 * h + 63)) continue;
          float s[8][4];
          Tile64ProductsRs<T, kD>(qf[h], kst, s);
          // Full tiles (every tile but a span's last and the causal diagonal): the maxima without
          // masks (uniform in a warp but at the diagonal).
          if (n == kAnTileN && (!p.causal || start + kAnTileN - 1 <= pos_r[2 * h])) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
              mx[2 * h] = fmaxf(mx[2 * h], fmaxf(s[nt][0], s[nt][1]));
              mx[2 * h + 1] = fmaxf(mx[2 * h + 1], fmaxf(s[nt][2], s[nt][3]));
            }
          } else {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t4 + (e & 1);
                const int i = 2 * h + (e >> 1);
                if (col < n && (!p.causal || start + col <= pos_r[i])) {
                  mx[i] = fmaxf(mx[i], s[nt][e]);
                }
              }
            }
          }
        }
      }
    }
    CpAsyncWait<0>();
    __syncthreads();
    if (active) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float m = QuadMax(mx[i]);
        const int r = wrow + 64 * (i >> 1) + g + 8 * (i & 1);
        if (t4 == 0 && r < rows) sMax[sub * kAnRows + r] = m * a.softmax_scale;
      }
    }
    __syncthreads();
    // x_a: AnAnchorKernel's double sum in row order.
    if (lane == 0 && warp < nsub) {
      double sum = 0;
      for (int r = 0; r < rows; ++r) sum += sMax[warp * kAnRows + r];
      a.xa[static_cast<int64_t>(first + warp) * a.num_blocks + block] =
          static_cast<float>(sum / rows);
    }
    __syncthreads();  // the next sweep reuses the Q space and sMax
  }
  if (a.clear_words > 0) AnClearBitmaps(a);  // after the sweeps: no live values to spill
}

// A stripe CTA's warp (both stripe kernels): its m-tile and group where it has one, the pooled
// queries' A fragments (the mma.sync A layout) split hi + lo, and x_a of rows g and g + 8 (NaN
// where the row is padding: it never passes).
template <typename T, int kD>
__device__ __forceinline__ void AnStripeWarpQueries(const AnArgs& a, const AnItem& item, int warp,
                                                    int g, int t4, bool has_tile, AnTile& tile,
                                                    AnGroup& grp, uint32_t (&ahi)[kD / 16][4],
                                                    uint32_t (&alo)[kD / 16][4], float (&xa)[2]) {
  constexpr int kKS = kD / 16;
  if (has_tile) {
    tile = a.tiles[item.tile_begin + warp];
    grp = a.groups[tile.group];
  }
  const int64_t row_base =
      static_cast<int64_t>(grp.slot) * a.num_blocks + grp.first_block + tile.row_begin;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    xa[h] = has_tile && r < tile.rows ? a.xa[row_base + r] : __int_as_float(0x7fffffff);
  }
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e & 1);
      const int c = ks * 16 + 2 * t4 + 8 * (e >> 1);
      float x0 = 0.f, x1 = 0.f;
      if (has_tile && r < tile.rows) {
        const float2 v = *reinterpret_cast<const float2*>(a.qbar + (row_base + r) * kD + c);
        x0 = v.x;
        x1 = v.y;
      }
      SplitPair<T>(x0, x1, ahi[ks][e], alo[ks][e]);
    }
  }
}

// A warp's m-tile against key tile j (S in the mma.sync C layout, 64 keys): the columns of the
// group's candidate ranges that some row keeps (x_a - s <= theta), OR-ed into the group's bitmap.
__device__ __forceinline__ void AnStripeMarkColumns(const AnArgs& a, const AnGroup& grp, int j,
                                                    const float (&s)[8][4], const float (&xa)[2],
                                                    int lane, int t4) {
  uint32_t words[2] = {0u, 0u};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = j + nt * 8 + 2 * t4 + e;
      const bool cand = (key >= grp.a1 && key < grp.b1) || (key >= grp.a2 && key < grp.b2);
      // NaN x_a (padding rows) never passes.
      const bool pass =
          cand && (xa[0] - s[nt][e] <= a.theta || xa[1] - s[nt][2 + e] <= a.theta);
      uint32_t bal = __ballot_sync(0xffffffffu, pass);  // lane 4 g + t4
      bal |= bal >> 16;
      bal |= bal >> 8;
      bal |= bal >> 4;  // bit t4: column 8 nt + 2 t4 + e kept by some row
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        words[nt >> 2] |= ((bal >> q) & 1u) << ((nt & 3) * 8 + 2 * q + e);
      }
    }
  }
  if (lane == 0) {
    uint32_t* bm = a.bitmaps + grp.bitmap_off + (j >> 5);
    if (words[0] != 0u) atomicOr(bm, words[0]);
    if (words[1] != 0u) atomicOr(bm + 1, words[1]);
  }
}

// Stripe scan: warp w takes m-tile item.tile_begin + w (16 pooled queries of one group).
// Two CTAs per SM (128 registers; 12 bytes of spill at d = 128, outside the tile loop). One CTA
// per SM (156 registers, no spill) took 1.29x as long at 32K and at 128K (H100,
// kernels/cuda/NOTES.md Session 22 — s22-build).
template <typename T, int kD>
__global__ void __launch_bounds__(kAnThreads, 2) AnStripeKernel(AnArgs a) {
  constexpr int kCh = kD / 8;
  constexpr int kKS = kD / 16;
  extern __shared__ __align__(128) char smem[];
  const uint32_t sKa = SmemAddr(smem);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const AnItem item = a.items[blockIdx.x];
  const AttnParams& p = a.p;
  const AnGroup g0 = a.groups[a.tiles[item.tile_begin].group];
  const int kvh = a.heads[g0.slot] / p.group;
  const int k_tok0 = p.cu_seqlens_k[g0.seq];
  const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;

  const bool has_tile = warp < item.tile_count;
  AnTile tile{0, 0, 0};
  AnGroup grp = g0;
  uint32_t ahi[kKS][4], alo[kKS][4];
  float xa[2];
  AnStripeWarpQueries<T, kD>(a, item, warp, g, t4, has_tile, tile, grp, ahi, alo, xa);
  const int kb = item.key_begin, ke = item.key_end;
  const int ntiles = (ke - kb + kAnTileN - 1) / kAnTileN;
  auto issue = [&](int t) {
    const int j = kb + t * kAnTileN;
    LoadTileAsync(
        sKa + (t & 1) * kAnTileN * kD * 2, kAnTileN, min(kAnTileN, ke - j), kCh,
        [&](int r) { return kg + static_cast<int64_t>(k_tok0 + j + r) * p.k_token_stride; }, tid,
        kAnThreads);
  };
  issue(0);
  CpAsyncCommit();
  for (int t = 0; t < ntiles; ++t) {
    AwaitTile(t, ntiles, issue);
    const int j = kb + t * kAnTileN;
    const bool overlap = has_tile && ((j < grp.b1 && j + kAnTileN > grp.a1 && grp.a1 < grp.b1) ||
                                      (j < grp.b2 && j + kAnTileN > grp.a2 && grp.a2 < grp.b2));
    if (overlap) {
      const uint32_t kst = sKa + (t & 1) * kAnTileN * kD * 2;
      float s[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
      }
      // Per k step: the hi products of all eight accumulators, then the lo products, so an
      // accumulator's two MMAs are eight apart (they were back to back); each accumulator still
      // adds hi then lo of each k step in k order, the same bits.
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t b[4][4];
#pragma unroll
        for (int np = 0; np < 4; ++np) LoadB2(kst, np * 16, ks, kCh, lane, b[np]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          Mma<T>::Run(s[2 * np], ahi[ks], b[np][0], b[np][1]);
          Mma<T>::Run(s[2 * np + 1], ahi[ks], b[np][2], b[np][3]);
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          Mma<T>::Run(s[2 * np], alo[ks], b[np][0], b[np][1]);
          Mma<T>::Run(s[2 * np + 1], alo[ks], b[np][2], b[np][3]);
        }
      }
      AnStripeMarkColumns(a, grp, j, s, xa, lane, t4);
    }
    __syncthreads();
  }
  CpAsyncWait<0>();
}

// ---- Stripe scan by wgmma (sm_90a; AnchorKnobs().stripe_wg, anchor_knobs.h) ----
//
// AnStripeKernel's CTA (an item: up to 8 m-tiles of 16 pooled queries, warp w takes tile w) with
// the products of warpgroup q (warps 4 q .. 4 q + 3: four m-tiles, 64 rows) from m64n64k16
// wgmmas: A = the warp's hi and lo fragments in registers (the mma.sync A layout), B = the key
// tile by descriptor (Tile64KeyOff layout). Each accumulator starts at +0 and adds hi then lo of
// each k16 step in k order, as AnStripeKernel's mma.sync (per k step 2 instructions per
// warpgroup instead of 64 mma.sync + 16 ldmatrix.x4 per warp); the bitmap words come from the
// same C layout by the same code. A warpgroup runs its products when some warp of it has a tile
// overlapping the key tile (bar.red.or over its 128 threads).
template <int kD>
constexpr int AnStripeWgSmemBytes() {
  return 1024 + 2 * kAnTileN * kD * 2;
}

// Named barriers 1 and 2 (immediates: a register id makes ptxas reserve all 16).
template <int kBar>
__device__ __forceinline__ bool WarpgroupAnyAt(bool v) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n"
      " bar.red.or.pred q, %2, 128, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v)), "n"(kBar)
      : "memory");
  return r != 0;
}
__device__ __forceinline__ bool WarpgroupAny(bool v, int wg) {
  return wg == 0 ? WarpgroupAnyAt<1>(v) : WarpgroupAnyAt<2>(v);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kAnThreads, 2) AnStripeWgKernel(AnArgs a) {
  constexpr int kCh = kD / 8;
  constexpr int kKS = kD / 16;
  constexpr int kKBytes = kAnTileN * kD * 2;
  extern __shared__ __align__(128) char smem[];
  const uint32_t sKa = (SmemAddr(smem) + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const AnItem item = a.items[blockIdx.x];
  const AttnParams& p = a.p;
  const AnGroup g0 = a.groups[a.tiles[item.tile_begin].group];
  const int kvh = a.heads[g0.slot] / p.group;
  const int k_tok0 = p.cu_seqlens_k[g0.seq];
  const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;

  const bool has_tile = warp < item.tile_count;
  AnTile tile{0, 0, 0};
  AnGroup grp = g0;
  uint32_t ahi[kKS][4], alo[kKS][4];
  float xa[2];
  AnStripeWarpQueries<T, kD>(a, item, warp, g, t4, has_tile, tile, grp, ahi, alo, xa);
  const int kb = item.key_begin, ke = item.key_end;
  const int ntiles = (ke - kb + kAnTileN - 1) / kAnTileN;
  auto issue = [&](int t) {
    const int j = kb + t * kAnTileN;
    const int n = min(kAnTileN, ke - j);
    const uint32_t dst = sKa + (t & 1) * kKBytes;
    const T* base = kg + static_cast<int64_t>(k_tok0 + j) * p.k_token_stride;
    for (int i = tid; i < kAnTileN * kCh; i += kAnThreads) {
      const int r = i / kCh, ch = i - r * kCh;
      const bool valid = r < n;
      const int64_t row = valid ? r : 0;
      const char* src =
          reinterpret_cast<const char*>(base + row * p.k_token_stride) + (valid ? ch * 16 : 0);
      CpAsync16(dst + Tile64KeyOff(r, ch), src, valid);
    }
  };
  issue(0);
  CpAsyncCommit();
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) issue(t + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
#if SPATTN_AN_SM90A
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    __syncthreads();
    const int j = kb + t * kAnTileN;
    const bool overlap = has_tile && ((j < grp.b1 && j + kAnTileN > grp.a1 && grp.a1 < grp.b1) ||
                                      (j < grp.b2 && j + kAnTileN > grp.a2 && grp.a2 < grp.b2));
    if (WarpgroupAny(overlap, warp >> 2)) {
#if SPATTN_AN_SM90A
      const uint64_t desc0 = Tile64SmemDesc(sKa + (t & 1) * kKBytes);
      float s[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
      }
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        const uint64_t d = desc0 + (((ks >> 2) * (64 * 128) + (ks & 3) * 32) >> 4);
        Tile64Wgmma<T>::RS(s, ahi[ks], d, 1);
        Tile64Wgmma<T>::RS(s, alo[ks], d, 1);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      Tile64Wait(s);
      if (overlap) {
        AnStripeMarkColumns(a, grp, j, s, xa, lane, t4);
      }
#else
      __trap();
#endif
    }
    __syncthreads();
  }
  CpAsyncWait<0>();
}

struct AnSrc {
  AnAsmArgs a;
  struct Shared {
    int init_end, gfp, glp;
    int bm_words;
    int64_t bm_off;
  };
  __device__ void Begin(int unit, Shared& sh, RowCtx& ctx) const {
    const int slot = unit / a.num_blocks, block = unit - slot * a.num_blocks;
    const BlockGeoDev g = a.geo[block];
    const AnGroup grp = a.groups[slot * a.groups_per_slot + a.group_of_block[block]];
    ctx.key_end = g.key_end;
    ctx.block = block;
    ctx.num_slots = 1;
    ctx.slots[0] = slot;
    sh.init_end = grp.init_end;
    sh.gfp = grp.gfp;
    sh.glp = grp.glp;
    sh.bm_words = (grp.k_len + 31) / 32;
    sh.bm_off = grp.bitmap_off;
  }
  __device__ void SetBits(const RowCtx& ctx, const Shared& sh, uint32_t* R, uint32_t* C,
                          int64_t wbase) const {
    OrSpanBlock(R, wbase, 0, sh.init_end);
    OrSpanBlock(R, wbase, sh.gfp, static_cast<int64_t>(sh.glp) + 1);
    for (int i = threadIdx.x; i < kAsmArrayWords; i += blockDim.x) {
      const int64_t w = wbase + i;
      if (w >= 0 && w < sh.bm_words) C[i] = a.bitmaps[sh.bm_off + w];
    }
  }
};

// The kernel's dynamic shared memory limit; with `once` (AnKnobs::lean) set once per (kernel,
// device, bytes) in the process instead of before every launch (main's: every build).
cudaError_t AnSetSmem(const void* kernel, int bytes, bool once) {
  if (!once) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  }
  struct Done {
    const void* kernel;
    int device, bytes;
  };
  static std::mutex mu;
  static std::vector<Done> done;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  for (const Done& d : done) {
    if (d.kernel == kernel && d.device == device && d.bytes == bytes) return cudaSuccess;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.push_back(Done{kernel, device, bytes});
  return err;
}

// parts: bit 0 the anchor pass (with the bitmaps' clear and anchor_done), bit 1 the stripe scan
// (s41-anchor's early launch enqueues them apart, the stripe scan's tables built in between).
template <typename T, int kD>
cudaError_t AnLaunchTyped(const AnArgs& a, int parts, cudaStream_t stream) {
  const bool wg = AnchorUsesWgmma();
  auto anchor = wg ? AnAnchorWgKernel<T, kD> : AnAnchorKernel<T, kD>;
  const int anchor_smem = wg ? AnAnchorWgSmemBytes<kD>() : AnAnchorSmemBytes<kD>();
  const bool stripe_wg = wg && AnchorKnobs().stripe_wg;
  auto stripe = stripe_wg ? AnStripeWgKernel<T, kD> : AnStripeKernel<T, kD>;
  const int stripe_smem = stripe_wg ? AnStripeWgSmemBytes<kD>() : AnStripeSmemBytes<kD>();
  const bool lean = AnchorKnobs().lean;
  cudaError_t err = AnSetSmem(reinterpret_cast<const void*>(anchor), anchor_smem, lean);
  if (err != cudaSuccess) return err;
  err = AnSetSmem(reinterpret_cast<const void*>(stripe), stripe_smem, lean);
  if (err != cudaSuccess) return err;
  const int64_t blocks = static_cast<int64_t>((a.num_slots + kAnPair - 1) / kAnPair) * a.num_blocks;
  if ((parts & 1) == 0) {  // the stripe scan alone
    if (a.num_items == 0 || (parts & 2) == 0) return cudaSuccess;
    stripe<<<a.num_items, kAnThreads, stripe_smem, stream>>>(a);
    return cudaGetLastError();
  }
  if (a.clear_words > 0 && blocks == 0) {  // no pass to clear them (words need blocks)
    err = cudaMemsetAsync(a.bitmaps, 0, a.clear_words * 4, stream);
    if (err != cudaSuccess) return err;
  }
  if (blocks > 0) {
    anchor<<<static_cast<unsigned>(blocks), kAnThreads, anchor_smem, stream>>>(a);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  if (a.anchor_done != nullptr && (err = cudaEventRecord(a.anchor_done, stream)) != cudaSuccess) {
    return err;
  }
  if (a.num_items > 0 && (parts & 2)) {
    stripe<<<a.num_items, kAnThreads, stripe_smem, stream>>>(a);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace assembled

AnKnobs& AnchorKnobs() {
  static AnKnobs knobs = [] {
    AnKnobs k;
    if (const char* c = std::getenv("SPATTN_ANCHOR_WGMMA")) k.wgmma = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_ANCHOR_STRIPE_WG")) k.stripe_wg = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_ANCHOR_LEAN")) k.lean = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_ANCHOR_EARLY")) k.early = c[0] != '0';
    return k;
  }();
  return knobs;
}

bool AnchorUsesWgmma() { return AnchorKnobs().wgmma && CurrentDeviceIsSm90(); }

// s41-anchor (AnKnobs::early, anchor_host.cc): parts 1 = the anchor pass, 2 = the stripe scan.
cudaError_t LaunchAnchorSelectParts(const AnArgs& a, int parts, cudaStream_t stream) {
  using namespace assembled;
  const bool bf16 = a.p.dtype == DType::kBF16;
  if (a.p.head_dim == 64) {
    return bf16 ? AnLaunchTyped<__nv_bfloat16, 64>(a, parts, stream)
                : AnLaunchTyped<__half, 64>(a, parts, stream);
  }
  if (a.p.head_dim == 128) {
    return bf16 ? AnLaunchTyped<__nv_bfloat16, 128>(a, parts, stream)
                : AnLaunchTyped<__half, 128>(a, parts, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAnchorSelect(const AnArgs& a, cudaStream_t stream) {
  return LaunchAnchorSelectParts(a, 3, stream);
}

cudaError_t LaunchAnchorAssemble(const AnAsmArgs& a, const AsmOut& out, bool fill,
                                 cudaStream_t stream) {
  assembled::AnSrc src{a};
  return assembled::LaunchAssemble(src, a.num_slots * a.num_blocks, out, fill, stream);
}

cudaError_t LaunchAnchorLeanCount(const AnAsmArgs& a, const AsmOut& out, int32_t* range_indptr,
                                  int32_t* col_indptr, int64_t* totals, cudaStream_t stream) {
  cudaError_t err = LaunchAnchorAssemble(a, out, false, stream);
  if (err != cudaSuccess) return err;
  const int64_t rows = static_cast<int64_t>(a.num_slots) * a.num_blocks;
  return LaunchScanBothOffsets(out, rows, range_indptr, col_indptr, totals, stream);
}

}  // namespace cuda
}  // namespace spattn
