// The consumer side of the Hopper warp-specialized kernels (dense_fa3.cuh, persistent_fa3.cuh):
// one consumer warpgroup's 64 query rows against a sequence of K/V tiles from the producer's
// ring, FlashAttention-3 style.
//
// Per tile t (after the first): wait for K(t) and V(t - 1), take the tensor-core turn, issue
// S(t) = Q K(t)^T and O += P(t - 1) V(t - 1) together, hand the turn to the next warpgroup
// (ping-pong), wait for S(t) only, release K(t), mask, online softmax (log2 domain) while P V
// still runs, wait for it, release V(t - 1), rescale O, convert P(t). The first tile has no P V
// yet; the last P V runs after the loop.
//
// What differs between the kernels stays with them, as hooks of RunKeyTiles: where the next tile
// comes from (a count for dense, a key-set cursor for sparse items), what follows a K wait
// (gathered tiles need a proxy fence), the V tile's preparation (zeroing rows past the keys), and
// the mask (which keys and positions a tile holds).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_CONSUMER_STEP_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_CONSUMER_STEP_CUH_

#include <type_traits>

#include "kernels/cuda/attention/attention_core.cuh"
#include "kernels/cuda/attention/hopper/sm90_primitives.cuh"

namespace spattn {
namespace cuda {
namespace hopper {

// Named barrier ids (0 is __syncthreads): 1, 2, 3 = "your turn" of consumer warpgroup 0, 1, 2;
// 4, 5, 6 = consumer warpgroup 0, 1, 2 alone.
constexpr int kBarTurn0 = 1;
constexpr int kBarWg0 = 4;

// The K/V ring as the consumers see it: slot 0 of each tile array and of each barrier array
// (slots follow each other: kTileBytes apart for tiles, 8 bytes for barriers). Ring position
// `tile` counts every tile the producer loaded into this CTA's ring so far. kKStages: K slots
// (default kStages; the sparse stream's deeper K ring, PersistTraits::kKStages), kStages: V
// slots; Slot / Phase (both arrays alike) only where they are equal.
template <int kStages, int kTileBytes, int kKStages = kStages>
struct KvRing {
  uint32_t k_smem, v_smem;
  uint32_t k_full, v_full, k_empty, v_empty;

  __device__ __forceinline__ static int Slot(int tile) {
    static_assert(kKStages == kStages, "K and V rings of one depth");
    return tile % kStages;
  }
  __device__ __forceinline__ static uint32_t Phase(int tile) {
    static_assert(kKStages == kStages, "K and V rings of one depth");
    return (tile / kStages) & 1;
  }
  __device__ __forceinline__ static int KSlot(int tile) { return tile % kKStages; }
  __device__ __forceinline__ static uint32_t KPhase(int tile) { return (tile / kKStages) & 1; }
  __device__ __forceinline__ static int VSlot(int tile) { return tile % kStages; }
  __device__ __forceinline__ static uint32_t VPhase(int tile) { return (tile / kStages) & 1; }
  __device__ __forceinline__ uint32_t K(int slot) const { return k_smem + slot * kTileBytes; }
  __device__ __forceinline__ uint32_t V(int slot) const { return v_smem + slot * kTileBytes; }
  __device__ __forceinline__ uint32_t KFull(int slot) const { return k_full + 8 * slot; }
  __device__ __forceinline__ uint32_t VFull(int slot) const { return v_full + 8 * slot; }
  __device__ __forceinline__ uint32_t KEmpty(int slot) const { return k_empty + 8 * slot; }
  __device__ __forceinline__ uint32_t VEmpty(int slot) const { return v_empty + 8 * slot; }
};

// One consumer thread's state: O accumulator, S (then P) of the current tile, P as wgmma A
// fragments, row maxima and sums of its two rows (g and g + 8 of its warp's 16).
// kBM: rows of the Q buffer (the stride of its 128-byte sub-tiles); kBN: keys per tile.
template <typename T, int kD, int kBN, int kBM>
struct ConsumerStep {
  float acc[kD / 2];
  float s[kBN / 2];
  uint32_t pa[kBN / 16][4];
  float m_i[2], l_i[2];
  int t4;  // lane % 4: the column pair of S this thread holds within each 8-key group

  __device__ __forceinline__ explicit ConsumerStep(int lane) : t4(lane % 4) {}

  __device__ __forceinline__ void Reset() {
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) acc[i] = 0.f;
    m_i[0] = m_i[1] = detail::kNegInf;
    l_i[0] = l_i[1] = 0.f;
  }

  // S = Q K^T of this warpgroup's 64 rows (`q_rows`: their first row in the Q buffer) and the
  // tile at `kst`.
  __device__ __forceinline__ void IssueQk(uint32_t q_rows, uint32_t kst) {
    FenceS();
    detail::WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t koff = (ks % 4) * 32;
      const uint64_t da = detail::SmemDesc(q_rows + (ks / 4) * kBM * 128 + koff, 16, 1024);
      const uint64_t db = detail::SmemDesc(kst + (ks / 4) * kBN * 128 + koff, 16, 1024);
      detail::Wgmma<T, kBN>::SS(s, da, db, ks > 0 ? 1 : 0);
    }
    detail::WgmmaCommit();
  }

  // O += P V of the tile's first 16 `groups` keys only (1 <= groups < kBN / 16: a partial
  // tile; P of the other keys is zero, masked). One fixed-length wgmma run per width: ptxas
  // fences each wgmma of a run cut by branches.
  __device__ __forceinline__ void IssuePvGroups(uint32_t vst, int groups) {
    switch (groups) {
      case 1:
        return IssuePvN<1>(vst);
      case 2:
        return IssuePvN<2>(vst);
      case 3:
        return IssuePvN<3>(vst);
      case 4:
        return IssuePvN<4>(vst);
      case 5:
        return IssuePvN<5>(vst);
      case 6:
        return IssuePvN<6>(vst);
      case 7:
        return IssuePvN<7>(vst);
      case 8:
        return IssuePvN<8>(vst);
      case 9:
        return IssuePvN<9>(vst);
      default:
        return IssuePvN<10>(vst);
    }
  }
  template <int kGroups>
  __device__ __forceinline__ void IssuePvN(uint32_t vst) {
    if constexpr (kGroups >= kBN / 16) {
      IssuePv(vst);
    } else {
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) detail::FenceReg(pa[kk][e]);
      }
      FenceAcc();
      detail::WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kGroups; ++kk) {
        const uint64_t db = detail::SmemDesc(vst + kk * 16 * 128, kBN * 128, 1024);
        detail::Wgmma<T, kD>::RS(acc, pa[kk], db);
      }
      detail::WgmmaCommit();
    }
  }

  // O += P V of the tile at `vst`.
  __device__ __forceinline__ void IssuePv(uint32_t vst) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) detail::FenceReg(pa[kk][e]);
    }
    FenceAcc();
    detail::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint64_t db = detail::SmemDesc(vst + kk * 16 * 128, kBN * 128, 1024);
      detail::Wgmma<T, kD>::RS(acc, pa[kk], db);
    }
    detail::WgmmaCommit();
  }

  // Register fences after a wgmma wait: the compiler must not touch S / O across it.
  __device__ __forceinline__ void FenceS() {
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) detail::FenceReg(s[i]);
  }
  __device__ __forceinline__ void FenceAcc() {
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) detail::FenceReg(acc[i]);
  }

  // Sets S to -inf where ok(col, key, h) is false; key_of(col) gives the key of tile column col
  // (0 .. kBN - 1), h the row (g + 8 h).
  template <class KeyOf, class Ok>
  __device__ __forceinline__ void Mask(KeyOf key_of, Ok ok) {
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = nt * 8 + 2 * t4 + j;
        const int key = key_of(col);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!ok(col, key, h)) s[nt * 4 + 2 * h + j] = detail::kNegInf;
        }
      }
    }
  }

  // Row h's (g + 8 h) maximum over S's tile and the running maximum m_i[h] (the row's 4 lanes
  // reduced).
  __device__ __forceinline__ float RowMax(int h) const {
    float mx = m_i[h];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
      mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  }
  // Row h of S to P = 2^(s * scale - ms) in place; returns the thread's part of the row's sum.
  // kHalfSums (the pair step, persistent_fa3.cuh's ConsumerStreamPair: S's column halves are two
  // 64-key tiles in either order): each half summed alone, then the two added — a + b == b + a,
  // so the sum's bits do not depend on which half holds the item's first tile.
  template <bool kHalfSums = false>
  __device__ __forceinline__ float ExpRow(int h, float scale, float ms) {
    constexpr int kParts = kHalfSums ? 2 : 1;
    static_assert(kBN % (8 * kParts) == 0, "half sums");
    float sum[kParts];
#pragma unroll
    for (int q = 0; q < kParts; ++q) {
      sum[q] = 0.f;
#pragma unroll
      for (int nt = q * (kBN / 8 / kParts); nt < (q + 1) * (kBN / 8 / kParts); ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float pv = detail::Exp2(fmaf(s[nt * 4 + 2 * h + j], scale, -ms));
          s[nt * 4 + 2 * h + j] = pv;
          sum[q] += pv;
        }
      }
    }
    if constexpr (kHalfSums) {
      return sum[0] + sum[1];
    } else {
      return sum[0];
    }
  }

  // Online softmax of S in place (log2 domain, `scale` = softmax scale * log2 e); corr gets the
  // rescale factors of the two rows.
  template <bool kHalfSums = false>
  __device__ __forceinline__ void Softmax(float scale, float* corr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mx = RowMax(h);
      const float ms = mx == detail::kNegInf ? 0.f : mx * scale;
      corr[h] = detail::Exp2(m_i[h] * scale - ms);
      m_i[h] = mx;
      l_i[h] = l_i[h] * corr[h] + ExpRow<kHalfSums>(h, scale, ms);
    }
  }

  // Softmax with a lazily moved row maximum (the sparse kernel's stream, persistent_fa3.cuh;
  // FlashAttention-4's conditional rescale): a row's running maximum m moves to the tile's only
  // where that lies more than kStaleMaxLog2 above it in the log2 domain (mx * scale - m * scale
  // > kStaleMaxLog2; also where m is still -inf); otherwise the row keeps m, its correction
  // factor is exactly 1 and its P values are at most 2^kStaleMaxLog2 (fine for fp32 sums and
  // for P in bf16 / fp16). O / l and the LSE (m * scale + log2 l) stay exact: l is summed
  // against the same m as O. Where the tile's maximum does not exceed m (most tiles) the result
  // is the same as Softmax's. Returns whether either of the thread's rows moved; rows that did
  // not move get corr 1, so the caller may skip Rescale when no row of the warp moved (its 64
  // multiplies by 1.0 per tile: session 23).
  // `stale`: that bound (kStaleMaxLog2 by default; SPATTN_HOPPER_STALE_MAX: 0 moves the maximum
  // wherever it rises, so only the multiplies by 1.0 are skipped; -1 moves it always, Softmax).
  static constexpr float kStaleMaxLog2 = 8.f;
  template <bool kHalfSums = false>
  __device__ __forceinline__ bool SoftmaxStale(float scale, float* corr, float stale) {
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mx = RowMax(h);
      const float ms_old = m_i[h] * scale;
      // (NaN where both are -inf: moves, as Softmax would.)
      const bool move = !(mx * scale - ms_old <= stale);
      const float ms = !move ? ms_old : mx == detail::kNegInf ? 0.f : mx * scale;
      corr[h] = move ? detail::Exp2(ms_old - ms) : 1.f;
      if (move) m_i[h] = mx;
      moved = moved || move;
      l_i[h] = l_i[h] * corr[h] + ExpRow<kHalfSums>(h, scale, ms);
    }
    return moved;
  }

  __device__ __forceinline__ void Rescale(const float* corr) {
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt) {
      acc[dt * 4 + 0] *= corr[0];
      acc[dt * 4 + 1] *= corr[0];
      acc[dt * 4 + 2] *= corr[1];
      acc[dt * 4 + 3] *= corr[1];
    }
  }

  // P (in S) to the A fragments of the P V wgmma.
  __device__ __forceinline__ void ToP() {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      pa[kk][0] = detail::Mma<T>::Pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = detail::Mma<T>::Pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = detail::Mma<T>::Pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = detail::Mma<T>::Pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

  // The first half of Store (the sparse stream's TMA-store epilogue, persistent_fa3.cuh's
  // StoreItemTma): normalize, stage the warp's 16 rows in the Q buffer `sq` (their own Q rows,
  // same swizzle), write the LSE of the rows below `rows`.
  __device__ __forceinline__ void Stage(char* sq, int warp_row0, int lane, int rows, float scale,
                                        float* maybe_lse_block) {
    const int row0 = warp_row0 + lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_i[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l == 0.f ? 0.f : 1.f / l;
      const int r = row0 + 8 * h;
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
        const uint32_t packed =
            detail::Mma<T>::Pack(acc[dt * 4 + 2 * h] * inv, acc[dt * 4 + 2 * h + 1] * inv);
        const int off = (dt / 8) * kBM * 128 + r * 128 + (((dt & 7) ^ (r & 7)) * 16) + t4 * 4;
        *reinterpret_cast<uint32_t*>(sq + off) = packed;
      }
      if (maybe_lse_block != nullptr && t4 == 0 && r < rows) {
        maybe_lse_block[r] =
            l == 0.f ? detail::kNegInf : (m_i[h] * scale + __log2f(l)) * detail::kLn2;
      }
    }
  }

  // Epilogue of one warp: Stage (normalize, stage the warp's 16 rows in the Q buffer `sq`, their
  // own Q rows, same swizzle; the LSE), then 16-byte stores of the rows below `rows`.
  // `warp_row0`: the warp's first row in the block; `o_block`: the block's first output row;
  // `maybe_lse_block`: its first LSE entry, or null.
  __device__ __forceinline__ void Store(char* sq, int warp_row0, int lane, int rows, float scale,
                                        T* o_block, int64_t o_token_stride,
                                        float* maybe_lse_block) {
    Stage(sq, warp_row0, lane, rows, scale, maybe_lse_block);
    __syncwarp();
    constexpr int kChunks = kD / 8;
    for (int i = lane; i < 16 * kChunks; i += 32) {
      const int r = warp_row0 + i / kChunks, ch = i % kChunks;
      if (r < rows) {
        const int off = (ch / 8) * kBM * 128 + r * 128 + (((ch & 7) ^ (r & 7)) * 16);
        const uint4 val = *reinterpret_cast<const uint4*>(sq + off);
        *reinterpret_cast<uint4*>(o_block + static_cast<int64_t>(r) * o_token_stride + ch * 8) =
            val;
      }
    }
  }
};

// Runs one query block's key tiles through `st` (state reset by the caller), advancing the ring
// position `tile`. Hooks, with Desc the kernel's tile description:
//   next(Desc&) -> bool     the next tile (false: no more);
//   after_k(const Desc&)    after K of the tile landed, before its S is issued;
//   prepare_v(slot, const Desc&)  after V of the tile landed, before its P V is issued;
//   mask(Step&, const Desc&)      after S of the tile is ready.
// The caller arranges the first and last "your turn" of the ping-pong (my_turn, other_turn);
// turn_threads: the threads of a turn barrier (256: this warpgroup and the one handing over; a
// lone consumer warpgroup passes 128 and its own barrier as both turns, which makes the turns
// plain warpgroup barriers). Returns whether there was any tile.
//   first_groups(const Desc&) -> int  (optional; FullTiles: none) 16-key groups of the first
//     tile that hold keys; fewer than kBN / 16 narrows its P V to them (the dense kernel's
//     partial tile; its mask must cover the other keys). Later tiles run whole. (A narrowed
//     Q K^T, m64nN wgmmas into the first N / 2 S registers, makes ptxas serialize every wgmma
//     of the kernel: C7511, as s17-items saw.)
struct FullTiles {};

// The P V of the last tile of a stream (ring position tile - 1; RunKeyTiles' and the sparse
// kernel's ConsumerStream): waits for its V, prepare_v(slot), issue_pv(slot) in this
// warpgroup's turn, waits for it and gives the V slot back.
template <class Step, class Ring, class PrepareV, class IssuePv>
__device__ __forceinline__ void LastPv(Step& st, const Ring& ring, int tile, int my_turn,
                                       int other_turn, int turn_threads, int lane,
                                       PrepareV prepare_v, IssuePv issue_pv) {
  const int vs = Ring::VSlot(tile - 1);
  MbarWait(ring.VFull(vs), Ring::VPhase(tile - 1));
  prepare_v(vs);
  NamedSync(my_turn, turn_threads);
  issue_pv(vs);
  NamedArrive(other_turn, turn_threads);
  WgmmaWait<0>();
  st.FenceAcc();
  if (lane == 0) MbarArrive(ring.VEmpty(vs));
}

template <class Desc, class Step, class Ring, class Next, class AfterK, class PrepareV,
          class MaskTile, class FirstGroups = FullTiles>
__device__ __forceinline__ bool RunKeyTiles(Step& st, const Ring& ring, int& tile, uint32_t q_rows,
                                            int my_turn, int other_turn, int lane, float scale,
                                            Next next, AfterK after_k, PrepareV prepare_v,
                                            MaskTile mask, int turn_threads = 256,
                                            FirstGroups first_groups = FullTiles()) {
  constexpr bool kNarrow = !std::is_same<FirstGroups, FullTiles>::value;
  constexpr int kAllGroups = sizeof(st.pa) / sizeof(st.pa[0]);
  auto release = [&](uint32_t bar) {
    if (lane == 0) MbarArrive(bar);
  };
  Desc d;
  if (!next(d)) return false;
  int pv_groups = kAllGroups;  // of the P V still to issue for the previous tile
  {
    const int ks = Ring::Slot(tile);
    MbarWait(ring.KFull(ks), Ring::Phase(tile));
    after_k(d);
    if constexpr (kNarrow) pv_groups = first_groups(d);
    NamedSync(my_turn, turn_threads);
    st.IssueQk(q_rows, ring.K(ks));
    NamedArrive(other_turn, turn_threads);
    WgmmaWait<0>();
    st.FenceS();
    release(ring.KEmpty(ks));
    mask(st, d);
    float corr[2];
    st.Softmax(scale, corr);
    st.ToP();
  }
  Desc prev = d;
  ++tile;
  while (next(d)) {
    const int ks = Ring::Slot(tile);
    const int vs = Ring::Slot(tile - 1);
    MbarWait(ring.KFull(ks), Ring::Phase(tile));
    after_k(d);
    MbarWait(ring.VFull(vs), Ring::Phase(tile - 1));
    prepare_v(vs, prev);
    NamedSync(my_turn, turn_threads);
    st.IssueQk(q_rows, ring.K(ks));
    if constexpr (kNarrow) {
      if (pv_groups < kAllGroups) {
        st.IssuePvGroups(ring.V(vs), pv_groups);
        pv_groups = kAllGroups;
      } else {
        st.IssuePv(ring.V(vs));
      }
    } else {
      st.IssuePv(ring.V(vs));
    }
    NamedArrive(other_turn, turn_threads);
    WgmmaWait<1>();  // S(t) is ready; P(t-1) V is still running
    st.FenceS();
    release(ring.KEmpty(ks));
    mask(st, d);
    float corr[2];
    st.Softmax(scale, corr);
    WgmmaWait<0>();
    st.FenceAcc();
    release(ring.VEmpty(vs));
    st.Rescale(corr);
    st.ToP();
    prev = d;
    ++tile;
  }
  LastPv(
      st, ring, tile, my_turn, other_turn, turn_threads, lane, [&](int vs) { prepare_v(vs, prev); },
      [&](int vs) {
        if constexpr (kNarrow) {
          if (pv_groups < kAllGroups) {
            st.IssuePvGroups(ring.V(vs), pv_groups);
          } else {
            st.IssuePv(ring.V(vs));
          }
        } else {
          st.IssuePv(ring.V(vs));
        }
      });
  return true;
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_CONSUMER_STEP_CUH_
