// Saap (seed 001) on the GPU, the twin of kernels/builders/saap.cc:
//  1. Keys: 64-key tiles de-roped (angles in double, as RotateRope) and assigned to the nearest
//     unit centroid by tensor-core products of bf16 hi/lo splits (hi.hi + hi.lo + lo.hi keeps
//     ~16 mantissa bits of the float product); argmax with the lowest centroid on ties.
//  2. Bucket lists per (kv head, sequence): histogram, scan, scatter (members unordered: the
//     row assembler only ORs them into a bitmap).
//  3. Queries: one CTA per (kv group, query block) runs, for every requested q head of the
//     group and every 64 rows of the block (or, with classify_rows below block_m, per (kv group,
//     64 / classify_rows blocks) on classify_rows sampled rows of each block; above 64 sampled
//     rows, per (kv group, block) in 64-row tiles), the de-rope and the classifier MLP on tensor
//     cores
//     (X -> hidden in shared memory as bf16 -> logits in 256-wide chunks with an online row
//     max / sum; wgmma on sm_90a, ClsGemmWg, mma.sync elsewhere and with
//     SPATTN_SAAP_CLS_WGMMA=0, ClsGemm: the same logits bit for bit), then adds softmax(logits) of
//     its rows to the block's bucket scores and takes the top_l buckets (common/topk.cuh
//     CtaTopKByBisection, or one warp per block in sampled mode: ties to the lower bucket).
//  4. Assembly: sink + local ranges and the members of the visited buckets, written to every
//     head slot of the group.
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/attention/hopper/sm90_primitives.cuh"
#include "kernels/cuda/builders/assembled_common.cuh"
#include "kernels/cuda/builders/saap_knobs.h"
#include "kernels/cuda/common/topk.cuh"
#include "kernels/cuda/common/wgmma_tile64.cuh"

namespace spattn {
namespace cuda {
namespace assembled {
namespace {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPATTN_SAAP_SM90A 1
#else
#define SPATTN_SAAP_SM90A 0
#endif

constexpr double kTwoPi = 6.283185307179586;
constexpr float kLog2e = 1.4426950408889634f;

// ---- De-rope ------------------------------------------------------------------------------------

// cos / sin (sign -1: RoPE removed) of row k of a 64-row span starting at `base`, pair i:
// the CPU's angle-addition in double, rounded to float.
__device__ __forceinline__ void RopeCS(const double* base_cs, const double* step_cs, int half,
                                       int k, int i, float& c, float& s) {
  const double bc = base_cs[2 * i], bs = base_cs[2 * i + 1];
  const double sc = step_cs[(static_cast<int64_t>(k) * half + i) * 2];
  const double ss = step_cs[(static_cast<int64_t>(k) * half + i) * 2 + 1];
  c = static_cast<float>(bc * sc - bs * ss);
  s = static_cast<float>(-(bs * sc + bc * ss));
}

// Thread i < half: base angle of position `pos` (fmod before cos/sin, as RotateRope).
__device__ __forceinline__ void BaseAngles(const double* inv_freq, int half, int64_t pos,
                                           double* base_cs) {
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double ang = fmod(static_cast<double>(pos) * inv_freq[i], kTwoPi);
    double s, c;
    sincos(ang, &s, &c);
    base_cs[2 * i] = c;
    base_cs[2 * i + 1] = s;
  }
}

// Column pair i of a RoPE'd row (interleaved: 2i, 2i + 1; halves: i, i + half), and the pair
// of a row read from T: what the key and query de-ropes share.
struct RopePair {
  int a, b;
};
__device__ __forceinline__ RopePair PairCols(bool interleaved, int half, int i) {
  return interleaved ? RopePair{2 * i, 2 * i + 1} : RopePair{i, i + half};
}
template <typename T>
__device__ __forceinline__ float2 LoadPair(const T* row, RopePair pc) {
  return make_float2(ToF(row[pc.a]), ToF(row[pc.b]));
}
// (x1, x2) rotated by (c, s).
__device__ __forceinline__ float2 Rotate(float2 x, float c, float s) {
  return make_float2(x.x * c - x.y * s, x.y * c + x.x * s);
}

// ---- 1. Key assignment --------------------------------------------------------------------------

constexpr int kAsThreads = 128;  // 4 warps x 16 keys
constexpr int kAsKeys = 64;
constexpr int kAsTileC = 64;

// Shared memory: the double-buffered hi / lo centroid tiles and the tile's base angles. The
// de-roped keys go straight from global memory into each warp's A fragments (no float key tile):
// 66.5 KB at d 128, three CTAs per SM (12 warps) instead of two with a 34 KB key tile.
// kWg (the wgmma kernel): 1024 more bytes, so the tiles start 1024-byte aligned.
template <int kD, bool kWg = false>
constexpr int AssignSmemBytes() {
  return 2 * 2 * kAsTileC * kD * 2 + kD * 8 + (kWg ? 1024 : 0);
}

// kWg (SaapKnobs().keys_wgmma, sm_90a): the CTA's four warps are one warpgroup, its 64 keys the
// m64 A operand (the same hi / lo fragments in registers: wgmma's RS A layout is mma.sync's per
// warp) and each centroid tile the n64 B operand by descriptor, stored in wgmma_tile64.cuh's
// layout (Tile64KeyOff: [kD / 64][64 rows][128 bytes]; at d 64 the same bytes as TileOff). Per k
// step hi.hi, hi.lo, lo.hi as the mma.sync loop adds them to each accumulator, from zeroed
// accumulators: the same sums bit for bit (session 29), the same argmax and index
// (KeysWgmmaBuildsTheSameIndex). false: main's kernel.
template <typename T, int kD, bool kWg = false>
__global__ void __launch_bounds__(kAsThreads, 3) SaapAssignKernel(SaapArgs a) {
  constexpr int kHalf = kD / 2, kCh = kD / 8, kKS = kD / 16;
  constexpr int kTileBytes = kAsTileC * kD * 2;
  extern __shared__ __align__(128) char smem_raw[];
  char* smem = smem_raw;
  if constexpr (kWg) smem += (1024 - (SmemAddr(smem_raw) & 1023)) & 1023;
  const uint32_t sCa = SmemAddr(smem);
  double* sBase = reinterpret_cast<double*>(smem + 4 * kTileBytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const SaapKeyTile kt = a.key_tiles[blockIdx.x];
  const AttnParams& p = a.p;
  const SaapAssetsDev& as = a.assets;
  const int kvh = a.kv_heads[kt.kv_index];
  const int k_tok0 = p.cu_seqlens_k[kt.seq];
  const int k_len = p.cu_seqlens_k[kt.seq + 1] - k_tok0;
  const int n = min(kAsKeys, k_len - kt.first);
  const int C = as.num_centroids;
  const int ntiles = as.c_pad / kAsTileC;
  const __nv_bfloat16* chi = static_cast<const __nv_bfloat16*>(as.centroid_hi[kvh]);
  const __nv_bfloat16* clo = static_cast<const __nv_bfloat16*>(as.centroid_lo[kvh]);
  // LoadTileAsync's tiles of kAsTileC rows x kCh chunks, every row valid: thread tid always
  // loads chunk tid % kCh of rows tid / kCh + kRowStep j, whose swizzle (row & 7) is the same for
  // every j (kRowStep is a multiple of 8). Offsets set once, constants added per tile.
  constexpr int kRowStep = kAsThreads / kCh;
  static_assert(kRowStep % 8 == 0 && kAsTileC % kRowStep == 0, "tile rows per thread");
  const int lr = tid / kCh, lch = tid - lr * kCh;
  const int64_t csrc = static_cast<int64_t>(lr) * kD + lch * 8;
  const uint32_t cdst = sCa + (kWg ? Tile64KeyOff(lr, lch) : TileOff(lr, lch, kCh));
  // Row lr + kRowStep j: kRowStep j rows further in either layout (128 bytes a row in
  // Tile64KeyOff's, kCh x 16 in TileOff's).
  constexpr int kRowBytes = kWg ? 128 : kCh * 16;
  auto issue = [&](int t) {
    const uint32_t dst = cdst + (t & 1) * 2 * kTileBytes;
    const int64_t src = csrc + static_cast<int64_t>(t) * kAsTileC * kD;
#pragma unroll
    for (int j = 0; j < kAsTileC / kRowStep; ++j) {
      CpAsync16(dst + j * kRowStep * kRowBytes, chi + src + j * kRowStep * kD, true);
      CpAsync16(dst + kTileBytes + j * kRowStep * kRowBytes, clo + src + j * kRowStep * kD, true);
    }
  };
  issue(0);
  CpAsyncCommit();

  BaseAngles(as.inv_freq, kHalf, kt.first, sBase);
  __syncthreads();
  // De-roped keys (float, the same operations as RotateRope's twin) split into bf16 hi / lo A
  // fragments. Fragment element e of k step ks holds row row0 + g + 8 (e & 1), columns
  // c, c + 1 with c = 16 ks + 2 t4 + 8 (e >> 1). Interleaved RoPE: (c, c + 1) is pair c / 2.
  // Halves: c and c + 1 are the first members of pairs c and c + 1, whose second members
  // (columns c + half, c + 1 + half) are the same element of k step ks + kKS / 2.
  const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride;
  const int row0 = warp * 16;
  uint32_t ahi[kKS][4], alo[kKS][4];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = row0 + g + 8 * hh;
    const T* krow =
        r < n ? kg + static_cast<int64_t>(k_tok0 + kt.first + r) * p.k_token_stride : nullptr;
    auto derope = [&](int i) {
      const RopePair pc = PairCols(as.interleaved, kHalf, i);
      const float2 x = krow != nullptr ? LoadPair(krow, pc) : make_float2(0.f, 0.f);
      float c, s;
      RopeCS(sBase, as.step_cs, kHalf, r, i, c, s);
      return Rotate(x, c, s);
    };
    if (as.interleaved) {
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const int e = hh + 2 * cc, c = ks * 16 + 2 * t4 + 8 * cc;
          const float2 y = derope(c / 2);
          SplitPair<__nv_bfloat16>(y.x, y.y, ahi[ks][e], alo[ks][e]);
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < kKS / 2; ++ks) {
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const int e = hh + 2 * cc, c = ks * 16 + 2 * t4 + 8 * cc;
          const float2 y0 = derope(c), y1 = derope(c + 1);
          SplitPair<__nv_bfloat16>(y0.x, y1.x, ahi[ks][e], alo[ks][e]);
          SplitPair<__nv_bfloat16>(y0.y, y1.y, ahi[ks + kKS / 2][e], alo[ks + kKS / 2][e]);
        }
      }
    }
  }
  float best_v[2] = {kNegInf, kNegInf};
  int best_c[2] = {0, 0};
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) issue(t + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    // The tile's copies visible to wgmma's async proxy.
#if SPATTN_SAAP_SM90A
    if constexpr (kWg) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    __syncthreads();
    const uint32_t th = sCa + (t & 1) * 2 * kTileBytes, tl = th + kTileBytes;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
    }
    if constexpr (kWg) {
#if SPATTN_SAAP_SM90A
      const uint64_t dh = Tile64SmemDesc(th), dl = Tile64SmemDesc(tl);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        // k step ks: sub-tile ks / 4, 32 bytes a step into its 128-byte rows (address field / 16).
        const uint64_t o = static_cast<uint64_t>(((ks >> 2) * (64 * 128) + (ks & 3) * 32) >> 4);
        Tile64Wgmma<__nv_bfloat16>::RS(acc, ahi[ks], dh + o, 1);
        Tile64Wgmma<__nv_bfloat16>::RS(acc, ahi[ks], dl + o, 1);
        Tile64Wgmma<__nv_bfloat16>::RS(acc, alo[ks], dh + o, 1);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      Tile64Wait(acc);
      // The A fragments are read by the wgmma until the wait: keep their registers until here.
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(ahi[ks][i]), "+r"(alo[ks][i])::"memory");
      }
#else
      __trap();
#endif
    } else {
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bh[4], bl[4];
        LoadB2(th, np * 16, ks, kCh, lane, bh);
        LoadB2(tl, np * 16, ks, kCh, lane, bl);
        Mma<__nv_bfloat16>::Run(acc[2 * np], ahi[ks], bh[0], bh[1]);
        Mma<__nv_bfloat16>::Run(acc[2 * np + 1], ahi[ks], bh[2], bh[3]);
        Mma<__nv_bfloat16>::Run(acc[2 * np], ahi[ks], bl[0], bl[1]);
        Mma<__nv_bfloat16>::Run(acc[2 * np + 1], ahi[ks], bl[2], bl[3]);
        Mma<__nv_bfloat16>::Run(acc[2 * np], alo[ks], bh[0], bh[1]);
        Mma<__nv_bfloat16>::Run(acc[2 * np + 1], alo[ks], bh[2], bh[3]);
      }
    }
    }
    // Ascending centroid order within the thread: a strict > keeps the lowest on ties.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = t * kAsTileC + nt * 8 + 2 * t4 + (e & 1);
        const int h = e >> 1;
        if (c < C && acc[nt][e] > best_v[h]) {
          best_v[h] = acc[nt][e];
          best_c[h] = c;
        }
      }
    }
    __syncthreads();
  }
  CpAsyncWait<0>();
  const int64_t out0 = a.unit_key_off[kt.kv_index * p.batch + kt.seq] + kt.first;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float bv = best_v[h];
    int bc = best_c[h];
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oc = __shfl_xor_sync(0xffffffffu, bc, o);
      if (ov > bv || (ov == bv && oc < bc)) {
        bv = ov;
        bc = oc;
      }
    }
    const int r = row0 + g + 8 * h;
    if (t4 == 0 && r < n) a.bucket_of[out0 + r] = bc;
  }
}

// ---- 2. Bucket lists ----------------------------------------------------------------------------

__global__ void SaapHistogramKernel(SaapArgs a) {
  const SaapKeyTile kt = a.key_tiles[blockIdx.x];
  const int k_len = a.p.cu_seqlens_k[kt.seq + 1] - a.p.cu_seqlens_k[kt.seq];
  const int r = threadIdx.x;
  if (kt.first + r >= k_len) return;
  const int64_t unit = static_cast<int64_t>(kt.kv_index) * a.p.batch + kt.seq;
  const int b = a.bucket_of[a.unit_key_off[unit] + kt.first + r];
  atomicAdd(a.bucket_off + unit * a.assets.num_centroids + b, 1);
}

__global__ void SaapScatterKernel(SaapArgs a) {
  const SaapKeyTile kt = a.key_tiles[blockIdx.x];
  const int k_len = a.p.cu_seqlens_k[kt.seq + 1] - a.p.cu_seqlens_k[kt.seq];
  const int r = threadIdx.x;
  if (kt.first + r >= k_len) return;
  const int64_t unit = static_cast<int64_t>(kt.kv_index) * a.p.batch + kt.seq;
  const int b = a.bucket_of[a.unit_key_off[unit] + kt.first + r];
  const int at = atomicAdd(a.bucket_cursor + unit * a.assets.num_centroids + b, 1);
  a.bucket_idx[at] = kt.first + r;
}

// ---- 3. Query classification --------------------------------------------------------------------

constexpr int kClsThreads = 256;  // 8 warps: 2 row halves x 4 column quarters
constexpr int kClsRows = 64;
constexpr int kClsN = 256;  // output columns per chunk
constexpr int kClsK = 64;   // k per streamed weight slab
constexpr int kClsSlabBytes = kClsN * kClsK * 2;

struct ClsLayout {
  int x, h, w, score, stat, rowm, rowinv, base, total;
};
// wg (the wgmma kernel): 1024 more bytes in the slab buffers' space, whose start the kernel
// rounds up to a multiple of 1024 (the 128-byte swizzle's base; the dynamic shared memory starts
// after the top-l's static storage).
__host__ __device__ inline ClsLayout MakeClsLayout(int head_dim, int num_layers, int hidden_pad,
                                                   int c_pad, bool wg = false) {
  ClsLayout l;
  l.x = 0;
  l.h = l.x + kClsRows * head_dim * 2;
  l.w = l.h + (num_layers == 2 ? kClsRows * hidden_pad * 2 : 0);
  l.score = l.w + 2 * kClsSlabBytes + (wg ? 1024 : 0);
  l.stat = l.score + c_pad * 4;
  l.rowm = l.stat + 4 * kClsRows * 8;
  l.rowinv = l.rowm + kClsRows * 4;
  l.base = l.rowinv + kClsRows * 4;
  l.total = l.base + head_dim * 8;
  return l;
}

// Thread tid's share of the copy of one weight slab (LoadTileAsync's tile of kClsN rows x
// kClsK / 8 chunks, every row valid) into buffer s & 1 at sW: chunk tid % 8 of rows tid / 8 +
// kRowStep j (j < kClsN / kRowStep), whose swizzle (row & 7) is the same for every j, so its
// source and destination offsets are set once, not per slab. packed (SaapKnobs().cls_packed):
// w is the slab-by-slab layout of saap_knobs.h (ClsGemm).
struct ClsSlabCopy {
  static constexpr int kSlabCh = kClsK / 8, kRowStep = kClsThreads / kSlabCh;
  static_assert(kClsN % kRowStep == 0, "slab rows per thread");
  const __nv_bfloat16* src;
  int64_t slab_stride, step;
  uint32_t dst;
  __device__ __forceinline__ ClsSlabCopy(int tid, int K, const __nv_bfloat16* w, int n0,
                                         uint32_t sW, bool packed) {
    const int lr = tid / kSlabCh, lch = tid - lr * kSlabCh;
    const int64_t row_stride = packed ? kClsK : K;
    slab_stride = packed ? int64_t{kClsN} * kClsK : kClsK;
    src = w +
          (packed ? static_cast<int64_t>(n0 / kClsN) * (K / kClsK) * kClsN * kClsK
                  : static_cast<int64_t>(n0) * K) +
          lr * row_stride + lch * 8;
    dst = sW + TileOff(lr, lch, kSlabCh);
    step = kRowStep * row_stride;
  }
  __device__ __forceinline__ void Issue(int s) const {
    const __nv_bfloat16* from = src + s * slab_stride;
    const uint32_t to = dst + (s & 1) * kClsSlabBytes;
#pragma unroll
    for (int j = 0; j < kClsN / kRowStep; ++j) {
      CpAsync16(to + j * kRowStep * kSlabCh * 16, from + j * step, true);
    }
  }
};

// acc = A[64 x K] (swizzled bf16 tile, K / 8 chunks per row) * W[n0, n0 + 256) x K ^T (bf16
// rows of K elements in global memory, streamed in 64-wide k slabs). Warp w: rows
// 32 (w & 1) + [0, 32), columns n0 + 64 (w >> 1) + [0, 64).
// packed (SaapKnobs().cls_packed): w is the slab-by-slab layout of saap_knobs.h, chunk n0 / 256's
// slab s the 32 KB at (n0 / 256 x K / 64 + s) x 16384 elements, 64 per row.
__device__ __forceinline__ void ClsGemm(uint32_t sA, int K, const __nv_bfloat16* w, int n0,
                                        uint32_t sW, float (&acc)[2][8][4], bool packed) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wr = warp & 1, wc = warp >> 1;
  const int chunks_a = K / 8;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }
  const int slabs = K / kClsK;
  uint32_t a_row[2], a_sw[kClsK / 16];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) a_row[mt] = sA + (32 * wr + 16 * mt + (lane & 15)) * chunks_a * 16;
#pragma unroll
  for (int kk = 0; kk < kClsK / 16; ++kk) a_sw[kk] = ((2 * kk + (lane >> 4)) ^ (lane & 7)) * 16;
  const ClsSlabCopy slab(tid, K, w, n0, sW, packed);
  auto issue = [&](int s) { slab.Issue(s); };
  issue(0);
  CpAsyncCommit();
  for (int s = 0; s < slabs; ++s) {
    if (s + 1 < slabs) issue(s + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint32_t ws = sW + (s & 1) * kClsSlabBytes;
#pragma unroll
    for (int kk = 0; kk < kClsK / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        // LoadA(sA, 32 wr + 16 mt, 4 s + kk, chunks_a, ...): chunk 8 s + (2 kk + lane / 16),
        // swizzled by lane & 7 within its group of 8 chunks.
        LdMatrixX4(a_row[mt] + s * (kClsK / 8) * 16 + a_sw[kk], af[mt][0], af[mt][1], af[mt][2],
                   af[mt][3]);
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        LoadB2(ws, 64 * wc + 16 * np, kk, kClsK / 8, lane, b);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Mma<__nv_bfloat16>::Run(acc[mt][2 * np], af[mt], b[0], b[1]);
          Mma<__nv_bfloat16>::Run(acc[mt][2 * np + 1], af[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }
}

// ClsGemm by wgmma (sm_90a; SaapKnobs().cls_wgmma, saap_knobs.h), the same products bit for bit.
// Warpgroup u = warp / 4 takes columns n0 + 128 u + [0, 128) of all 64 rows: one m64n128k16 per
// k step, whose A operand is warp w's 16 rows 16 (w % 4) + [0, 16) in registers (ldmatrix from
// the swizzled tile, ClsGemm's A fragments) and whose B operand is the slab's 128 rows read by
// descriptor (a slab, 256 rows x 64 k = 128 bytes per row with chunk ^ (row & 7), is the 128-byte
// swizzle layout of wgmma_tile64.cuh when its base is 1024-byte aligned: sW is). acc[h][nt][e]:
// row 16 (w % 4) + g + 8 (e >> 1), column n0 + 128 u + 64 h + 8 nt + 2 t4 + (e & 1), zeroed and
// then every k step added in k order, as ClsGemm's mma.sync does (the wgmma and mma.sync products
// of sampled_lines and anchor compare equal bit for bit; build_index_gpu_test's
// WgmmaClassifierIsTheMmaSyncClassifier checks the classes here). Per warp and slab 4 ldmatrix.x4
// and 4 wgmma instead of 8 ldmatrix.x4 + 4 ldmatrix.x4 of B x 4 and 64 mma.sync, and a slab read
// from shared memory once per warpgroup instead of once per warp. Slab s + 1 streams in while the
// wgmma of slab s run; the wait for them sits before the barrier that frees slab s's buffer.
__device__ __forceinline__ void ClsGemmWg(uint32_t sA, int K, const __nv_bfloat16* w, int n0,
                                          uint32_t sW, float (&acc)[2][8][4], bool packed) {
#if SPATTN_SAAP_SM90A
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int u = warp >> 2, wq = warp & 3;
  const int chunks_a = K / 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[h][nt][e] = 0.f;
    }
  }
  const int slabs = K / kClsK;
  const uint32_t a_row = sA + (16 * wq + (lane & 15)) * chunks_a * 16;
  uint32_t a_sw[kClsK / 16];
#pragma unroll
  for (int kk = 0; kk < kClsK / 16; ++kk) a_sw[kk] = ((2 * kk + (lane >> 4)) ^ (lane & 7)) * 16;
  // The slab copies of ClsGemm.
  static_assert(kClsN == 2 * 128 && kClsK == 64, "two warpgroups of n128, 128-byte slab rows");
  const ClsSlabCopy slab(tid, K, w, n0, sW, packed);
  auto issue = [&](int s) { slab.Issue(s); };
  // The A fragments stay live until their wgmma are waited for (an empty asm reads them after
  // the wait), so the compiler does not reuse their registers while the wgmma read them.
  uint32_t af[kClsK / 16][4];
  auto wait_mma = [&] {
    Tile64Wait(acc);
#pragma unroll
    for (int kk = 0; kk < kClsK / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(af[kk][i])::"memory");
    }
  };
  issue(0);
  CpAsyncCommit();
  for (int s = 0; s < slabs; ++s) {
    // Slab s has landed (this thread's copies; the barrier: everyone's) and is visible to wgmma
    // (fence.proxy.async); every warpgroup's wgmma of slab s - 1 are done, so its buffer takes
    // slab s + 1.
    CpAsyncWait<0>();
    if (s > 0) wait_mma();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (s + 1 < slabs) issue(s + 1);
    CpAsyncCommit();
#pragma unroll
    for (int kk = 0; kk < kClsK / 16; ++kk) {
      LdMatrixX4(a_row + s * (kClsK / 8) * 16 + a_sw[kk], af[kk][0], af[kk][1], af[kk][2],
                 af[kk][3]);
    }
    const uint64_t desc = Tile64SmemDesc(sW + (s & 1) * kClsSlabBytes + u * (128 * kClsK * 2));
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < kClsK / 16; ++kk) {
      // k step kk: 32 bytes into the 128-byte rows (the descriptor's address field counts 16).
      Tile64WgmmaN128<__nv_bfloat16>::RS(acc, af[kk], desc + ((kk * 32) >> 4), 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  }
  wait_mma();
  __syncthreads();  // every warpgroup is done with the slab buffers (the next call loads slab 0)
#else
  __trap();
#endif
}

// ---- The classifier's weights by TMA (SaapKnobs().cls_tma) --------------------------------------
// ----------------------------------------
//
// ClsGemmWg streams each 32 KB slab with every thread's cp.async, then per slab a cp.async wait,
// the wgmma wait and a CTA barrier with all 8 warps in step (NOTES session 40: those syncs, not
// bytes, are the slab loop's cost), and a CTA barrier at the end of every 256-column chunk. Here
// each warpgroup streams only its own 128-row half of each slab (16 KB, contiguous in the
// pre-swizzled packed layout of saap_knobs.h: the shared-memory image of the 128-byte swizzle)
// into its own stages in main's two 32 KB buffers, each stage one bulk copy issued by the
// warpgroup's first thread and counted on the stage's mbarrier (tx bytes) instead of 256
// threads' cp.async waits. A warpgroup waits only on its own stages' barriers; the slab loop has
// no CTA barrier, and the ring runs over the tile's whole slab sequence (layer 1's chunks, then
// layer 2's), so the next chunk's first slabs load during this chunk's epilogue.
// kStages a warpgroup: 2 (a stage is the warpgroup's 16 KB of a slab, one m64n128k16 a k step)
// or 4 (two 8 KB stages a slab, its 64-row n halves, one m64n64k16 a k step into each half's
// accumulators: three stages in flight while one is multiplied). Either way every accumulator
// gets ClsGemmWg's k steps, with the same A fragments and B rows, in the same order: the same
// sums (a wgmma's n width does not change a column's products; wgmma and mma.sync already agree
// bit for bit, WgmmaClassifierIsTheMmaSyncClassifier).

// 1-D bulk copy (TMA without a tensor map) of `bytes` (a multiple of 16) from global `src` to
// shared `dst`, counted on the mbarrier `bar` (its phase announced by MbarArriveExpectTx).
__device__ __forceinline__ void ClsBulkLoad(uint32_t dst, const void* src, uint32_t bytes,
                                            uint32_t bar) {
#if SPATTN_SAAP_SM90A
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// The stages' full barriers, stage b of warpgroup u at 8 (kStages u + b) bytes (static shared
// memory of the TMA kernels only, so main's layout is unchanged).
__device__ __forceinline__ uint32_t ClsFullBars() {
  __shared__ __align__(8) uint64_t bars[8];
  return SmemAddr(bars);
}

// A warpgroup's place in its ring: g stages consumed since the kernel's start (stage g %
// kStages, barrier phase parity (g / kStages) & 1), j of them in the current tile; the tile's
// slab sequence is layer 1's slabs (l1 of them, from w0) then layer 2's (from w1), total stages
// in all.
struct ClsRing {
  uint32_t g;
  int j, l1, total;
  const __nv_bfloat16 *w0, *w1;
};

// Stage b of warpgroup u: its part of buffer b / split (split = kStages / 2 stages a slab).
template <int kStages>
__device__ __forceinline__ uint32_t ClsStageAddr(uint32_t sW, uint32_t b, int u) {
  constexpr int kSplit = kStages / 2;
  return sW + (b / kSplit) * kClsSlabBytes + u * (kClsSlabBytes / 2) +
         (b % kSplit) * (kClsSlabBytes / 2 / kSplit);
}

// Warpgroup u's first thread: the bulk copy of the tile's stage jj (part jj % split of slab
// jj / split) into stage (g + jj - j) % kStages, whose previous use's wgmma this thread has
// waited for.
template <int kStages>
__device__ __forceinline__ void ClsRingIssue(const ClsRing& r, int jj, uint32_t sW, int u) {
  constexpr int kSplit = kStages / 2, kBytes = kClsSlabBytes / 2 / kSplit;
  const uint32_t b = (r.g + static_cast<uint32_t>(jj - r.j)) % kStages;
  const uint32_t bar = ClsFullBars() + 8u * (kStages * u + b);
  const int slab = jj / kSplit;
  const __nv_bfloat16* src =
      (slab < r.l1 ? r.w0 + static_cast<int64_t>(slab) * (kClsN * kClsK)
                   : r.w1 + static_cast<int64_t>(slab - r.l1) * (kClsN * kClsK)) +
      u * (kClsN / 2 * kClsK) + (jj % kSplit) * (kBytes / 2);
  hopper::MbarArriveExpectTx(bar, kBytes);
  ClsBulkLoad(ClsStageAddr<kStages>(sW, b, u), src, kBytes, bar);
}

// ClsGemmWg's products for the ring's next K / 64 slabs (chunk n0 of the tile's current layer):
// acc as ClsGemmWg's. Per slab the A fragments (ldmatrix), then per stage the wait on its
// barrier, its wgmma and their wait; then the warpgroup's first thread refills the stage with the
// one kStages ahead in the tile's sequence (one thread's wgmma wait stands for its warpgroup's,
// as CUTLASS's one consumer arrival per warpgroup on an empty barrier).
template <int kStages>
__device__ __forceinline__ void ClsGemmWgTma(uint32_t sA, int K, uint32_t sW, float (&acc)[2][8][4],
                                             ClsRing& ring) {
#if SPATTN_SAAP_SM90A
  static_assert(kStages == 2 || kStages == 4, "a slab in one or two stages a warpgroup");
  constexpr int kSplit = kStages / 2;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int u = warp >> 2, wq = warp & 3;
  const bool issuer = (tid & 127) == 0;
  const int chunks_a = K / 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[h][nt][e] = 0.f;
    }
  }
  const int slabs = K / kClsK;
  const uint32_t a_row = sA + (16 * wq + (lane & 15)) * chunks_a * 16;
  const uint32_t bars = ClsFullBars() + 8u * kStages * u;
  uint32_t af[kClsK / 16][4];
  for (int s = 0; s < slabs; ++s) {
#pragma unroll
    for (int kk = 0; kk < kClsK / 16; ++kk) {
      LdMatrixX4(a_row + s * (kClsK / 8) * 16 + (((2 * kk + (lane >> 4)) ^ (lane & 7)) * 16),
                 af[kk][0], af[kk][1], af[kk][2], af[kk][3]);
    }
#pragma unroll
    for (int part = 0; part < kSplit; ++part) {
      const uint32_t b = ring.g % kStages;
      hopper::MbarWait(bars + 8u * b, (ring.g / kStages) & 1u);
      const uint64_t desc = Tile64SmemDesc(ClsStageAddr<kStages>(sW, b, u));
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < kClsK / 16; ++kk) {
        // k step kk: 32 bytes into the 128-byte rows (the descriptor's address field counts 16).
        if constexpr (kSplit == 1) {
          Tile64WgmmaN128<__nv_bfloat16>::RS(acc, af[kk], desc + ((kk * 32) >> 4), 1);
        } else {
          Tile64Wgmma<__nv_bfloat16>::RS(acc[part], af[kk], desc + ((kk * 32) >> 4), 1);
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      Tile64Wait(acc);
#pragma unroll
      for (int kk = 0; kk < kClsK / 16; ++kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(af[kk][i])::"memory");
      }
      if (issuer && ring.j + kStages < ring.total) {
        ClsRingIssue<kStages>(ring, ring.j + kStages, sW, u);
      }
      ++ring.g;
      ++ring.j;
    }
  }
#else
  __trap();
#endif
}

// The classifier over the 64 de-roped rows in sX (bf16, swizzled) for q head h: logits into
// `scratch` [64 x c_pad] and each row's max and 1 / sum into sRowM / sRowInv (1 / sum = 0: the
// row does not vote, as rows outside `valid` and rows with a NaN/Inf logit). kWg: the products by
// ClsGemmWg; each thread then holds other rows and columns of the chunk than ClsGemm's (row_of,
// col_of), but every partial statistic the same: a thread's 16 columns of one row in one quarter
// (64 columns) of the chunk in the same order, the same quad, the quarter's slot in sStat.
// kTma (kWg only; the assets' pre-swizzled weights, SaapKnobs().cls_tma): the products by
// ClsGemmWgTma<kTma> (kTma stages a warpgroup; 0: not), ring_g the warpgroup's stages consumed
// by the kernel's earlier tiles.
template <int kD, bool kWg, int kTma = 0>
__device__ __forceinline__ void ClassifyTile(const SaapArgs& a, int h, uint64_t valid,
                                             const ClsLayout& lay, char* smem, float* scratch,
                                             bool packed, uint32_t& ring_g) {
  const SaapAssetsDev& as = a.assets;
  const int hp = as.hidden_pad, cp = as.c_pad, C = as.num_centroids;
  const uint32_t sXa = SmemAddr(smem + lay.x);
  char* sH = smem + lay.h;
  const uint32_t sHa = SmemAddr(sH);
  const uint32_t sWa = kWg ? (SmemAddr(smem + lay.w) + 1023u) & ~1023u : SmemAddr(smem + lay.w);
  float2* sStat = reinterpret_cast<float2*>(smem + lay.stat);
  float* sRowM = reinterpret_cast<float*>(smem + lay.rowm);
  float* sRowInv = reinterpret_cast<float*>(smem + lay.rowinv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int wr = warp & 1, wc = warp >> 1;  // ClsGemm: 32-row half, 64-column quarter
  const int u = warp >> 2, wq = warp & 3;   // ClsGemmWg: 128-column half, 16-row quarter
  // acc[mt][nt][2 hh + e] is (row_of(mt, hh), n0 + col_of(mt) + 8 nt + 2 t4 + e); quarter_of(mt):
  // the 64 columns of the chunk it is in.
  auto row_of = [&](int mt, int hh) {
    return kWg ? 16 * wq + g + 8 * hh : 32 * wr + 16 * mt + g + 8 * hh;
  };
  auto col_of = [&](int mt) { return kWg ? 128 * u + 64 * mt : 64 * wc; };
  auto quarter_of = [&](int mt) { return kWg ? 2 * u + mt : wc; };
  constexpr int kBiasSets = kWg ? 2 : 1;  // ClsGemm: the same columns for both mt
  float acc[2][8][4];
  ClsRing ring{};
  if constexpr (kTma != 0) {
    // The tile's slab sequence (the order of the gemm calls below); its first stages now.
    ring.g = ring_g;
    ring.j = 0;
    ring.l1 = as.num_layers == 2 ? hp / kClsN * (kD / kClsK) : 0;
    ring.total = (ring.l1 + cp / kClsN * ((as.num_layers == 2 ? hp : kD) / kClsK)) * (kTma / 2);
    ring.w0 = as.num_layers == 2 ? static_cast<const __nv_bfloat16*>(as.w0t[h]) : nullptr;
    ring.w1 = static_cast<const __nv_bfloat16*>(as.w1t[h]);
    if ((tid & 127) == 0) {
      for (int jj = 0; jj < kTma && jj < ring.total; ++jj) ClsRingIssue<kTma>(ring, jj, sWa, u);
    }
  }
  auto gemm = [&](uint32_t sA, int K, const __nv_bfloat16* w, int n0) {
    if constexpr (kTma != 0) {
      ClsGemmWgTma<kTma>(sA, K, sWa, acc, ring);
    } else if constexpr (kWg) {
      ClsGemmWg(sA, K, w, n0, sWa, acc, packed);
    } else {
      ClsGemm(sA, K, w, n0, sWa, acc, packed);
    }
  };
  if (as.num_layers == 2) {
    const __nv_bfloat16* w0 = static_cast<const __nv_bfloat16*>(as.w0t[h]);
    const float* b0 = as.b0[h];
    for (int n0 = 0; n0 < hp; n0 += kClsN) {
      gemm(sXa, kD, w0, n0);
      float2 bias[kBiasSets][8];
#pragma unroll
      for (int bs = 0; bs < kBiasSets; ++bs) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int c = n0 + col_of(bs) + 8 * nt + 2 * t4;
          bias[bs][nt] = make_float2(b0[c], b0[c + 1]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int c = n0 + col_of(mt) + 8 * nt + 2 * t4;
          const float bias0 = bias[kWg ? mt : 0][nt].x, bias1 = bias[kWg ? mt : 0][nt].y;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = row_of(mt, hh);
            float v0 = acc[mt][nt][2 * hh] + bias0, v1 = acc[mt][nt][2 * hh + 1] + bias1;
            if (as.relu0) {
              v0 = fmaxf(v0, 0.f);
              v1 = fmaxf(v1, 0.f);
            }
            *reinterpret_cast<uint32_t*>(sH + TileElemOff(r, c, hp / 8)) =
                Mma<__nv_bfloat16>::Pack(v0, v1);
          }
        }
      }
    }
    __syncthreads();
  }
  const uint32_t sA = as.num_layers == 2 ? sHa : sXa;
  const int K = as.num_layers == 2 ? hp : kD;
  const __nv_bfloat16* w1 = static_cast<const __nv_bfloat16*>(as.w1t[h]);
  const float* b1 = as.b1[h];
  float m_run[2][2], l_run[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    m_run[mt][0] = m_run[mt][1] = kNegInf;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }
  for (int n0 = 0; n0 < cp; n0 += kClsN) {
    gemm(sA, K, w1, n0);
    float2 bias[kBiasSets][8];
#pragma unroll
    for (int bs = 0; bs < kBiasSets; ++bs) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int c = n0 + col_of(bs) + 8 * nt + 2 * t4;
        bias[bs][nt] = make_float2(b1[c], b1[c + 1]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row_of(mt, hh);
        float cmax = kNegInf;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int c = n0 + col_of(mt) + 8 * nt + 2 * t4;
          const float2 bb = bias[kWg ? mt : 0][nt];
          float v0 = acc[mt][nt][2 * hh] + bb.x, v1 = acc[mt][nt][2 * hh + 1] + bb.y;
          if (as.relu1) {
            v0 = fmaxf(v0, 0.f);
            v1 = fmaxf(v1, 0.f);
          }
          acc[mt][nt][2 * hh] = v0;
          acc[mt][nt][2 * hh + 1] = v1;
          *reinterpret_cast<float2*>(scratch + static_cast<int64_t>(r) * cp + c) =
              make_float2(v0, v1);
          if (c < C) cmax = fmaxf(cmax, v0);
          if (c + 1 < C) cmax = fmaxf(cmax, v1);
        }
        cmax = QuadMax(cmax);
        const float m_new = fmaxf(m_run[mt][hh], cmax);
        if (m_new != kNegInf) {
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            const int c = n0 + col_of(mt) + 8 * nt + 2 * t4;
            if (c < C) sum += Exp2((acc[mt][nt][2 * hh] - m_new) * kLog2e);
            if (c + 1 < C) sum += Exp2((acc[mt][nt][2 * hh + 1] - m_new) * kLog2e);
          }
          l_run[mt][hh] =
              (m_run[mt][hh] == kNegInf ? 0.f
                                        : l_run[mt][hh] * Exp2((m_run[mt][hh] - m_new) * kLog2e)) +
              sum;
          m_run[mt][hh] = m_new;
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = QuadSum(l_run[mt][hh]);
      const int r = row_of(mt, hh);
      if (t4 == 0) sStat[quarter_of(mt) * kClsRows + r] = make_float2(m_run[mt][hh], l);
    }
  }
  __syncthreads();
  if (tid < kClsRows) {
    float m = kNegInf;
#pragma unroll
    for (int q = 0; q < 4; ++q) m = fmaxf(m, sStat[q * kClsRows + tid].x);
    float l = 0.f;
    if (m != kNegInf) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 st = sStat[q * kClsRows + tid];
        l += st.x == kNegInf ? 0.f : st.y * Exp2((st.x - m) * kLog2e);
      }
    }
    const bool ok = ((valid >> tid) & 1u) && isfinite(m) && isfinite(l) && l > 0.f;
    sRowM[tid] = m;
    sRowInv[tid] = ok ? 1.f / l : 0.f;
  }
  if constexpr (kTma != 0) ring_g = ring.g;
  __syncthreads();
}

// Tile row r of a swizzled bf16 tile (`chunks` 8-element chunks per row): pair pc := y.
__device__ __forceinline__ void StoreRowPair(char* tile, int chunks, int r, RopePair pc, float2 y) {
  *reinterpret_cast<__nv_bfloat16*>(tile + TileElemOff(r, pc.a, chunks)) = __float2bfloat16(y.x);
  *reinterpret_cast<__nv_bfloat16*>(tile + TileElemOff(r, pc.b, chunks)) = __float2bfloat16(y.y);
}

// Sum over rows [r0, r1) of the tile of row r's softmax at bucket c (rows that do not vote add 0).
__device__ __forceinline__ float RowsMass(const float* scratch, const float* sRowM,
                                          const float* sRowInv, int cp, int c, int r0, int r1) {
  // Loads without a branch (they can all be in flight), then a select (a row that does not vote
  // may hold NaN logits): the same sum as adding only the voting rows.
  float s = 0.f;
  for (int r = r0; r < r1; ++r) {
    const float inv = sRowInv[r];
    const float e = Exp2((scratch[static_cast<int64_t>(r) * cp + c] - sRowM[r]) * kLog2e);
    s = inv != 0.f ? s + e * inv : s;
  }
  return s;
}

// The sampled rows' per-block masses into block_scores (first: stored, else added), kRpb rows per
// block known at compile time (SaapKnobs().cls_rows_mass; 64 / kRpb blocks per item): per bucket,
// kG blocks' kG x kRpb logits (kLoads of them) loaded before the first Exp2. Main's loop calls
// RowsMass with a runtime trip count and stores after each 8 blocks, so the compiler issues one
// row's load at a time. Rows of blocks past nblk lie in the CTA's 64-row scratch and do not vote
// (sRowInv 0): loaded, never stored. Per block the same operations in the same order as
// RowsMass, so the same scores bit for bit.
template <int kRpb, int kLoads>
__device__ __forceinline__ void SampledRowsMass(const float* scratch, const float* sRowM,
                                                const float* sRowInv, float* block_scores, int cp,
                                                int C, int nblk, bool first) {
  constexpr int kBpi = kClsRows / kRpb;
  // At most 16 blocks a group (their running sums live beside the logits).
  constexpr int kG0 = kLoads / kRpb < 1 ? 1 : (kLoads / kRpb > kBpi ? kBpi : kLoads / kRpb);
  constexpr int kG = kG0 > 16 ? 16 : kG0;
  static_assert(kClsRows % kRpb == 0 && kBpi % kG == 0, "groups tile the item");
  for (int c = threadIdx.x; c < C; c += kClsThreads) {
    // b0 < nblk <= kBpi and kG divides kBpi: every row of the group is below kClsRows.
    for (int b0 = 0; b0 < nblk; b0 += kG) {
      const float* x0 = scratch + static_cast<int64_t>(b0 * kRpb) * cp + c;
      float x[kG * kRpb], old[kG];
#pragma unroll
      for (int i = 0; i < kG * kRpb; ++i) x[i] = x0[static_cast<int64_t>(i) * cp];
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        old[k] = !first && b0 + k < nblk ? block_scores[static_cast<int64_t>(b0 + k) * cp + c]
                                         : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        // The block's row statistics, 4 rows a load where they come in fours (the layout's
        // offsets are multiples of 16 bytes).
        float rm[kRpb], ri[kRpb];
        const int r0 = (b0 + k) * kRpb;
        if constexpr (kRpb % 4 == 0) {
#pragma unroll
          for (int j = 0; j < kRpb; j += 4) {
            const float4 vm = *reinterpret_cast<const float4*>(sRowM + r0 + j);
            const float4 vi = *reinterpret_cast<const float4*>(sRowInv + r0 + j);
            rm[j] = vm.x, rm[j + 1] = vm.y, rm[j + 2] = vm.z, rm[j + 3] = vm.w;
            ri[j] = vi.x, ri[j + 1] = vi.y, ri[j + 2] = vi.z, ri[j + 3] = vi.w;
          }
        } else {
#pragma unroll
          for (int j = 0; j < kRpb; ++j) rm[j] = sRowM[r0 + j], ri[j] = sRowInv[r0 + j];
        }
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < kRpb; ++j) {
          const float e = Exp2((x[k * kRpb + j] - rm[j]) * kLog2e);
          s = ri[j] != 0.f ? s + e * ri[j] : s;
        }
        if (b0 + k < nblk) {
          block_scores[static_cast<int64_t>(b0 + k) * cp + c] = first ? s : old[k] + s;
        }
      }
    }
  }
}

// Dispatches on rows_per_block (1, 2, 4, 8, 16) and the load depth (mode 1: 32 logits a group,
// 2: 64); false: not templated here (main's loop runs).
template <int kLoads>
__device__ __forceinline__ bool SampledRowsMassFor(int rpb, const float* scratch,
                                                   const float* sRowM, const float* sRowInv,
                                                   float* block_scores, int cp, int C, int nblk,
                                                   bool first) {
  switch (rpb) {
    case 1:
      SampledRowsMass<1, kLoads>(scratch, sRowM, sRowInv, block_scores, cp, C, nblk, first);
      return true;
    case 2:
      SampledRowsMass<2, kLoads>(scratch, sRowM, sRowInv, block_scores, cp, C, nblk, first);
      return true;
    case 4:
      SampledRowsMass<4, kLoads>(scratch, sRowM, sRowInv, block_scores, cp, C, nblk, first);
      return true;
    case 8:
      SampledRowsMass<8, kLoads>(scratch, sRowM, sRowInv, block_scores, cp, C, nblk, first);
      return true;
    case 16:
      SampledRowsMass<16, kLoads>(scratch, sRowM, sRowInv, block_scores, cp, C, nblk, first);
      return true;
    default:
      return false;
  }
}

// The top k of sc[0, n) (n <= kWarpTopLMax, scores >= 0 or NaN-free) by one warp, the same
// selection and output order as topk::CtaTopKByBisection: the largest float bit pattern t with
// count(>= t) >= k, everything above t, ties at t lowest index first, indices ascending. Lane
// l holds elements 32 j + l in registers.
constexpr int kWarpTopLMax = 1024;
__device__ __forceinline__ void WarpTopKByBisection(const float* sc, int n, int k, int32_t* out) {
  constexpr int kPer = kWarpTopLMax / 32;
  const int lane = threadIdx.x & 31;
  uint32_t key[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = 32 * j + lane;
    key[j] = i < n ? __float_as_uint(sc[i]) : 0u;
  }
  // Elements past n hold key 0 and never count: every threshold asked is >= 1, and ties and
  // takes test i < n.
  auto count_ge = [&](uint32_t t) {
    int c = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) c += key[j] >= t ? 1 : 0;
    return static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(c)));
  };
  int need = 0;  // ties at the threshold to take, lowest first
  const uint32_t lo = topk::BisectFloatThreshold(k, count_ge, &need);
  int taken_ties = 0, pos = 0;
  const unsigned below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const bool in = 32 * j + lane < n;
    const bool tie = in && key[j] == lo;
    const unsigned ties = __ballot_sync(0xffffffffu, tie);
    const bool take = in && (key[j] > lo || (tie && taken_ties + __popc(ties & below) < need));
    const unsigned takes = __ballot_sync(0xffffffffu, take);
    if (take) out[pos + __popc(takes & below)] = 32 * j + lane;
    pos += __popc(takes);
    taken_ties += __popc(ties);
  }
}

// Two ways to fill a tile (a.rows_per_block): 0 = every row of one block, 64 consecutive rows
// per tile (de-roped from the tile's first position, angle steps as RotateRope over a span);
// > 0 = blocks_per_item blocks per item, rows_per_block evenly spaced rows of each (row j of a
// block of n rows: (2j + 1) n / (2 count), count = min(rows_per_block, n); SaapSampledRow), each
// de-roped at its own position (as RotateRope of one row), 64 / rows_per_block blocks in one
// tile, or above 64 rows one block in several tiles; their scores per block kept in the CTA's
// slice of score_scratch until the top-l (one warp per block, or the CTA block after block).
// packed: SaapKnobs().cls_packed (the weights' layout, saap_knobs.h).
// kTab (SaapKnobs().cls_rope_table; sampled rows, at most 64 a block): the item's 64 rows'
// (cos, -sin), [grid][64][kD / 2] float2 after the logits scratch, computed once per item and
// read by every q head of the group (the angles depend on the row, not the head); false: each
// head computes them (main's path). The same floats either way.
// kTab: a template parameter so that main's path (false) compiles to main's kernel; kTma (kWg
// only: the assets' weights pre-swizzled, SaapKnobs().cls_tma) likewise (session 40: a runtime
// choice between two slab loops inlined both into every wgmma instance and spilled).
template <typename T, int kD, bool kWg, bool kTab, int kTma = 0>
__global__ void __launch_bounds__(kClsThreads, 1)
    SaapClassifyKernel(SaapArgs a, bool packed, int mass) {
  constexpr int kHalf = kD / 2, kCh = kD / 8;
  extern __shared__ __align__(128) char smem[];
  const SaapAssetsDev& as = a.assets;
  const int cp = as.c_pad, C = as.num_centroids;
  const ClsLayout lay = MakeClsLayout(kD, as.num_layers, as.hidden_pad, cp, kWg);
  char* sX = smem + lay.x;
  float* sScore = reinterpret_cast<float*>(smem + lay.score);
  const float* sRowM = reinterpret_cast<const float*>(smem + lay.rowm);
  const float* sRowInv = reinterpret_cast<const float*>(smem + lay.rowinv);
  double* sBase = reinterpret_cast<double*>(smem + lay.base);

  const int tid = threadIdx.x;
  const AttnParams& p = a.p;
  float* scratch = a.logits_scratch + static_cast<int64_t>(blockIdx.x) * kClsRows * cp;
  const int rpb = a.rows_per_block, bpi = rpb > 0 ? a.blocks_per_item : 1;
  float* block_scores =
      rpb > 0 ? a.score_scratch + static_cast<int64_t>(blockIdx.x) * bpi * cp : nullptr;
  const int chunks = (a.num_blocks + bpi - 1) / bpi;
  const int64_t items = static_cast<int64_t>(a.num_kv) * chunks;
  uint32_t ring_g = 0;  // kTma: this warpgroup's stages consumed (ClsRing)
  if constexpr (kTma != 0) {
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < 2 * kTma; ++i) hopper::MbarInit(ClsFullBars() + 8u * i, 1);
      hopper::MbarInitFence();
    }
    __syncthreads();
  }

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int gi = static_cast<int>(item / chunks);
    const int block0 = static_cast<int>(item - static_cast<int64_t>(gi) * chunks) * bpi;
    const int nblk = min(bpi, a.num_blocks - block0);
    if (rpb == 0) {
      const BlockGeoDev geo = a.geo[block0];
      const int q_tok0 = p.cu_seqlens_q[geo.seq];
      for (int c = tid; c < cp; c += kClsThreads) sScore[c] = 0.f;
      for (int hi = a.group_head_off[gi]; hi < a.group_head_off[gi + 1]; ++hi) {
        const int h = a.group_heads[hi];
        const T* qg = static_cast<const T*>(p.q) + static_cast<int64_t>(h) * p.q_head_stride;
        for (int row_start = geo.q_begin; row_start < geo.q_end; row_start += kClsRows) {
          const int rows = min(kClsRows, geo.q_end - row_start);
          const int64_t pos_base = static_cast<int64_t>(geo.first_pos) + (row_start - geo.q_begin);
          __syncthreads();  // sX, sBase, sStat and the scratch are free
          BaseAngles(as.inv_freq, kHalf, pos_base, sBase);
          __syncthreads();
          for (int idx = tid; idx < kClsRows * kHalf; idx += kClsThreads) {
            const int r = idx / kHalf, i = idx - r * kHalf;
            const RopePair pc = PairCols(as.interleaved, kHalf, i);
            float2 y = make_float2(0.f, 0.f);
            if (r < rows) {
              float c, s;
              RopeCS(sBase, as.step_cs, kHalf, r, i, c, s);
              y = Rotate(
                  LoadPair(qg + static_cast<int64_t>(q_tok0 + row_start + r) * p.q_token_stride,
                           pc),
                  c, s);
            }
            StoreRowPair(sX, kCh, r, pc, y);
          }
          __syncthreads();
          const uint64_t valid = rows >= 64 ? ~uint64_t{0} : (uint64_t{1} << rows) - 1;
          ClassifyTile<kD, kWg, kTma>(a, h, valid, lay, smem, scratch, packed, ring_g);
          for (int c = tid; c < C; c += kClsThreads) {
            sScore[c] += RowsMass(scratch, sRowM, sRowInv, cp, c, 0, rows);
          }
        }
      }
      __syncthreads();
      topk::CtaTopKByBisection<kClsThreads>(
          sScore, C, a.top_l,
          a.selected + (static_cast<int64_t>(gi) * a.num_blocks + block0) * a.top_l);
      __syncthreads();
      continue;
    }
    // Sampled rows. rows_per_block <= 64: one tile per head, tile row r is row j = r % rpb of
    // block block0 + r / rpb. Above 64 (one block per item): tiles t of 64 rows, tile row r is
    // row j = 64 t + r of block block0.
    const bool wide = rpb > kClsRows;
    const int tiles =
        wide ? (min(rpb, a.geo[block0].q_end - a.geo[block0].q_begin) + kClsRows - 1) / kClsRows
             : 1;
    // One tile per head: the rows, their validity and angles once for the whole group. sScore
    // (unused until the heads are done in sampled mode) holds each row's q token (-1: not
    // valid) and the valid mask; the table holds (cos, -sin) of every (row, pair).
    // (Recomputed where used, not held across the classifier: registers are at the limit.)
    const bool tab = kTab && !wide;
    int* sRowTok = reinterpret_cast<int*>(sScore);
    uint32_t* sValid = reinterpret_cast<uint32_t*>(sScore + kClsRows);
    int* sRowPos = reinterpret_cast<int*>(sScore) + 2 * kClsRows;  // c_pad >= 256 floats
    auto rope_tab = [&] {
      return reinterpret_cast<float2*>(a.logits_scratch +
                                       static_cast<int64_t>(gridDim.x) * kClsRows * cp) +
             static_cast<int64_t>(blockIdx.x) * kClsRows * kHalf;
    };
    if (tab) {
      if (tid < kClsRows) {
        // Row tid's validity, position and token as below (the per-head path's expressions).
        const int r = tid, b = r / rpb, j = r % rpb;
        bool ok = false;
        int tok = -1, pos = 0;
        if (b < nblk) {
          const BlockGeoDev geo = a.geo[block0 + b];
          const int n = geo.q_end - geo.q_begin, count = min(rpb, n);
          if (j < count) {
            ok = true;
            const int row = static_cast<int>((int64_t{2} * j + 1) * n / (int64_t{2} * count));
            tok = p.cu_seqlens_q[geo.seq] + geo.q_begin + row;
            pos = geo.first_pos + row;
          }
        }
        sRowTok[r] = tok;
        sRowPos[r] = pos;
        const uint32_t m = __ballot_sync(0xffffffffu, ok);
        if ((tid & 31) == 0) sValid[tid >> 5] = m;
      }
      __syncthreads();
      for (int idx = tid; idx < kClsRows * kHalf; idx += kClsThreads) {
        const int r = idx / kHalf, i = idx - r * kHalf;
        if (sRowTok[r] < 0) continue;
        const double ang = fmod(static_cast<double>(sRowPos[r]) * as.inv_freq[i], kTwoPi);
        double sd, cd;
        sincos(ang, &sd, &cd);
        rope_tab()[idx] = make_float2(static_cast<float>(cd), static_cast<float>(-sd));
      }
      // The table's writes are visible to the CTA after the barrier before each head's de-rope.
    }
    for (int hi = a.group_head_off[gi]; hi < a.group_head_off[gi + 1]; ++hi) {
      const int h = a.group_heads[hi];
      const T* qg = static_cast<const T*>(p.q) + static_cast<int64_t>(h) * p.q_head_stride;
      const bool first_head = hi == a.group_head_off[gi];
      for (int t = 0; t < tiles; ++t) {
        uint64_t valid = 0;
        if (tab) {
          __syncthreads();  // sX, sStat and the scratch are free; the table and sRowTok written
          valid = sValid[0] | (uint64_t{sValid[1]} << 32);
          constexpr int kPer = kClsRows * kHalf / kClsThreads;
          static_assert(kClsRows * kHalf % kClsThreads == 0, "pairs per thread");
          float2 cs[kPer];
#pragma unroll
          for (int k = 0; k < kPer; ++k) {
            const int idx = tid + k * kClsThreads, r = idx / kHalf;
            cs[k] = (valid >> r) & 1u ? rope_tab()[idx] : make_float2(0.f, 0.f);
          }
#pragma unroll
          for (int k = 0; k < kPer; ++k) {
            const int idx = tid + k * kClsThreads, r = idx / kHalf, i = idx - r * kHalf;
            const RopePair pc = PairCols(as.interleaved, kHalf, i);
            float2 y = make_float2(0.f, 0.f);
            if ((valid >> r) & 1u) {
              y = Rotate(LoadPair(qg + static_cast<int64_t>(sRowTok[r]) * p.q_token_stride, pc),
                         cs[k].x, cs[k].y);
            }
            StoreRowPair(sX, kCh, r, pc, y);
          }
        } else {
          for (int r = 0; r < kClsRows; ++r) {
            const int b = wide ? 0 : r / rpb, j = wide ? t * kClsRows + r : r % rpb;
            if (b >= nblk) break;
            const BlockGeoDev geo = a.geo[block0 + b];
            if (j < min(rpb, geo.q_end - geo.q_begin)) valid |= uint64_t{1} << r;
          }
          __syncthreads();  // sX, sStat and the scratch are free
          for (int idx = tid; idx < kClsRows * kHalf; idx += kClsThreads) {
            const int r = idx / kHalf, i = idx - r * kHalf;
            const RopePair pc = PairCols(as.interleaved, kHalf, i);
            float2 y = make_float2(0.f, 0.f);
            if ((valid >> r) & 1u) {
              const int b = wide ? 0 : r / rpb, j = wide ? t * kClsRows + r : r % rpb;
              const BlockGeoDev geo = a.geo[block0 + b];
              const int n = geo.q_end - geo.q_begin, count = min(rpb, n);
              const int row = static_cast<int>((int64_t{2} * j + 1) * n / (int64_t{2} * count));
              const double ang =
                  fmod(static_cast<double>(geo.first_pos + row) * as.inv_freq[i], kTwoPi);
              double sd, cd;
              sincos(ang, &sd, &cd);
              const float2 cs = make_float2(static_cast<float>(cd), static_cast<float>(-sd));
              y = Rotate(
                  LoadPair(qg + static_cast<int64_t>(p.cu_seqlens_q[geo.seq] + geo.q_begin + row) *
                                    p.q_token_stride,
                           pc),
                  cs.x, cs.y);
            }
            StoreRowPair(sX, kCh, r, pc, y);
          }
        }
        __syncthreads();
        ClassifyTile<kD, kWg, kTma>(a, h, valid, lay, smem, scratch, packed, ring_g);
        const bool first = first_head && t == 0;
        // mass (SaapKnobs().cls_rows_mass): rows_per_block as a template argument.
        if (mass != 0 && !wide &&
            (mass == 1 ? SampledRowsMassFor<32>(rpb, scratch, sRowM, sRowInv, block_scores, cp,
                                                C, nblk, first)
                       : SampledRowsMassFor<64>(rpb, scratch, sRowM, sRowInv, block_scores, cp,
                                                C, nblk, first))) {
          continue;
        }
        // Per bucket, 8 blocks at a time: every load (the rows' logits, the running sums) before
        // the stores, which the compiler could not move past them (they may alias).
        for (int c = tid; c < C; c += kClsThreads) {
          for (int b0 = 0; b0 < nblk; b0 += 8) {
            float m[8], old[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const int b = b0 + k;
              m[k] = 0.f;
              old[k] = 0.f;
              if (b < nblk) {
                m[k] = wide ? RowsMass(scratch, sRowM, sRowInv, cp, c, 0, kClsRows)
                            : RowsMass(scratch, sRowM, sRowInv, cp, c, b * rpb, (b + 1) * rpb);
                if (!first) old[k] = block_scores[static_cast<int64_t>(b) * cp + c];
              }
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const int b = b0 + k;
              if (b < nblk)
                block_scores[static_cast<int64_t>(b) * cp + c] = first ? m[k] : old[k] + m[k];
            }
          }
        }
      }
    }
    __syncthreads();  // block_scores complete
    if (C <= kWarpTopLMax && a.warp_top_l) {
      // One warp per block, its scores in registers: no CTA barriers between the blocks.
      for (int b = tid / 32; b < nblk; b += kClsThreads / 32) {
        WarpTopKByBisection(
            block_scores + static_cast<int64_t>(b) * cp, C, a.top_l,
            a.selected + (static_cast<int64_t>(gi) * a.num_blocks + block0 + b) * a.top_l);
      }
    } else {
      for (int b = 0; b < nblk; ++b) {
        __syncthreads();
        for (int c = tid; c < C; c += kClsThreads) {
          sScore[c] = block_scores[static_cast<int64_t>(b) * cp + c];
        }
        __syncthreads();
        topk::CtaTopKByBisection<kClsThreads>(
            sScore, C, a.top_l,
            a.selected + (static_cast<int64_t>(gi) * a.num_blocks + block0 + b) * a.top_l);
      }
    }
    __syncthreads();
  }
}

// ---- 4. Assembly --------------------------------------------------------------------------------

constexpr int kMaxTopL = 1024;

struct SaapSrc {
  SaapAsmArgs a;
  struct Shared {
    int first, last;
    int pref[kMaxTopL + 1];  // member prefix over the visited buckets
    int start[kMaxTopL];     // first member of each visited bucket in bucket_idx
  };
  __device__ void Begin(int unit, Shared& sh, RowCtx& ctx) const {
    const int gi = unit / a.num_blocks, block = unit - gi * a.num_blocks;
    const BlockGeoDev g = a.geo[block];
    ctx.key_end = g.key_end;
    ctx.block = block;
    const int s0 = a.group_slot_off[gi], s1 = a.group_slot_off[gi + 1];
    ctx.num_slots = s1 - s0;
    for (int i = 0; i < s1 - s0; ++i) ctx.slots[i] = a.group_slots[s0 + i];
    sh.first = g.first_pos;
    sh.last = g.last_pos;
    const int64_t bu = (static_cast<int64_t>(gi) * a.batch + g.seq) * a.num_centroids;
    const int32_t* sel = a.selected + static_cast<int64_t>(unit) * a.top_l;
    sh.pref[0] = 0;
    for (int k = 0; k < a.top_l; ++k) {
      const int c = sel[k];
      const int b0 = a.bucket_off[bu + c], b1 = a.bucket_off[bu + c + 1];
      sh.start[k] = b0;
      sh.pref[k + 1] = sh.pref[k] + (b1 - b0);
    }
  }
  __device__ void SetBits(const RowCtx& ctx, const Shared& sh, uint32_t* R, uint32_t* C,
                          int64_t wbase) const {
    if (a.sink_tokens > 0) OrSpanBlock(R, wbase, 0, a.sink_tokens);
    if (a.local_tokens > 0) {
      OrSpanBlock(R, wbase, static_cast<int64_t>(sh.first) - a.local_tokens + 1,
                  static_cast<int64_t>(sh.last) + 1);
    }
    const int total = sh.pref[a.top_l];
    const int64_t lo_key = (wbase < 0 ? 0 : wbase) * 32;
    const int64_t hi_key = (wbase + kAsmArrayWords) * 32;
    for (int t = threadIdx.x; t < total; t += blockDim.x) {
      int lo = 0, hi = a.top_l;  // last k with pref[k] <= t
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (sh.pref[mid] <= t) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      const int64_t key = a.bucket_idx[sh.start[lo] + (t - sh.pref[lo])];
      if (key >= lo_key && key < hi_key && key < ctx.key_end) {
        atomicOr(C + ((key >> 5) - wbase), 1u << (key & 31));
      }
    }
  }
};

// SaapKnobs().debug_sync: waits for the stream and names a failing step on stderr (session 36:
// it named the keys kernel as the one that faulted on the assets' unfinished upload).
inline cudaError_t SaapStep(cudaError_t err, const char* step, cudaStream_t stream) {
  if (err == cudaSuccess) err = cudaGetLastError();
  if (!SaapKnobs().debug_sync) return err;
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) fprintf(stderr, "saap debug: %s: %s\n", step, cudaGetErrorString(err));
  return err;
}

template <typename T, int kD>
cudaError_t SaapLaunchTyped(const SaapArgs& a, cudaStream_t stream) {
  cudaError_t err;
  if (SaapKnobs().debug_sync &&
      (err = SaapStep(cudaSuccess, "entry (before this build's kernels)", stream)) != cudaSuccess) {
    return err;
  }
  if (a.num_key_tiles > 0) {
    const bool kwg = SaapKeysUseWgmma();
    auto assign = kwg ? &SaapAssignKernel<T, kD, true> : &SaapAssignKernel<T, kD, false>;
    const int asmem = kwg ? AssignSmemBytes<kD, true>() : AssignSmemBytes<kD, false>();
    if ((err = cudaFuncSetAttribute(assign, cudaFuncAttributeMaxDynamicSharedMemorySize, asmem)) !=
        cudaSuccess) {
      return err;
    }
    assign<<<a.num_key_tiles, kAsThreads, asmem, stream>>>(a);
    if ((err = SaapStep(cudaSuccess, "assign", stream)) != cudaSuccess) return err;
    SaapHistogramKernel<<<a.num_key_tiles, kAsKeys, 0, stream>>>(a);
    if ((err = SaapStep(cudaSuccess, "histogram", stream)) != cudaSuccess) return err;
  }
  const int64_t buckets = static_cast<int64_t>(a.num_kv) * a.p.batch * a.assets.num_centroids;
  if ((err = SaapStep(LaunchExclusiveScan32(a.bucket_off, buckets, stream), "scan", stream)) !=
      cudaSuccess) {
    return err;
  }
  if (a.num_key_tiles > 0) {
    if ((err = cudaMemcpyAsync(a.bucket_cursor, a.bucket_off, buckets * sizeof(int32_t),
                               cudaMemcpyDeviceToDevice, stream)) != cudaSuccess) {
      return err;
    }
    SaapScatterKernel<<<a.num_key_tiles, kAsKeys, 0, stream>>>(a);
    if ((err = SaapStep(cudaSuccess, "scatter", stream)) != cudaSuccess) return err;
  }
  if (a.keys_done != nullptr && (err = cudaEventRecord(a.keys_done, stream)) != cudaSuccess) {
    return err;
  }
  if (a.num_kv > 0 && a.num_blocks > 0) {
    const int smem_wg =
        MakeClsLayout(kD, a.assets.num_layers, a.assets.hidden_pad, a.assets.c_pad, true).total;
    const bool wg = SaapClassifierUsesWgmma(smem_wg);
    const bool tab = SaapClassifierRopeTable(a);
    // Pre-swizzled weights (uploaded so by SaapClassifierUsesTma) only the TMA kernels read;
    // cls_tma 2 at the launch: four stages a warpgroup, else two.
    const bool tma = a.assets.w_swizzled;
    if (tma && !wg) return cudaErrorInvalidValue;
    const bool tma4 = SaapKnobs().cls_tma == 2;
    auto classify = tma  ? (tma4 ? (tab ? &SaapClassifyKernel<T, kD, true, true, 4>
                                        : &SaapClassifyKernel<T, kD, true, false, 4>)
                                 : (tab ? &SaapClassifyKernel<T, kD, true, true, 2>
                                        : &SaapClassifyKernel<T, kD, true, false, 2>))
                    : wg ? (tab ? &SaapClassifyKernel<T, kD, true, true>
                                : &SaapClassifyKernel<T, kD, true, false>)
                         : (tab ? &SaapClassifyKernel<T, kD, false, true>
                                : &SaapClassifyKernel<T, kD, false, false>);
    const int smem =
        wg ? smem_wg
           : SaapClassifySmemBytes(kD, a.assets.num_layers, a.assets.hidden_pad, a.assets.c_pad);
    if ((err = cudaFuncSetAttribute(classify, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) !=
        cudaSuccess) {
      return err;
    }
    classify<<<a.classify_grid, kClsThreads, smem, stream>>>(a, SaapKnobs().cls_packed,
                                                             SaapKnobs().cls_rows_mass);
    if (SaapKnobs().debug_sync) {
      fprintf(stderr,
              "saap debug: classify d %d wgmma %d tma stages %d table %d grid %d smem %d rows %d\n",
              kD, wg ? 1 : 0, tma ? (tma4 ? 4 : 2) : 0, tab ? 1 : 0, a.classify_grid, smem,
              a.rows_per_block);
    }
    if ((err = SaapStep(cudaSuccess, "classify", stream)) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace assembled

SaapKnobsT& SaapKnobs() {
  static SaapKnobsT knobs = [] {
    SaapKnobsT k;
    if (const char* c = std::getenv("SPATTN_SAAP_CLS_WGMMA")) k.cls_wgmma = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SAAP_CLS_PACKED")) k.cls_packed = c[0] == '1';
    if (const char* c = std::getenv("SPATTN_SAAP_CLS_ROPE_TABLE")) k.cls_rope_table = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SAAP_DEBUG_SYNC")) k.debug_sync = c[0] == '1';
    if (const char* c = std::getenv("SPATTN_SAAP_CLS_ROWS_MASS")) k.cls_rows_mass = c[0] - '0';
    if (const char* c = std::getenv("SPATTN_SAAP_KEYS_WGMMA")) k.keys_wgmma = c[0] != '0';
    if (const char* c = std::getenv("SPATTN_SAAP_CLS_TMA")) k.cls_tma = c[0] - '0';
    return k;
  }();
  return knobs;
}

bool SaapClassifierUsesWgmma(int smem_bytes) {
  if (!SaapKnobs().cls_wgmma || !CurrentDeviceIsSm90()) return false;
  int dev = 0, smem_max = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
             cudaSuccess &&
         smem_bytes <= smem_max;
}

bool SaapClassifierUsesTma(int head_dim, int num_layers, int hidden_pad, int c_pad) {
  // Slack for the TMA kernels' static barriers (64 bytes).
  return SaapKnobs().cls_tma != 0 &&
         SaapClassifierUsesWgmma(
             assembled::MakeClsLayout(head_dim, num_layers, hidden_pad, c_pad, true).total + 256);
}

bool SaapKeysUseWgmma() { return SaapKnobs().keys_wgmma && CurrentDeviceIsSm90(); }

bool SaapClassifierRopeTable(const SaapArgs& a) {
  return SaapKnobs().cls_rope_table && a.rows_per_block > 0 && a.rows_per_block <= 64;
}

int SaapClassifySmemBytes(int head_dim, int num_layers, int hidden_pad, int c_pad) {
  return assembled::MakeClsLayout(head_dim, num_layers, hidden_pad, c_pad).total;
}

cudaError_t LaunchSaapSelect(const SaapArgs& a, cudaStream_t stream) {
  using namespace assembled;
  if (a.top_l <= 0 || a.top_l > kMaxTopL || a.top_l > a.assets.num_centroids) {
    return cudaErrorInvalidValue;
  }
  const bool bf16 = a.p.dtype == DType::kBF16;
  if (a.p.head_dim == 64) {
    return bf16 ? SaapLaunchTyped<__nv_bfloat16, 64>(a, stream)
                : SaapLaunchTyped<__half, 64>(a, stream);
  }
  if (a.p.head_dim == 128) {
    return bf16 ? SaapLaunchTyped<__nv_bfloat16, 128>(a, stream)
                : SaapLaunchTyped<__half, 128>(a, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchSaapAssemble(const SaapAsmArgs& a, const AsmOut& out, bool fill,
                               cudaStream_t stream) {
  if (a.top_l <= 0 || a.top_l > assembled::kMaxTopL) return cudaErrorInvalidValue;
  assembled::SaapSrc src{a};
  return assembled::LaunchAssemble(src, a.num_kv * a.num_blocks, out, fill, stream);
}

}  // namespace cuda
}  // namespace spattn
