// Persistent warp-specialized attention for Hopper (sm_90a): the mainloop of dense_fa3.cuh over
// a work list, for the sparse kernel (index rows: ranges and gathered columns) and for a
// persistent dense kernel.
//
// Grid: one CTA per SM (block_m 64: two), at most one per item. Items are taken from a list
// ordered costliest first (the sparse schedule; for dense: query blocks from the last, the longest
// causal rows, to the first), CTA c taking items c, 2G - 1 - c, 2G + c, ... (snake order: a
// greedy balance of the sorted costs without a shared counter). Producer and consumers walk the
// same items and the same key tiles independently, so no item or tile description crosses
// between them.
//
// Per item the producer warpgroup loads the Q block (kBM rows) by TMA into one of two Q buffers
// (the other may still hold the previous item's Q / staged output), then the item's key tiles
// (kBN = kBM keys):
//  * range tiles (up to kBN consecutive keys): TMA, by one thread (the others just arrive);
//  * column tiles (up to kBN gathered keys): producer warp w copies rows [w, w + 1) * kBN / 4,
//    kLanes lanes per key row (each lane kLanes-strided 16-byte chunks), with cp.async; every
//    producer thread arrives on the slot's barrier when its copies land
//    (cp.async.mbarrier.arrive.noinc); rows past the tile's keys are zero-filled.
// The consumers are consumer_step.cuh's (RunKeyTiles, as in dense_fa3.cuh): S(t+1) and P(t)V
// issued together, ping-pong between the two warpgroups (block_m 64: a lone warpgroup per CTA;
// the two CTAs of an SM interleave). Range tiles shorter than kBN keys have their V rows past
// the range zeroed by the consumers (those rows hold keys the row does not attend; NaN/Inf there
// must not leak).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_

#include "kernels/cuda/attention/attention_core.cuh"
#include "kernels/cuda/attention/hopper/consumer_step.cuh"
#include "kernels/cuda/attention/hopper/sm90_primitives.cuh"

namespace spattn {
namespace cuda {
namespace hopper {

// Arrives on `bar` once every cp.async this thread issued before has landed (counts as one of
// the barrier's expected arrivals).
__device__ __forceinline__ void CpAsyncArriveNoinc(uint32_t bar) {
#if SPATTN_SM90A
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

__device__ __forceinline__ void CpAsync16Zfill(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}

// kBM_ = 128: two consumer warpgroups of 64 rows (ping-pong), 128-key tiles, one CTA per SM.
// kBM_ = 64 (block_m 64 indexes): one consumer warpgroup, 64-key tiles, two CTAs per SM (their
// warpgroups take turns on the tensor cores as the hardware schedules them).
template <typename T_, int kD_, int kStages_, int kQBufs_ = 2, int kLanes_ = 4, int kBM_ = 128>
struct PersistTraits {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kStages = kStages_;
  // Q buffers: 2 lets the next item's Q load under the current item's tail; 1 leaves the room of
  // a third K/V ring slot at d = 128.
  static constexpr int kQBufs = kQBufs_;
  // Lanes per gathered key row in the column-tile copies (1, 2, 4, 8, 16 at d = 128): kLanes lanes
  // copy kLanes consecutive 16-byte chunks of a row per instruction, so one warp instruction
  // reads 32 / kLanes rows of 16 kLanes bytes. With one lane per row each 16-byte copy reads a
  // 32-byte sector from L2 and uses half of it, and the copies are L2-bound (ncu: 96.6% L2
  // throughput); 4 lanes read whole 64-byte pieces (session 16, run 2: 1.4-1.6x on gathered
  // columns; 2 lanes 1.3-1.4x, 16 lanes and .ca copies ~1.0x).
  static constexpr int kLanes = kLanes_;
  static_assert(kLanes >= 1 && kLanes <= kD_ / 8 && (kLanes & (kLanes - 1)) == 0, "lanes");
  static constexpr int kBM = kBM_;
  static_assert(kBM == 64 || kBM == 128, "block_m");
  static constexpr int kBN = kBM;
  static constexpr int kConsumerWgs = kBM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumerWgs);
  static constexpr int kMinBlocks = kBM == 128 ? 1 : 2;  // CTAs per SM
  // Column tiles: producer warp w copies the tile's rows [w, w + 1) * kWarpRows (kLanes > 1), the
  // key numbers read by its first kWarpRows lanes.
  static constexpr int kWarpRows = kBN / 4;
  static_assert(kLanes == 1 || 32 / kLanes <= kWarpRows, "lanes for this tile size");
  static constexpr int kSub = kD / 64;
  static constexpr int kQBytes = kBM * kD * 2;
  static constexpr int kTileBytes = kBN * kD * 2;
  static constexpr int kKOff = kQBufs * kQBytes;
  static constexpr int kVOff = kKOff + kStages * kTileBytes;
  static constexpr int kBarOff = kVOff + kStages * kTileBytes;
  // q_full[Q], q_empty[Q], k_full[S], v_full[S], k_empty[S], v_empty[S]
  static constexpr int kNumBars = 2 * kQBufs + 4 * kStages;
  static constexpr int kSmemBytes = kBarOff + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = kBM == 128 ? 224 : 200;
  static_assert(kSmemBytes * kMinBlocks <= 227 * 1024, "shared memory");
  // setmaxnreg only moves registers within the CTA's launch allocation (168 x 384 = 64512 for
  // one CTA of 384 threads per SM, 128 x 256 for two of 256); 32 / 240 (65536) deadlocks in the
  // increase (run 3 of NOTES.md).
  static constexpr int kLaunchRegs = (65536 / (kThreads * kMinBlocks)) / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumerWgs * kConsumerRegs <= kLaunchRegs * kThreads,
                "register budget");
};

// Flags of PersistentFa3Kernel: none at present (kept for benchmark knobs).

// One work item: a query block (kBM rows) of one head and its keys.
struct Item {
  int q_tok0, q_len, k_tok0, k_len, q_begin, rows, first_pos;
  int head;
  detail::KeySet ks;
};

// Item `w` of the list. Dense: w runs over query blocks from the last (heads x batch of them per
// block index). Returns false for a block past its sequence's end (nothing to do).
template <bool kSparse, int kBM = 128>
__device__ __forceinline__ bool GetItem(const AttnParams& p, const SparseIndexView& idx,
                                        const SparseSchedule& sched, int num_m_blocks, int w,
                                        Item& it) {
  int seq, q_block;
  if constexpr (kSparse) {
    const int r = sched.order[w];
    const int slot = r / idx.num_blocks;
    const int blk = r - slot * idx.num_blocks;
    seq = 0;
    while (seq + 1 < p.batch && idx.block_offsets[seq + 1] <= blk) ++seq;
    q_block = blk - idx.block_offsets[seq];
    it.head = idx.heads[slot];
    const int r0 = idx.range_indptr[r];
    it.ks.num_ranges = idx.range_indptr[r + 1] - r0;
    it.ks.range_start = idx.range_start + r0;
    it.ks.range_len = idx.range_len + r0;
    const int c0 = idx.col_indptr[r];
    it.ks.cols = idx.col_idx + c0;
    it.ks.num_cols = idx.col_indptr[r + 1] - c0;
  } else {
    const int per_block = p.num_q_heads * p.batch;
    q_block = num_m_blocks - 1 - w / per_block;
    const int rem = w % per_block;
    seq = rem / p.num_q_heads;
    it.head = rem % p.num_q_heads;
  }
  it.q_tok0 = p.cu_seqlens_q[seq];
  it.q_len = p.cu_seqlens_q[seq + 1] - it.q_tok0;
  it.k_tok0 = p.cu_seqlens_k[seq];
  it.k_len = p.cu_seqlens_k[seq + 1] - it.k_tok0;
  it.q_begin = q_block * kBM;
  if (it.q_begin >= it.q_len) return false;
  it.rows = min(kBM, it.q_len - it.q_begin);
  it.first_pos = it.k_len - it.q_len + it.q_begin;
  if constexpr (!kSparse) {
    it.ks = detail::KeySet();
    it.ks.num_ranges = 1;
    it.ks.dense_end = max(0, p.causal ? min(it.k_len, it.first_pos + it.rows) : it.k_len);
  }
  return true;
}

// The w-th item of CTA `c` among G CTAs in snake order.
__device__ __forceinline__ int SnakeItem(int round, int c, int G) {
  return round * G + ((round & 1) ? G - 1 - c : c);
}

template <class Tr, bool kSparse>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    PersistentFa3Kernel(const AttnParams p, const SparseIndexView idx, const SparseSchedule sched,
                        int num_items, int num_m_blocks, int flags,
                        const __grid_constant__ CUtensorMap tmap_q,
                        const __grid_constant__ CUtensorMap tmap_k,
                        const __grid_constant__ CUtensorMap tmap_v) {
#if SPATTN_SM90A
  using T = typename Tr::T;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStages = Tr::kStages;
  constexpr int kSub = Tr::kSub;
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = smem_raw + ((1024 - (Smem32(smem_raw) & 1023)) & 1023);

  const uint32_t sQ0 = Smem32(smem);
  const uint32_t sK = sQ0 + Tr::kKOff;
  const uint32_t sV = sQ0 + Tr::kVOff;
  const uint32_t bars = sQ0 + Tr::kBarOff;
  constexpr int kQB = Tr::kQBufs;
  auto q_full = [&](int b) { return bars + 8 * b; };
  auto q_empty = [&](int b) { return bars + 8 * (kQB + b); };
  auto k_full = [&](int s) { return bars + 8 * (2 * kQB + s); };
  auto v_full = [&](int s) { return bars + 8 * (2 * kQB + kStages + s); };
  auto k_empty = [&](int s) { return bars + 8 * (2 * kQB + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (2 * kQB + 3 * kStages + s); };

  if (threadIdx.x == 0) {
    for (int b = 0; b < kQB; ++b) {
      MbarInit(q_full(b), 1);
      MbarInit(q_empty(b), 4 * Tr::kConsumerWgs);  // every consumer warp releases
    }
    for (int s = 0; s < kStages; ++s) {
      MbarInit(k_full(s), 128);  // every producer thread arrives (TMA: one with the bytes)
      MbarInit(v_full(s), 128);
      MbarInit(k_empty(s), 4 * Tr::kConsumerWgs);
      MbarInit(v_empty(s), 4 * Tr::kConsumerWgs);
    }
    MbarInitFence();
  }
  __syncthreads();

  const int G = gridDim.x, c = blockIdx.x;
  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;

  if (wg == 0) {
    // ---- producer ----
    RegsDecrease<Tr::kProducerRegs>();
    const bool leader = tid == 0;
    if (leader) {
      PrefetchTensorMap(&tmap_q);
      PrefetchTensorMap(&tmap_k);
      PrefetchTensorMap(&tmap_v);
    }
    int tile = 0;    // tiles issued so far (ring position)
    int n_item = 0;  // items loaded so far (Q buffer)
    const int pwarp = tid / 32, plane = tid % 32;
    // Gathered rows of a column tile, kL lanes per row: warp `pwarp` copies rows
    // pwarp * kWarpRows + [0, kWarpRows), 32 / kL per instruction (lanes plane / kL), each lane
    // the chunks plane % kL + kL m of them; the key numbers come by shuffle from the lane that
    // read them (tile_key).
    constexpr int kWarpRows = Tr::kWarpRows;
    auto gather = [&](const T* base, int64_t tok_stride, uint32_t dst, const Item& it, int n,
                      int key) {
      constexpr int kL = Tr::kLanes;
      constexpr int kRows = 32 / kL, kPer = kD / 8 / kL;
      const int sub = plane % kL;
#pragma unroll 1  // (unrolling the rows spills the producer's 56 registers)
      for (int k = 0; k < kWarpRows / kRows; ++k) {
        const int rw = plane / kL + kRows * k;
        const int kk = __shfl_sync(0xffffffffu, key, rw);
        const int row = pwarp * kWarpRows + rw;
        const bool valid = row < n;
        const T* src = base + static_cast<int64_t>(it.k_tok0 + kk) * tok_stride;
#pragma unroll
        for (int m = 0; m < kPer; ++m) {
          const int ch = sub + kL * m;
          const uint32_t off = (ch / 8) * kBN * 128 + row * 128 + (((ch & 7) ^ (row & 7)) * 16);
          CpAsync16Zfill(dst + off, src + ch * 8, valid);
        }
      }
    };
    // The key number of the column-tile row this thread reads for its warp (one lane per row:
    // its own row), read before the slot is free, so its latency is not paid between the slot's
    // release and the copies.
    const int key_row =
        Tr::kLanes == 1 ? tid : (plane < kWarpRows ? pwarp * kWarpRows + plane : kBN);
    auto tile_key = [&](const Item& it, int kind, int start, int n) {
      return kind == 1 && key_row < n ? __ldg(it.ks.cols + start + key_row) : 0;
    };
    // Loads one K or V tile into ring slot `s`; `key` is tile_key's.
    auto load = [&](const CUtensorMap* map, const T* base, int64_t tok_stride, uint32_t dst,
                    uint32_t full, const Item& it, int kind, int start, int n, int key) {
      if (kind == 0) {
        if (leader) {
          MbarArriveExpectTx(full, Tr::kTileBytes);
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            TmaLoad3d(dst + sub * kBN * 128, map, sub * 64, it.head / p.group, it.k_tok0 + start,
                      full);
          }
        } else {
          MbarArrive(full);
        }
      } else if constexpr (Tr::kLanes > 1) {
        gather(base, tok_stride, dst, it, n, key);
        CpAsyncArriveNoinc(full);
      } else if (tid >= kBN) {
        MbarArrive(full);  // (64-key tiles: the upper producer threads hold no row)
      } else {
        const bool valid = tid < n;
        const T* src = base + static_cast<int64_t>(it.k_tok0 + key) * tok_stride;
#pragma unroll
        for (int ch = 0; ch < kD / 8; ++ch) {
          const uint32_t off = (ch / 8) * kBN * 128 + tid * 128 + (((ch & 7) ^ (tid & 7)) * 16);
          CpAsync16Zfill(dst + off, src + ch * 8, valid);
        }
        CpAsyncArriveNoinc(full);
      }
    };
    for (int round = 0;; ++round) {
      const int w = SnakeItem(round, c, G);
      if (w >= num_items) break;
      Item it;
      if (!GetItem<kSparse, kBM>(p, idx, sched, num_m_blocks, w, it)) continue;
      const int qb = n_item % kQB;
      MbarWait(q_empty(qb), ((n_item / kQB) & 1) ^ 1);
      if (leader) {
        MbarArriveExpectTx(q_full(qb), Tr::kQBytes);
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub) {
          TmaLoad3d(sQ0 + qb * Tr::kQBytes + sub * kBM * 128, &tmap_q, sub * 64, it.head,
                    it.q_tok0 + it.q_begin, q_full(qb));
        }
      }
      ++n_item;
      const T* kbase =
          static_cast<const T*>(p.k) + static_cast<int64_t>(it.head / p.group) * p.k_head_stride;
      const T* vbase =
          static_cast<const T*>(p.v) + static_cast<int64_t>(it.head / p.group) * p.v_head_stride;
      detail::TileCursor<kBN> cursor;
      int kind, start, n;
      int pkind = 0, pstart = 0, pn = 0, pkey = 0;
      bool have_prev = false;
      for (;;) {
        const bool have = cursor.Next(it.ks, kind, start, n);
        const int key = have ? tile_key(it, kind, start, n) : 0;
        if (have) {
          const int s = tile % kStages;
          MbarWait(k_empty(s), ((tile / kStages) & 1) ^ 1);
          load(&tmap_k, kbase, p.k_token_stride, sK + s * Tr::kTileBytes, k_full(s), it, kind,
               start, n, key);
        }
        if (have_prev) {
          const int s = (tile - 1) % kStages;
          MbarWait(v_empty(s), (((tile - 1) / kStages) & 1) ^ 1);
          load(&tmap_v, vbase, p.v_token_stride, sV + s * Tr::kTileBytes, v_full(s), it, pkind,
               pstart, pn, pkey);
        }
        if (!have) break;
        ++tile;
        pkind = kind, pstart = start, pn = n, pkey = key;
        have_prev = true;
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // no thread leaves copies in flight
    return;
  }

  // ---- consumers ----
  RegsIncrease<Tr::kConsumerRegs>();
  const int cw = wg - 1;
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = cw * 64 + warp * 16 + lane / 4;  // + 8 * h
  // Ping-pong turns between the two consumer warpgroups; a lone warpgroup (block_m 64) syncs on
  // its own barrier and arrives on an otherwise unused one (plain warpgroup barriers).
  constexpr bool kPingPong = Tr::kConsumerWgs == 2;
  const int my_turn = kPingPong ? kBarTurn0 + cw : kBarWg0 + cw;
  const int other_turn = kPingPong ? kBarTurn0 + (1 - cw) : kBarTurn0;
  constexpr int kTurnThreads = kPingPong ? 256 : 128;
  const KvRing<kStages, Tr::kTileBytes> ring{sK, sV, k_full(0), v_full(0), k_empty(0), v_empty(0)};
  ConsumerStep<T, kD, kBN, kBM> st(lane);

  if (kPingPong && cw == 1) NamedArrive(kBarTurn0, 256);  // consumer warpgroup 0 goes first
  int tile = 0, n_item = 0;
  for (int round = 0;; ++round) {
    const int w = SnakeItem(round, c, G);
    if (w >= num_items) break;
    Item it;
    if (!GetItem<kSparse, kBM>(p, idx, sched, num_m_blocks, w, it)) continue;
    const int qb = n_item % kQB;
    const int my_first = it.first_pos + cw * 64;

    // A tile of the item's key set; `last`: its last key (column tiles: read as soon as the
    // tile is known, used by the mask after the tile's S is ready, so the load's latency hides
    // under the waits and GEMMs).
    struct Tile {
      int kind, start, n, last;
    };
    detail::TileCursor<kBN> cursor;
    auto next = [&](Tile& d) {
      if (!cursor.Next(it.ks, d.kind, d.start, d.n)) return false;
      d.last = d.kind == 0 ? d.start + d.n - 1 : __ldg(it.ks.cols + d.start + d.n - 1);
      return true;
    };
    // Gathered tiles were written by cp.async: make them visible to wgmma.
    auto after_k = [&](const Tile& d) {
      if (d.kind == 1) detail::FenceProxyAsync();
    };
    // After the V tile landed: a short range tile has other keys past n (zero them, see the
    // header); gathered tiles were written by cp.async (make them visible to wgmma).
    auto prepare_v = [&](int slot, const Tile& d) {
      if (d.kind == 1) {
        detail::FenceProxyAsync();
        return;
      }
      if (d.n >= kBN) return;
      char* vst = smem + Tr::kVOff + slot * Tr::kTileBytes;
      for (int i = tid; i < (kBN - d.n) * kSub * 8; i += 128) {
        const int r = d.n + i / (kSub * 8), cc = i % (kSub * 8);
        *reinterpret_cast<uint4*>(vst + (cc / 8) * kBN * 128 + r * 128 + (cc % 8) * 16) =
            make_uint4(0, 0, 0, 0);
      }
      detail::FenceProxyAsync();
      NamedSync(kBarWg0 + cw, 128);
    };
    // Masks S of a tile: keys past n, causal; column tiles read their key numbers.
    auto mask = [&](decltype(st)& step, const Tile& d) {
      if (d.n == kBN && !(p.causal && d.last > my_first)) return;
      step.Mask(
          [&](int col) {
            if (col >= d.n) return 0x7fffffff;
            return d.kind == 0 ? d.start + col : __ldg(it.ks.cols + d.start + col);
          },
          [&](int col, int key, int h) {
            const int pos = it.first_pos + row0 + 8 * h;
            return col < d.n && (!p.causal || key <= pos);
          });
    };

    st.Reset();
    MbarWait(q_full(qb), (n_item / kQB) & 1);
    ++n_item;
    RunKeyTiles<Tile>(st, ring, tile, sQ0 + qb * Tr::kQBytes + cw * 64 * 128, my_turn, other_turn,
                      lane, p.scale_log2, next, after_k, prepare_v, mask, kTurnThreads);

    // Epilogue: the warp's rows through its Q rows to 16-byte stores; then the Q buffer goes
    // back to the producer.
    const int64_t row_tok = it.q_tok0 + it.q_begin;
    T* o_block = static_cast<T*>(p.o) + static_cast<int64_t>(it.head) * p.o_head_stride +
                 row_tok * p.o_token_stride;
    float* lse_block = p.maybe_lse == nullptr
                           ? nullptr
                           : p.maybe_lse + static_cast<int64_t>(it.head) * p.total_q + row_tok;
    st.Store(smem + qb * Tr::kQBytes, cw * 64 + warp * 16, lane, it.rows, p.scale_log2, o_block,
             p.o_token_stride, lse_block);
    __syncwarp();
    if (lane == 0) MbarArrive(q_empty(qb));
  }
  if (kPingPong && cw == 0) NamedSync(my_turn, 256);  // balances warpgroup 1's first "your turn"
#endif                                                // SPATTN_SM90A
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_
