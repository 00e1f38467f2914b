// Warp-specialized dense attention for Hopper (sm_90a), FlashAttention-3 style.
//
// One CTA = one (q head, 128-row query block, sequence), 3 warpgroups:
//  * warpgroup 0, the producer: gives registers back (setmaxnreg 24) and one thread issues TMA
//    loads: the Q block once, then K and V tiles of 128 keys into a kStages-deep ring, each slot
//    guarded by "full" mbarriers (TMA transaction counts) and "empty" ones (consumer releases).
//    K runs one tile ahead of V (the consumers need K(t+1) before V(t)).
//  * warpgroups 1 and 2, the consumers (setmaxnreg 240), 64 query rows each: S = Q K^T and
//    O += P V with wgmma. Within a warpgroup the next tile's Q K^T and the current P V are issued
//    together and the softmax of the new S runs while P V is still on the tensor cores
//    (intra-warpgroup overlap). Between the two warpgroups named barriers hand the tensor cores
//    back and forth (ping-pong): one warpgroup issues its two GEMMs, then the other, so one's
//    softmax runs under the other's GEMMs.
// Key tiles run from the last to the first, so the tiles that need a mask (causal diagonal,
// partial last tile) come first; the others skip the mask code.
//
// Shared tiles use the 128-byte swizzle TMA writes ([head_dim / 64] sub-tiles of [rows][128 B],
// 16-byte chunk index XOR row % 8), the layout the wgmma descriptors of attention_core.cuh read.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_

#include "kernels/cuda/attention/attention_core.cuh"
#include "kernels/cuda/attention/hopper/sm90_primitives.cuh"

namespace spattn {
namespace cuda {
namespace hopper {

// kConsumerWgs consumer warpgroups of 64 rows each: 2 (128-row blocks, 240 registers each) or 3
// (192-row blocks, 160 registers: FlashAttention-3's shape for d = 64, where the softmax costs
// as much as the GEMMs and a third warpgroup keeps the tensor cores fed). kBN keys per tile:
// 128, or 176 (FlashAttention-3's tile for non-causal d = 128: fewer softmax rounds and
// barrier turns per key; causal blocks keep 128, which wastes less on the diagonal).
template <typename T_, int kD_, int kStages_, int kConsumerWgs_ = 2, int kBN_ = 128>
struct Fa3Traits {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWgs = kConsumerWgs_;
  static constexpr int kBM = 64 * kConsumerWgs;
  static constexpr int kBN = kBN_;  // keys per tile
  static constexpr int kThreads = 128 * (kConsumerWgs + 1);
  static constexpr int kSub = kD / 64;  // 128-byte sub-tiles per row
  static constexpr int kQBytes = kBM * kD * 2;
  static constexpr int kTileBytes = kBN * kD * 2;
  static constexpr int kKOff = kQBytes;
  static constexpr int kVOff = kKOff + kStages * kTileBytes;
  static constexpr int kBarOff = kVOff + kStages * kTileBytes;
  // q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  static constexpr int kNumBars = 1 + 4 * kStages;
  static constexpr int kSmemBytes = kBarOff + kNumBars * 8 + 1024;  // + room to align to 1024
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumerWgs == 2 ? 240 : 160;
  static_assert(kD == 64 || kD == 128, "head_dim 64 or 128");
  static_assert(kConsumerWgs == 2 || kConsumerWgs == 3, "2 or 3 consumer warpgroups");
  static_assert(kBN % 16 == 0 && kBN <= 256 && (kBN * 128) % 1024 == 0, "key tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  // setmaxnreg moves registers within the launch allocation (65536 / threads, rounded down to a
  // multiple of 8: 168 x 384, 128 x 512) only.
  static_assert(128 * kProducerRegs + 128 * kConsumerWgs * kConsumerRegs <=
                    (65536 / kThreads) / 8 * 8 * kThreads,
                "register budget");
};

// Named barrier ids (0 is __syncthreads): 1, 2, 3 = "your turn" of consumer warpgroup 0, 1, 2;
// 4, 5, 6 = consumer warpgroup 0, 1, 2 alone.
constexpr int kBarTurn0 = 1;
constexpr int kBarWg0 = 4;

// Row geometry of one query block (CTA-uniform).
struct BlockRows {
  int q_tok0, q_len, k_tok0, k_len;
  int q_begin, rows, first_pos, key_end, n_tiles;
};

template <class Tr>
__device__ __forceinline__ bool Geometry(const AttnParams& p, int seq, int m_block, BlockRows& b) {
  b.q_tok0 = p.cu_seqlens_q[seq];
  b.q_len = p.cu_seqlens_q[seq + 1] - b.q_tok0;
  b.k_tok0 = p.cu_seqlens_k[seq];
  b.k_len = p.cu_seqlens_k[seq + 1] - b.k_tok0;
  b.q_begin = m_block * Tr::kBM;
  if (b.q_begin >= b.q_len) return false;
  b.rows = min(Tr::kBM, b.q_len - b.q_begin);
  b.first_pos = b.k_len - b.q_len + b.q_begin;
  b.key_end = p.causal ? min(b.k_len, b.first_pos + b.rows) : b.k_len;
  b.key_end = max(b.key_end, 0);
  b.n_tiles = (b.key_end + Tr::kBN - 1) / Tr::kBN;
  return true;
}

// CTA order (FlashAttention-3's L2 sections): the (sequence, head) pairs are cut into sections of
// `section_heads` consecutive pairs whose K/V fit in L2 together; CTAs walk a section query block
// by query block (the last, longest causal block first), the section's heads side by side, so
// the CTAs in flight share K/V tiles through L2. section_heads = num_heads is the plain order
// (heads fastest, then blocks, then sequences).
__device__ __forceinline__ void SectionTile(int linear, int num_heads, int batch, int num_m_blocks,
                                            int section_heads, int& head, int& m_block, int& seq) {
  const int total_hb = num_heads * batch;
  const int per_section = section_heads * num_m_blocks;
  const int section = linear / per_section;
  const int r = linear - section * per_section;
  const int hb0 = section * section_heads;
  const int here = min(section_heads, total_hb - hb0);
  const int blk = r / here;
  const int hb = hb0 + (r - blk * here);
  seq = hb / num_heads;
  head = hb - seq * num_heads;
  m_block = num_m_blocks - 1 - blk;
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    DenseFa3Kernel(const AttnParams p, const __grid_constant__ CUtensorMap tmap_q,
                   const __grid_constant__ CUtensorMap tmap_k,
                   const __grid_constant__ CUtensorMap tmap_v, int num_m_blocks,
                   int section_heads) {
#if SPATTN_SM90A
  using T = typename Tr::T;
  using detail::FenceReg;
  using detail::kNegInf;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStages = Tr::kStages;
  constexpr int kSub = Tr::kSub;
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = smem_raw + ((1024 - (Smem32(smem_raw) & 1023)) & 1023);

  int head, m_block, seq;
  SectionTile(static_cast<int>(blockIdx.x), p.num_q_heads, p.batch, num_m_blocks, section_heads,
              head, m_block, seq);
  BlockRows b;
  if (!Geometry<Tr>(p, seq, m_block, b)) return;
  const int kv_head = head / p.group;

  const uint32_t sQ = Smem32(smem);
  const uint32_t sK = sQ + Tr::kKOff;
  const uint32_t sV = sQ + Tr::kVOff;
  const uint32_t bars = sQ + Tr::kBarOff;
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8 * (1 + s); };
  auto v_full = [&](int s) { return bars + 8 * (1 + kStages + s); };
  auto k_empty = [&](int s) { return bars + 8 * (1 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (1 + 3 * kStages + s); };

  if (threadIdx.x == 0) {
    MbarInit(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      MbarInit(k_full(s), 1);
      MbarInit(v_full(s), 1);
      MbarInit(k_empty(s), 4 * Tr::kConsumerWgs);  // one lane per consumer warp
      MbarInit(v_empty(s), 4 * Tr::kConsumerWgs);
    }
    MbarInitFence();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---- producer ----
    RegsDecrease<Tr::kProducerRegs>();
    if (threadIdx.x == 0) {
      PrefetchTensorMap(&tmap_q);
      PrefetchTensorMap(&tmap_k);
      PrefetchTensorMap(&tmap_v);
      MbarArriveExpectTx(q_full, Tr::kQBytes);
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        TmaLoad3d(sQ + sub * kBM * 128, &tmap_q, sub * 64, head, b.q_tok0 + b.q_begin, q_full);
      }
      auto load = [&](const CUtensorMap* map, uint32_t base, uint32_t full, int t) {
        const int tok = b.k_tok0 + (b.n_tiles - 1 - t) * kBN;
        MbarArriveExpectTx(full, Tr::kTileBytes);
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub) {
          TmaLoad3d(base + sub * kBN * 128, map, sub * 64, kv_head, tok, full);
        }
      };
      // K(t + 1) goes out before V(t): the consumers use them in that order.
      for (int t = 0; t <= b.n_tiles; ++t) {
        if (t < b.n_tiles) {
          const int s = t % kStages;
          MbarWait(k_empty(s), ((t / kStages) & 1) ^ 1);
          load(&tmap_k, sK + s * Tr::kTileBytes, k_full(s), t);
        }
        if (t > 0) {
          const int s = (t - 1) % kStages;
          MbarWait(v_empty(s), (((t - 1) / kStages) & 1) ^ 1);
          load(&tmap_v, sV + s * Tr::kTileBytes, v_full(s), t - 1);
        }
      }
    }
    return;
  }

  // ---- consumers ----
  RegsIncrease<Tr::kConsumerRegs>();
  const int cw = wg - 1;  // consumer warpgroup 0 or 1
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int row_in_cta0 = cw * 64 + warp * 16 + g;  // + 8 * h
  const float scale = p.scale_log2;
  const int n_tiles = b.n_tiles;

  float acc[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc[i] = 0.f;
  float s[kBN / 2];
  uint32_t pa[kBN / 16][4];
  float m_i[2] = {kNegInf, kNegInf}, l_i[2] = {0.f, 0.f};

  // The turns go round the consumer warpgroups: 0, 1, (2,) 0, ...
  const int my_turn = kBarTurn0 + cw;
  const int other_turn = kBarTurn0 + (cw + 1) % Tr::kConsumerWgs;
  const uint32_t q_rows = sQ + cw * 64 * 128;

  auto issue_qk = [&](int stage) {
    const uint32_t kst = sK + stage * Tr::kTileBytes;
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) FenceReg(s[i]);
    detail::WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t koff = (ks % 4) * 32;
      const uint64_t da = detail::SmemDesc(q_rows + (ks / 4) * kBM * 128 + koff, 16, 1024);
      const uint64_t db = detail::SmemDesc(kst + (ks / 4) * kBN * 128 + koff, 16, 1024);
      detail::Wgmma<T, kBN>::SS(s, da, db, ks > 0 ? 1 : 0);
    }
    detail::WgmmaCommit();
  };
  auto issue_pv = [&](int stage) {
    const uint32_t vst = sV + stage * Tr::kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) FenceReg(pa[kk][e]);
    }
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) FenceReg(acc[i]);
    detail::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint64_t db = detail::SmemDesc(vst + kk * 16 * 128, kBN * 128, 1024);
      detail::Wgmma<T, kD>::RS(acc, pa[kk], db);
    }
    detail::WgmmaCommit();
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) MbarArrive(bar);
  };
  // Masks S of tile t (keys past key_end, causal) when the tile needs it.
  auto mask = [&](int t) {
    const int key0 = (n_tiles - 1 - t) * kBN;
    const bool need =
        key0 + kBN > b.key_end || (p.causal && key0 + kBN - 1 > b.first_pos + cw * 64);
    if (!need) return;
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
        const int pos = b.first_pos + row_in_cta0 + 8 * (e >> 1);
        const bool ok = key < b.key_end && (!p.causal || key <= pos);
        if (!ok) s[nt * 4 + e] = kNegInf;
      }
    }
  };
  // Online softmax of S in place (log2 domain); returns the rescale factors of the rows.
  auto softmax = [&](float* corr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m_i[h];
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = mx == kNegInf ? 0.f : mx * scale;
      corr[h] = detail::Exp2(m_i[h] * scale - ms);
      m_i[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float pv = detail::Exp2(fmaf(s[nt * 4 + 2 * h + j], scale, -ms));
          s[nt * 4 + 2 * h + j] = pv;
          sum += pv;
        }
      }
      l_i[h] = l_i[h] * corr[h] + sum;
    }
  };
  auto to_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      pa[kk][0] = detail::Mma<T>::Pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = detail::Mma<T>::Pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = detail::Mma<T>::Pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = detail::Mma<T>::Pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  // V rows past the sequence's keys may hold another sequence's values (NaN/Inf would leak
  // through 0 * x): zero them in the (rare) tile that has them. Both consumer warpgroups write
  // the same zeros, so their writes never race with a value that matters.
  auto zero_v_tail = [&](int stage, int t) {
    const int key0 = (n_tiles - 1 - t) * kBN;
    const int valid = b.k_len - key0;
    if (valid >= kBN || b.k_tok0 + b.k_len >= p.total_k) return;
    char* vst = smem + Tr::kVOff + stage * Tr::kTileBytes;
    for (int i = tid; i < (kBN - valid) * kSub * 8; i += 128) {
      const int r = valid + i / (kSub * 8), c = i % (kSub * 8);
      *reinterpret_cast<uint4*>(vst + (c / 8) * kBN * 128 + r * 128 + (c % 8) * 16) =
          make_uint4(0, 0, 0, 0);
    }
    detail::FenceProxyAsync();
    NamedSync(kBarWg0 + cw, 128);
  };

  MbarWait(q_full, 0);
  if (n_tiles > 0) {
    // Consumer warpgroup 0 goes first.
    if (cw == Tr::kConsumerWgs - 1) NamedArrive(kBarTurn0, 256);
    // Tile 0: S, mask, softmax.
    MbarWait(k_full(0), 0);
    NamedSync(my_turn, 256);
    issue_qk(0);
    NamedArrive(other_turn, 256);
    WgmmaWait<0>();
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) FenceReg(s[i]);
    release(k_empty(0));
    mask(0);
    {
      float corr[2];
      softmax(corr);
    }
    to_p();
    for (int t = 1; t < n_tiles; ++t) {
      const int st = t % kStages, ph = (t / kStages) & 1;
      const int ps = (t - 1) % kStages, pph = ((t - 1) / kStages) & 1;
      MbarWait(k_full(st), ph);
      MbarWait(v_full(ps), pph);
      zero_v_tail(ps, t - 1);
      NamedSync(my_turn, 256);
      issue_qk(st);
      issue_pv(ps);
      NamedArrive(other_turn, 256);
      WgmmaWait<1>();  // S(t) is ready; P(t-1) V is still running
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) FenceReg(s[i]);
      release(k_empty(st));
      mask(t);
      float corr[2];
      softmax(corr);
      WgmmaWait<0>();
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) FenceReg(acc[i]);
      release(v_empty(ps));
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
        acc[dt * 4 + 0] *= corr[0];
        acc[dt * 4 + 1] *= corr[0];
        acc[dt * 4 + 2] *= corr[1];
        acc[dt * 4 + 3] *= corr[1];
      }
      to_p();
    }
    {
      const int ps = (n_tiles - 1) % kStages, pph = ((n_tiles - 1) / kStages) & 1;
      MbarWait(v_full(ps), pph);
      zero_v_tail(ps, n_tiles - 1);
      NamedSync(my_turn, 256);
      issue_pv(ps);
      NamedArrive(other_turn, 256);
      WgmmaWait<0>();
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) FenceReg(acc[i]);
      release(v_empty(ps));
    }
    if (cw == 0) NamedSync(my_turn, 256);  // the last "your turn" of the last warpgroup
  }

  // Epilogue: normalize, stage this warp's 16 rows in its own Q rows, write 16-byte chunks.
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(head) * p.o_head_stride;
  char* sq = smem;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_i[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l == 0.f ? 0.f : 1.f / l;
    const int r = row_in_cta0 + 8 * h;
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt) {
      const uint32_t packed =
          detail::Mma<T>::Pack(acc[dt * 4 + 2 * h] * inv, acc[dt * 4 + 2 * h + 1] * inv);
      const int off = (dt / 8) * kBM * 128 + r * 128 + (((dt & 7) ^ (r & 7)) * 16) + t4 * 4;
      *reinterpret_cast<uint32_t*>(sq + off) = packed;
    }
    if (p.maybe_lse != nullptr && t4 == 0 && r < b.rows) {
      const float lse = l == 0.f ? kNegInf : (m_i[h] * scale + __log2f(l)) * detail::kLn2;
      p.maybe_lse[static_cast<int64_t>(head) * p.total_q + b.q_tok0 + b.q_begin + r] = lse;
    }
  }
  __syncwarp();
  constexpr int kChunks = kD / 8;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = cw * 64 + warp * 16 + i / kChunks, ch = i % kChunks;
    if (r < b.rows) {
      const int off = (ch / 8) * kBM * 128 + r * 128 + (((ch & 7) ^ (r & 7)) * 16);
      const uint4 val = *reinterpret_cast<const uint4*>(sq + off);
      *reinterpret_cast<uint4*>(
          og + static_cast<int64_t>(b.q_tok0 + b.q_begin + r) * p.o_token_stride + ch * 8) = val;
    }
  }
#endif  // SPATTN_SM90A
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_
