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
//    softmax runs under the other's GEMMs. The consumer step is consumer_step.cuh's, shared
//    with the persistent kernel.
// Key tiles run from the last to the first, so the tiles that need a mask (causal diagonal,
// partial last tile) come first; the others skip the mask code. A partial first tile runs its
// P V on its 16-key groups that hold keys only (8192 keys = 46 tiles of 176 + 96: 6 of 11
// wgmmas; a causal block's diagonal tile likewise).
// Tail split (DenseSplit): the grid's last wave would run few CTAs on many idle SMs (2048 CTAs
// are 15.5 waves on 132 SMs). The host may cut each of the last `split_blocks` query blocks into
// `split_pieces` CTAs over consecutive key-tile ranges; each piece writes its unnormalized O and
// row max / sum to a workspace, and the piece that finishes last (a per-block counter) merges
// the others into its registers and stores the block (FlashAttention's split-KV combine).
//
// Shared tiles use the 128-byte swizzle TMA writes ([head_dim / 64] sub-tiles of [rows][128 B],
// 16-byte chunk index XOR row % 8), the layout the wgmma descriptors of attention_core.cuh read.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_

#include "kernels/cuda/attention/attention_core.cuh"
#include "kernels/cuda/attention/hopper/consumer_step.cuh"
#include "kernels/cuda/attention/hopper/sm90_primitives.cuh"

namespace spattn {
namespace cuda {
namespace hopper {

// kConsumerWgs consumer warpgroups of 64 rows each: 2 (128-row blocks, 240 registers each) or 3
// (192-row blocks, 160 registers: FlashAttention-3's shape for d = 64, where the softmax costs
// as much as the GEMMs and a third warpgroup keeps the tensor cores fed). kBN keys per tile:
// 128, or 176 (FlashAttention-3's tile for non-causal d = 128: fewer softmax rounds and
// barrier turns per key; the d = 128 default for causal blocks too since session 17, where it
// measured faster at 32K despite the diagonal tiles it wastes).
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

// Row geometry of one query block (CTA-uniform). The CTA runs key tiles [tile_end - n_tiles,
// tile_end) (all of them unless it is a piece of a split block).
struct BlockRows {
  int q_tok0, q_len, k_tok0, k_len;
  int q_begin, rows, first_pos, key_end, n_tiles, tile_end;
};

// The tail split of the grid (host: DenseSplitPlan): CTAs [0, full_ctas) are whole query blocks
// (grid order blocks 0 .. full_ctas - 1); the rest are `pieces` CTAs for each grid-order block
// full_ctas + j. `partials`: per piece, kFloats x threads floats (element-major, so a warp's
// stores are contiguous); `counters`: one int per split block, zero between launches (the
// merging piece puts it back to zero).
struct DenseSplit {
  int full_ctas = 0;
  int pieces = 1;
  float* partials = nullptr;
  int* counters = nullptr;
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
  b.tile_end = b.n_tiles;
  return true;
}

// Piece `piece` of `pieces` of the block's key tiles: tiles [n * piece / pieces,
// n * (piece + 1) / pieces) (possibly none).
__device__ __forceinline__ void SplitTiles(BlockRows& b, int piece, int pieces) {
  const int n = b.n_tiles;
  const int lo = n * piece / pieces;
  b.tile_end = n * (piece + 1) / pieces;
  b.n_tiles = b.tile_end - lo;
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

// Named barrier of all consumer threads (after the turns and the warpgroup barriers).
constexpr int kBarConsumers = 7;

// Split blocks: this piece's O accumulator and row max / sum go to the workspace; the piece that
// arrives last (counter) adds the others' into `st` (rescaled to the common max) and returns
// true: it stores the block. `thread`: the consumer thread (0 .. 128 kConsumerWgs - 1).
template <class Tr, class Step>
__device__ __forceinline__ bool MergePieces(Step& st, const DenseSplit& split, int split_block,
                                            int piece, int thread, float scale) {
  constexpr int kAcc = Tr::kD / 2;
  constexpr int kFloats = kAcc + 4;  // acc, m_i[2], l_i[2]
  constexpr int kCons = 128 * Tr::kConsumerWgs;
  __shared__ int last;
  float* mine = split.partials +
                (static_cast<int64_t>(split_block) * split.pieces + piece) * kFloats * kCons +
                thread;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) __stcg(mine + i * kCons, st.acc[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __stcg(mine + (kAcc + h) * kCons, st.m_i[h]);
    __stcg(mine + (kAcc + 2 + h) * kCons, st.l_i[h]);
  }
  __threadfence();
  NamedSync(kBarConsumers, kCons);
  if (thread == 0) {
    const int before = atomicAdd(split.counters + split_block, 1);
    last = before == split.pieces - 1;
    if (last) split.counters[split_block] = 0;  // ready for the next launch
  }
  NamedSync(kBarConsumers, kCons);
  if (!last) return false;
  __threadfence();
  // Maxima are raw scores (the probabilities are exp2(s * scale - m * scale)), the same in the
  // four lanes of a row; sums are this thread's share of the row, as in the kernel.
  const float* block =
      split.partials + static_cast<int64_t>(split_block) * split.pieces * kFloats * kCons + thread;
  for (int other = 0; other < split.pieces; ++other) {
    if (other == piece) continue;
    const float* theirs = block + static_cast<int64_t>(other) * kFloats * kCons;
    float f_mine[2], f_theirs[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_o = __ldcg(theirs + (kAcc + h) * kCons);
      const float l_o = __ldcg(theirs + (kAcc + 2 + h) * kCons);
      const float m = fmaxf(st.m_i[h], m_o);
      f_mine[h] = st.m_i[h] == detail::kNegInf ? 0.f : detail::Exp2((st.m_i[h] - m) * scale);
      f_theirs[h] = m_o == detail::kNegInf ? 0.f : detail::Exp2((m_o - m) * scale);
      st.m_i[h] = m;
      st.l_i[h] = st.l_i[h] * f_mine[h] + l_o * f_theirs[h];
    }
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int h = (i / 2) % 2;  // acc[dt * 4 + 2 h + j]: row g + 8 h
      st.acc[i] = st.acc[i] * f_mine[h] + __ldcg(theirs + i * kCons) * f_theirs[h];
    }
  }
  return true;
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    DenseFa3Kernel(const AttnParams p, const __grid_constant__ CUtensorMap tmap_q,
                   const __grid_constant__ CUtensorMap tmap_k,
                   const __grid_constant__ CUtensorMap tmap_v, int num_m_blocks, int section_heads,
                   const DenseSplit split, bool narrow_first) {
#if SPATTN_SM90A
  using T = typename Tr::T;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStages = Tr::kStages;
  constexpr int kSub = Tr::kSub;
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = smem_raw + ((1024 - (Smem32(smem_raw) & 1023)) & 1023);

  // Whole block, or piece `piece` of split block `split_block` (grid order full_ctas + it).
  int linear = static_cast<int>(blockIdx.x);
  int split_block = -1, piece = 0;
  if (linear >= split.full_ctas) {
    split_block = (linear - split.full_ctas) / split.pieces;
    piece = linear - split.full_ctas - split_block * split.pieces;
    linear = split.full_ctas + split_block;
  }
  int head, m_block, seq;
  SectionTile(linear, p.num_q_heads, p.batch, num_m_blocks, section_heads, head, m_block, seq);
  BlockRows b;
  if (!Geometry<Tr>(p, seq, m_block, b)) return;  // every piece of an empty block leaves
  if (split_block >= 0) SplitTiles(b, piece, split.pieces);
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
        const int tok = b.k_tok0 + (b.tile_end - 1 - t) * kBN;
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
  const int cw = wg - 1;  // consumer warpgroup 0, 1 (, 2)
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int row_in_cta0 = cw * 64 + warp * 16 + lane / 4;  // + 8 * h
  const int n_tiles = b.n_tiles;
  const KvRing<kStages, Tr::kTileBytes> ring{sK, sV, k_full(0), v_full(0), k_empty(0), v_empty(0)};
  ConsumerStep<T, kD, kBN, kBM> st(lane);
  st.Reset();

  // The turns go round the consumer warpgroups: 0, 1, (2,) 0, ...
  const int my_turn = kBarTurn0 + cw;
  const int other_turn = kBarTurn0 + (cw + 1) % Tr::kConsumerWgs;

  // Tile t holds keys [(tile_end - 1 - t) kBN, + kBN): the last first.
  // (The ring position is the tile number: one block per CTA.)
  int tile = 0;
  auto next = [&](int& d) {
    d = tile;
    return tile < n_tiles;
  };
  // V rows past the sequence's keys may hold another sequence's values (NaN/Inf would leak
  // through 0 * x): zero them in the (rare) tile that has them. Every consumer warpgroup writes
  // the same zeros, so their writes never race with a value that matters.
  auto zero_v_tail = [&](int slot, int t) {
    const int key0 = (b.tile_end - 1 - t) * kBN;
    const int valid = b.k_len - key0;
    if (valid >= kBN || b.k_tok0 + b.k_len >= p.total_k) return;
    char* vst = smem + Tr::kVOff + slot * Tr::kTileBytes;
    for (int i = tid; i < (kBN - valid) * kSub * 8; i += 128) {
      const int r = valid + i / (kSub * 8), c = i % (kSub * 8);
      *reinterpret_cast<uint4*>(vst + (c / 8) * kBN * 128 + r * 128 + (c % 8) * 16) =
          make_uint4(0, 0, 0, 0);
    }
    detail::FenceProxyAsync();
    NamedSync(kBarWg0 + cw, 128);
  };
  // Masks S of tile t (keys past key_end, causal) when the tile needs it.
  auto mask = [&](decltype(st)& step, int t) {
    const int key0 = (b.tile_end - 1 - t) * kBN;
    const bool need =
        key0 + kBN > b.key_end || (p.causal && key0 + kBN - 1 > b.first_pos + cw * 64);
    if (!need) return;
    step.Mask([&](int col) { return key0 + col; },
              [&](int, int key, int h) {
                const int pos = b.first_pos + row_in_cta0 + 8 * h;
                return key < b.key_end && (!p.causal || key <= pos);
              });
  };

  MbarWait(q_full, 0);
  if (n_tiles > 0) {
    // Consumer warpgroup 0 goes first.
    if (cw == Tr::kConsumerWgs - 1) NamedArrive(kBarTurn0, 256);
    // The first tile (the block's last keys) may hold fewer than kBN keys: its P V runs on the
    // 16-key groups that hold keys (narrow_first; the mask zeroes P of the rest).
    auto first_groups = [&](int t) {
      const int valid = b.key_end - (b.tile_end - 1 - t) * kBN;
      return narrow_first && valid < kBN ? (valid + 15) / 16 : kBN / 16;
    };
    RunKeyTiles<int>(
        st, ring, tile, sQ + cw * 64 * 128, my_turn, other_turn, lane, p.scale_log2, next,
        [](int) {}, zero_v_tail, mask, 256, first_groups);
    if (cw == 0) NamedSync(my_turn, 256);  // the last "your turn" of the last warpgroup
  }

  if (split_block >= 0 &&
      !MergePieces<Tr>(st, split, split_block, piece, cw * 128 + tid, p.scale_log2)) {
    return;  // another piece stores the block
  }

  // Epilogue: this warp's 16 rows through its own Q rows to 16-byte stores.
  const int64_t row_tok = b.q_tok0 + b.q_begin;
  T* o_block = static_cast<T*>(p.o) + static_cast<int64_t>(head) * p.o_head_stride +
               row_tok * p.o_token_stride;
  float* lse_block = p.maybe_lse == nullptr
                         ? nullptr
                         : p.maybe_lse + static_cast<int64_t>(head) * p.total_q + row_tok;
  st.Store(smem, cw * 64 + warp * 16, lane, b.rows, p.scale_log2, o_block, p.o_token_stride,
           lse_block);
#endif  // SPATTN_SM90A
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_DENSE_FA3_CUH_
