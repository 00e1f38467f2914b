// Persistent warp-specialized attention for Hopper (sm_90a): the mainloop of dense_fa3.cuh over
// a work list, for the sparse kernel (index rows: ranges and gathered columns) and for a
// persistent dense kernel.
//
// Grid: one CTA per SM (block_m 64: two), at most one per item. Items are taken from a list
// ordered costliest first (the sparse schedule; for dense: query blocks from the last, the longest
// causal rows, to the first). CTA c takes item c first; the sparse kernel with descriptors then
// takes the list's next item from the schedule's counter whenever it starts one (kFlagDynamic:
// a greedy balance of the real costs); the dense persistent kernel, the kernel without
// descriptors and SPATTN_HOPPER_DYNAMIC=0 take items c, 2G - 1 - c, 2G + c, ... (snake order: a
// greedy balance of the estimated costs without a shared counter). The producer walks the items and
// their key tiles and hands each item's and each tile's description to the consumers in shared
// memory (ItemDesc next to the Q buffer, TileDesc next to the K slot; PersistTraits::kDesc); the
// consumers run all tiles of all their items as one stream (ConsumerStream: the next item's first
// S issued with the current item's last P V, the epilogue under it). SPATTN_HOPPER_ITEMS=1 / 0
// (d = 128) keep the per-item loop through RunKeyTiles with / without descriptors.
//
// Per item the producer warpgroup loads the Q block (kBM rows) by TMA into one of two Q buffers
// (the other may still hold the previous item's Q / staged output), then the item's key tiles
// (kBN = kBM keys):
//  * range tiles (up to kBN consecutive keys): TMA, by one thread (the others just arrive);
//  * column tiles (up to kBN gathered keys): producer warp w copies rows [w, w + 1) * kBN / 4,
//    kLanes lanes per key row (each lane kLanes-strided 16-byte chunks), with cp.async; every
//    producer thread arrives on the slot's barrier when its copies land
//    (cp.async.mbarrier.arrive.noinc); rows past the tile's keys are zero-filled.
// The consumers use consumer_step.cuh's step (ConsumerStream here, RunKeyTiles in dense_fa3.cuh
// and with kItems < 2): S(t+1) and P(t)V issued together, ping-pong between the two warpgroups
// (block_m 64: a lone warpgroup per CTA; the two CTAs of an SM interleave). Range tiles shorter
// than kBN keys have their V rows past the range zeroed by the consumers (those rows hold keys the
// row does not attend; NaN/Inf there must not leak).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_

#include <type_traits>

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

// Like CpAsyncArriveNoinc, but the pending count is raised first, so the asynchronous arrive is
// not one of the expected arrivals (the thread arrives itself as well, with release semantics).
__device__ __forceinline__ void CpAsyncArriveInc(uint32_t bar) {
#if SPATTN_SM90A
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Whether the phase of parity `parity` of `bar` has completed, without waiting (acquire, as a
// completed MbarWait).
__device__ __forceinline__ bool MbarTest(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
#if SPATTN_SM90A
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

__device__ __forceinline__ void CpAsync16Zfill(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}

// kBM_ = 128: two consumer warpgroups of 64 rows (ping-pong), 128-key tiles, one CTA per SM.
// kBM_ = 64 (block_m 64 indexes): one consumer warpgroup, 64-key tiles, two CTAs per SM (their
// warpgroups take turns on the tensor cores as the hardware schedules them).
template <typename T_, int kD_, int kStages_, int kQBufs_ = 2, int kLanes_ = 4, int kBM_ = 128,
          int kItems_ = 2, int kKStages_ = 0, bool kPair_ = false>
struct PersistTraits {
  using T = T_;
  // kPair (block_m 64, d 128, the stream; SPATTN_HOPPER_PAIR_STEP=1, session 36): the consumer
  // takes two consecutive 64-key tiles of one item as one 128-key step (ConsumerStreamPair). The
  // two K slots are interleaved as one 128-key K tile of the 128-row layout (each 64-column
  // sub-tile holds slot 0's rows then slot 1's), so S of the pair is one m64n128 wgmma chain
  // (m64n64 chains into halves of S make ptxas serialize the kernel's wgmmas: C7511). The
  // producer issues V two positions behind K (K(u), then V(u - 2)): a step holds both K and both
  // V slots, and with V one behind its next K tiles and V tiles all waited for the step's P V
  // (session 36 run 1: 13-16 % slower at 32K; with V two behind, each step's P V as two commit
  // groups and the pair's second V waited for under the step's S: 2-3 % faster, run 2).
  static constexpr bool kPair = kPair_;
  static constexpr int kD = kD_;
  // Ring slots: kStages V slots and kKStages K slots (kKStages_ 0: kStages). The sparse stream
  // (kCross, block_m 128, d 128) may run 3 K slots beside 2 V slots and two Q buffers
  // (2 x 32 + 3 x 32 + 2 x 32 = 224 KB; session 30, s30-ring): K(t + 2) streams while tile t
  // computes. Its slot of the tile descriptors and packed key lists is the K slot.
  static constexpr int kStages = kStages_;
  static constexpr int kKStages = kKStages_ > 0 ? kKStages_ : kStages_;
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
  static constexpr int kVOff = kKOff + kKStages * kTileBytes;
  static constexpr int kBarOff = kVOff + kStages * kTileBytes;
  // q_full[Q], q_empty[Q], k_full[KS], v_full[S], k_empty[KS], v_empty[S]
  static constexpr int kNumBars = 2 * kQBufs + 2 * kKStages + 2 * kStages;
  // Descriptors (kDesc): the producer's leader writes each item's description next to its Q
  // buffer (ItemDesc, before q_full's arrive) and each key tile's next to its K slot (TileDesc,
  // before k_full's arrive), so the consumers read them from shared memory after the waits they
  // do anyway instead of walking the index in global memory themselves (session 17: that walk --
  // the schedule entry, the row's offsets, then its ranges -- is a chain of dependent loads at
  // the start of every item, on the consumers' critical path). Without: the consumers walk the
  // index like the producer (the session-16 kernel; kItems 0).
  // kItems: 0 no descriptors; 1 descriptors, an item's tiles through RunKeyTiles; 2 (with two Q
  // buffers) the consumers run all their items' tiles as one stream (kCross): the next item's
  // first S is issued with the current item's last P V, the current item's epilogue runs under
  // it, and tiles of at most kBN / 2 keys (or whose upper half lies past all of a warpgroup's
  // rows, causal) run their P V over half the keys (kBN 128 only); items without tiles are written
  // by the producer (zeros, LSE -inf) and never reach the consumers.
  static constexpr bool kDesc = kItems_ >= 1;
  static constexpr bool kCross = kItems_ == 2 && kQBufs_ == 2;
  static constexpr bool kHalfTiles = kCross && kBM_ == 128;
  static constexpr int kItemDescOff = kBarOff + kNumBars * 8;
  static constexpr int kTileDescOff = kItemDescOff + kQBufs * 32;
  // Packed tiles (kCross, PersistentFa3Kernel's kFlagPackTails): the key numbers of a tile that
  // holds range tails, next to its slot (written by the producer threads that copy its rows).
  static constexpr int kTileKeysOff = kTileDescOff + kKStages * 16;
  // Dynamic work list (kFlagDynamic): the producer's leader hands the item it took from the
  // counter to the other producer threads here (two slots, alternating by round).
  static constexpr int kNextItemOff = kTileKeysOff + kKStages * kBN * 4;
  // kPair with 3 V slots (SPATTN_HOPPER_PAIR_STEP=2, s38-sparse): 115424 B of slots, bars and
  // descriptors fit two CTAs an SM (115712 B each) only without the 1024-B alignment slack; the
  // kernel then traps unless the dynamic shared base is 1024-aligned (on sm_90 it follows the
  // 1 KB system reservation, so it is; PersistentFa3Body checks it).
  static constexpr bool kNoSlack = kPair_ && kStages_ == 3;
  static constexpr int kSmemBytes = kNextItemOff + 16 + (kNoSlack ? 0 : 1024);
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = kBM == 128 ? 224 : 200;
  static_assert(kSmemBytes * kMinBlocks <= 227 * 1024, "shared memory");
  static_assert(!kPair || (kBM == 64 && kD == 128 && (kStages == 2 || kStages == 3) &&
                           kKStages == 2 &&
                           kItems_ == 2 && kQBufs_ == 2),
                "pair step: the block_m 64 stream with 2 K + 2 V slots");
  // A K slot's base and the stride of its 64-column sub-tiles (kPair: interleaved).
  static constexpr int kKSlotBytes = kPair ? kBN * 128 : kTileBytes;
  static constexpr int kKSubBytes = kPair ? 2 * kBN * 128 : kBN * 128;
  // setmaxnreg only moves registers within the CTA's launch allocation (168 x 384 = 64512 for
  // one CTA of 384 threads per SM, 128 x 256 for two of 256); 32 / 240 (65536) deadlocks in the
  // increase (run 3 of NOTES.md).
  static constexpr int kLaunchRegs = (65536 / (kThreads * kMinBlocks)) / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumerWgs * kConsumerRegs <= kLaunchRegs * kThreads,
                "register budget");
};

// Flags of PersistentFa3Kernel.
// kFlagPackTails (sparse, kCross): each range's whole kBN-key tiles, aligned to the range's
// end, are range tiles as before, but its first len % kBN keys (the "tail" of the tiling) are
// not: they join the item's columns in gathered tiles (PackedCursor), so a row of ranges of
// 65..127 keys (merged slash lines of sampled_lines, whose ranges are mostly 1-4 tiles long) no
// longer pays a whole tile for each remainder (session 18, run 1: a third of sampled_lines'
// tiles were partial). Aligned to the end, the local window's last tile stays the diagonal one
// (range tile, half P V for warpgroup 0) and the keys that go to the gathered tiles are the
// ones every row of the block sees.
// kFlagPackTails alone: per item, only where the packed tiles are fewer (PackedCursor;
// SPATTN_HOPPER_PACK_TAILS=1); with kFlagPackAlways, every item with tails (=2, the default:
// session 18, run 2).
// kFlagPackTails | kFlagPackTies (SPATTN_HOPPER_PACK_TAILS=3): also where packing gives as many
// tiles as the plain tiling, if the item has columns (its tails then fill gathered tiles that
// are loaded anyway; session 22, run 1: =1 ran 32K block_m 128 synthetic ranges -- no columns
// -- 7-10% above =2, sampled_lines -- ranges and columns -- 3-4% below).
constexpr int kFlagPackTails = 1;
constexpr int kFlagPackAlways = 2;
constexpr int kFlagPackTies = 8;
// kFlagDynamic (sparse, kDesc): after its first item (item c, as in the snake order) a CTA takes
// its items from the schedule's counter (SparseSchedule::counter, zero at the launch), in list
// order, one atomicAdd per item by the producer's leader, issued when the CTA starts its
// current item so the round trip hides under that item's loads; the item number goes to the
// other producer threads through shared memory (kNextItemOff) and a named barrier of the
// producer warpgroup, to the consumers in ItemDesc as before. So a CTA takes a new item when it
// is ready for one: the list's real costs are balanced, not the estimated ones the snake order
// balances (session 20, run 2: the snake left sampled_lines' launches 11-12% idle at the end,
// SM-active cycles 2.2M-2.7M across SMs). The CTA whose fetch is the list's last (the counter
// reads num_items - 1: every CTA fetches until it gets one past the list, G of those in all)
// puts the counter back to zero for the next launch.
constexpr int kFlagDynamic = 4;
// kFlagSleepProducer / kFlagSleepConsumers (the sparse stream; SPATTN_HOPPER_SLEEP_WAITS bit 0 /
// bit 1, default 3): the producer's / the consumers' mbarrier waits sleep in each try
// (MbarWaitSleep) instead of returning after the short default limit and looping.
constexpr int kFlagSleepProducer = 16;
constexpr int kFlagSleepConsumers = 32;
// kFlagTmaStore (the sparse stream; SPATTN_HOPPER_TMA_STORE, default 1): an item's epilogue
// stages each warp's 16 rows of O in the Q buffer as before, then lane 0 stores them by TMA
// (tmap_o, boxes of 16 rows) instead of the warp's 8 rounds of ld.shared + st.global per lane;
// the Q buffer goes back to the producer one step later (once the next tile's P V is done and
// the store has read it: StoreItemTma). Batch 1 only (the TMA clips the last block's rows
// past the tensor's end; in a varlen batch they would be the next sequence's).
constexpr int kFlagTmaStore = 64;
// Bits 8-15 (the sparse stream): the stale row maximum's bound + 1 (ConsumerStep::SoftmaxStale;
// SPATTN_HOPPER_STALE_MAX, default 8; -1 rescales every tile as ConsumerStep::Softmax does).
constexpr int kStaleMaxShift = 8;
// Named barrier of the producer warpgroup (kFlagDynamic): ids 1-7 are the consumers'.
constexpr int kBarProducer = 8;
// kFlagEarlyDesc (the sparse stream; SPATTN_HOPPER_EARLY_DESC=1, default 0): a consumer warp reads
// the next tile's descriptor of the same item (TileDesc, the tile's largest key, its half / mask
// facts) right after issuing the current tile's GEMMs, while S(t) is on the tensor cores, where
// K(t + 1) has landed by then (a non-blocking test of its k_full phase; otherwise at the next
// step's start, as without the flag). Session 32 (s32-sparse): ncu put ~530 consumer-warp cycles
// per 128-key tile in the step's start (K wait, the descriptor's shared load and its dependent
// uniform-register chain, the V wait), against ~240 per 176-key tile in the dense kernel, on
// the chain from one P V's end to the next GEMMs' issue. Measured (H200, in one process): range
// indexes +1.4-2.1 % at 32K, +1.6-6 % at 128K; gathered columns and sampled_lines -1.8 % at 32K
// (likely the gathered tile's FenceProxyAsync, now issued while this warp's wgmmas are in
// flight); so off by default. The tile period is set elsewhere: NOTES.md s32-sparse.
constexpr int kFlagEarlyDesc = 1 << 16;
// With kFlagEarlyDesc, range tiles only (SPATTN_HOPPER_EARLY_DESC=2; session 33): a gathered
// tile's proxy fence and last-key load stay at the step's start, where none of this warp's
// wgmmas is in flight (s32's guess at why gathered columns lost under =1).
constexpr int kFlagEarlyDescRanges = 1 << 19;

// The producer's walk over an item's key set with kFlagPackTails: first every range's whole
// kBN-key tiles (kind 0, ending at the range's end), then gathered tiles (kind 1) over the list
// cols ++ tails, tails being each range's first len % kBN keys in range order. `mixed`: the tile
// holds tail keys (its key numbers go to shared memory for the consumers' mask; without tails a
// gathered tile is a plain column tile and the consumers read its keys from cols as before).
// Without the flag, and with kFlagPackTails alone for an item where packing saves no tile:
// TileCursor (start-aligned tiles, the partial tile of a range at its end). kFlagPackTails alone
// decides before the item's first tile, from one pass over its range lengths (session 19 decided
// after the whole tiles, so an unpacked item ran the end-aligned tiling with its tails as extra
// partial tiles at the range starts: a sink + window row masked three tiles instead of two, and
// 32K block_m 128 sink + window rows ran 5% below the start-aligned tiling, run s19s-1).
// kStream: the sparse kernel of the stream (the flags apply; one walk, start-aligned or packed,
// over shared state: the producer runs on 56 registers, and a TileCursor beside this state plus
// an unrolled decision pass spilled 36-64 bytes there, 0.5-0.7x on every sparse cell, run
// s20s-1). Otherwise TileCursor (the dense persistent kernel's code as before).
template <int kBN, bool kStream>
struct PackedCursor {
  int e = 0, off = 0;  // ranges: the next tile
  int tails = 0;       // packing: tail keys of the ranges walked so far
  int v = 0;           // gathered list: the next position
  // 0 plain (TileCursor's tiling), 1 packing, -1 kFlagPackTails undecided (-2 with
  // kFlagPackTies)
  int mode = 0;
  detail::TileCursor<kBN> plain;
  __device__ __forceinline__ void Init(int flags) {
    mode = (flags & kFlagPackAlways) != 0  ? 1
           : (flags & kFlagPackTails) == 0 ? 0
           : (flags & kFlagPackTies) != 0  ? -2
                                           : -1;
  }
  __device__ __forceinline__ bool Next(const detail::KeySet& ks, int& kind, int& start, int& n,
                                       bool& mixed) {
    mixed = false;
    if constexpr (!kStream) {
      return plain.Next(ks, kind, start, n);
    } else {
      if (mode < 0) {
        // Packed only where it saves tiles (a gathered tile costs more than a range tile of as
        // many keys; a sink + window row packs two tails into two tiles, no gain). The same
        // rule as the schedule's cost (CostKernel of dispatch.cu, pack_tails 1).
        int t = 0, part = 0;
#pragma unroll 1
        for (int i = 0; i < ks.num_ranges; ++i) {
          const int tail = __ldg(ks.range_len + i) % kBN;
          t += tail;
          part += tail > 0 ? 1 : 0;
        }
        const int c = ks.num_cols;
        const int packed = (c + t + kBN - 1) / kBN, plain_tiles = (c + kBN - 1) / kBN + part;
        mode = packed < plain_tiles || (mode == -2 && c > 0 && packed == plain_tiles) ? 1 : 0;
      }
      while (e < ks.num_ranges) {
        const int rs = __ldg(ks.range_start + e), rl = __ldg(ks.range_len + e);
        // Packing: whole tiles aligned to the range's end; plain: from its start, the last one
        // partial.
        const int whole = mode != 0 ? rl / kBN * kBN : rl;
        if (off < whole) {
          kind = 0;
          start = rs + (rl - whole) + off;
          n = min(kBN, whole - off);
          off += kBN;
          return true;
        }
        tails += rl - whole;
        ++e;
        off = 0;
      }
      const int total = ks.num_cols + tails;
      if (v >= total) return false;
      kind = 1;
      start = v;
      n = min(kBN, total - v);
      mixed = v + n > ks.num_cols;
      v += n;
      return true;
    }
  }
};

// A producer thread's key of gathered-list position `pos` (cols ++ tails, PackedCursor): the
// positions one thread asks for only grow, so it walks the ranges once per item (te: the range
// whose tail holds `tbase`, the list position of that tail's first key).
template <int kBN>
struct TailKeys {
  int te = 0, tbase = 0;
  __device__ __forceinline__ int Key(const detail::KeySet& ks, int pos) {
    if (pos < ks.num_cols) return __ldg(ks.cols + pos);
    const int t = pos - ks.num_cols;
    for (;;) {
      const int rl = __ldg(ks.range_len + te);
      const int tail = rl % kBN;
      if (t < tbase + tail) return __ldg(ks.range_start + te) + (t - tbase);
      tbase += tail;
      ++te;
    }
  }
};

// One work item: a query block (kBM rows) of one head and its keys.
struct Item {
  int q_tok0, q_len, k_tok0, k_len, q_begin, rows, first_pos;
  int head;
  // The schedule's record says the row has keys (SparseSchedule::items), so it has a tile:
  // the producer issues its Q before walking to its first tile.
  bool keys;
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
    int blk, r0, c0;
    if (sched.items != nullptr) {
      // The schedule's record of list position w: one dependent read, not three.
      const int4* rec = reinterpret_cast<const int4*>(sched.items) + 2 * w;
      const int4 a = __ldg(rec), b = __ldg(rec + 1);
      r0 = a.y;
      it.ks.num_ranges = a.z;
      c0 = a.w;
      it.ks.num_cols = b.x;
      it.head = b.y;
      blk = b.z;
      it.keys = b.w != 0;
    } else {
      it.keys = false;
      const int r = sched.order[w];
      const int slot = r / idx.num_blocks;
      blk = r - slot * idx.num_blocks;
      it.head = idx.heads[slot];
      r0 = idx.range_indptr[r];
      it.ks.num_ranges = idx.range_indptr[r + 1] - r0;
      c0 = idx.col_indptr[r];
      it.ks.num_cols = idx.col_indptr[r + 1] - c0;
    }
    seq = 0;
    while (seq + 1 < p.batch && idx.block_offsets[seq + 1] <= blk) ++seq;
    q_block = blk - idx.block_offsets[seq];
    it.ks.range_start = idx.range_start + r0;
    it.ks.range_len = idx.range_len + r0;
    it.ks.cols = idx.col_idx + c0;
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

// An item as the consumers need it (kDesc: written by the producer's leader next to the item's
// Q buffer). `tiles`: whether the item has any key tile; `end`: no more items for this CTA.
struct ItemDesc {
  const int32_t* cols;
  int q_tok0, q_begin, rows, first_pos, head;
  int flags;  // 1: tiles, 2: end; the sparse stream (kCross): + (number of columns << 2)
};
// A key tile as the consumers need it (kDesc: next to its K slot): kind (0 range, 1 columns) |
// 2 if another tile of the same item follows | 4 if it holds range tails (kFlagPackTails: its
// key numbers lie at kTileKeysOff); keys [start, start + n) or cols[start, start + n);
// last: start + n - 1 (range tiles' last key).
struct TileDesc {
  int kind_more, start, n, last;
};
static_assert(sizeof(ItemDesc) == 32 && sizeof(TileDesc) == 16, "descriptor slots");

// ---- Timeline diagnostic (SPATTN_HOPPER_TRACE; a traced kernel instance, Traced<Tr>) ----------
// The traced instance stamps clock64() at an item's steps into a debug buffer, a record of
// kTraceWords 64-bit words per (CTA, item ordinal of the CTA), written by thread 0 of consumer
// warpgroup 0: its own stamps (kTrC*) and the producer's leader's (kTrP*: the low 32 bits of
// clock64, through shared memory; TraceP). The default instances compile
// none of it (TraceOn<Tr> is false for PersistTraits). dense_fa3.cu's host side sets
// g_sparse_trace before a traced launch and writes the records as JSON lines.
struct TraceBuf {
  unsigned long long* buf;
  int cap;  // records per CTA
};
static __device__ TraceBuf g_sparse_trace;
constexpr int kTraceWords = 20;
enum TraceField {
  kTrMeta = 0,      // item w | smid << 32
  kTrPRound = 1,    // producer: round start (before the item's number is known)
  kTrPItem = 2,     // producer: item looked up (GetItem) and its first tile found
  kTrPQ = 3,        // producer: Q load issued
  kTrPK0 = 4,       // producer: first K tile's load issued
  kTrPEnd = 5,      // producer: last V tile's load issued
  kTrGlobal = 6,    // consumer: %globaltimer (ns) at kTrCQ
  kTrCWait = 7,     // consumer: starts waiting for the item (its Q)
  kTrCQ = 8,        // consumer: Q landed, descriptor read
  kTrCK0 = 9,       // consumer: first K tile landed
  kTrCQk = 10,      // consumer: first S issued (with the previous item's last P V)
  kTrCPvDone = 11,  // consumer: last P V done
  kTrCEpi = 12,     // consumer: epilogue stored
  kTrCKWait = 13,   // consumer: cycles in K waits of the item's later tiles
  kTrCVWait = 14,   // consumer: cycles in V waits
  kTrCTurn = 15,    // consumer: cycles in ping-pong turn waits
  kTrCTiles = 16,   // consumer: the item's key tiles
};
template <class Tr, class = void>
struct TraceOn : std::false_type {};
template <class Tr>
struct TraceOn<Tr, std::void_t<decltype(Tr::kTrace)>> : std::integral_constant<bool, Tr::kTrace> {
};
// The producer's stamps (the low 32 bits of clock64) go to a ring of 4 items x 8 words in
// shared memory (kTraceOff) and thread 0 of consumer warpgroup 0 copies an item's into its
// record two items later (the producer is never 4 items ahead of it: an item's Q waits for the
// epilogue two items before): with the record's address arithmetic in the producer its 56
// registers spilled 190-250 bytes.
template <class Tr>
struct Traced : Tr {
  static constexpr bool kTrace = true;
  static constexpr int kTraceOff = Tr::kNextItemOff + 16;
  static constexpr int kSmemBytes = Tr::kSmemBytes + 4 * 8 * 4;
  static_assert(kSmemBytes * Tr::kMinBlocks <= 227 * 1024, "shared memory");
};
enum TraceProducerWord { kTpW = 0, kTpRound, kTpItem, kTpQ, kTpK0, kTpEnd };
template <class Tr>
__device__ __forceinline__ void TraceP(char* smem, int n_item, int word, unsigned v) {
  if constexpr (TraceOn<Tr>::value) {
    reinterpret_cast<volatile unsigned*>(smem + Tr::kTraceOff)[(n_item & 3) * 8 + word] = v;
  }
}
__device__ __forceinline__ unsigned long long TraceClock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ unsigned long long TraceGlobal() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ void TraceSet(int n_item, int field, unsigned long long v) {
  const TraceBuf t = g_sparse_trace;
  if (t.buf == nullptr || n_item < 0 || n_item >= t.cap) return;
  t.buf[(static_cast<long long>(blockIdx.x) * t.cap + n_item) * kTraceWords + field] = v;
}

// The w-th item of CTA `c` among G CTAs in snake order.
__device__ __forceinline__ int SnakeItem(int round, int c, int G) {
  return round * G + ((round & 1) ? G - 1 - c : c);
}

// After V of a tile landed in ring slot `slot`, before its P V (consumer warpgroup cw, thread
// tid of it): a range tile (kind 0) with n < end keys has other keys in V rows [n, end), the
// rows its P V reads (end: kBN, or kBN / 2 for a half-key P V): they are zeroed (NaN/Inf there
// must not leak through P = 0); gathered tiles (kind 1) were written by cp.async, zero-filled
// past n: made visible to wgmma.
template <class Tr>
__device__ __forceinline__ void PrepareV(char* smem, int slot, int kind, int n, int end, int tid,
                                         int cw) {
  constexpr int kBN = Tr::kBN, kSub = Tr::kSub;
  if (kind == 1) {
    detail::FenceProxyAsync();
    return;
  }
  if (n >= end) return;
  char* vst = smem + Tr::kVOff + slot * Tr::kTileBytes;
  for (int i = tid; i < (end - n) * kSub * 8; i += 128) {
    const int r = n + i / (kSub * 8), cc = i % (kSub * 8);
    *reinterpret_cast<uint4*>(vst + (cc / 8) * kBN * 128 + r * 128 + (cc % 8) * 16) =
        make_uint4(0, 0, 0, 0);
  }
  detail::FenceProxyAsync();
  NamedSync(kBarWg0 + cw, 128);
}

// An item's epilogue (consumer warpgroup cw): the warp's rows, normalized, through the item's Q
// buffer qb (its Q is no longer read) to 16-byte stores of O, and LSE; then the Q buffer goes
// back to the producer (q_empty: its barrier; every consumer warp arrives).
template <class Tr, class Step>
__device__ __forceinline__ void StoreItem(Step& st, char* smem, const AttnParams& p,
                                          const ItemDesc& x, int qb, int cw, int warp, int lane,
                                          uint32_t q_empty) {
  using T = typename Tr::T;
  const int64_t row_tok = x.q_tok0 + x.q_begin;
  T* o_block = static_cast<T*>(p.o) + static_cast<int64_t>(x.head) * p.o_head_stride +
               row_tok * p.o_token_stride;
  float* lse_block = p.maybe_lse == nullptr
                         ? nullptr
                         : p.maybe_lse + static_cast<int64_t>(x.head) * p.total_q + row_tok;
  st.Store(smem + qb * Tr::kQBytes, cw * 64 + warp * 16, lane, x.rows, p.scale_log2, o_block,
           p.o_token_stride, lse_block);
  __syncwarp();
  if (lane == 0) MbarArrive(q_empty);
}

// The sparse stream's epilogue with kFlagTmaStore: normalize and stage the warp's rows in the Q
// buffer (ConsumerStep::Stage, the LSE written there), then lane 0 stores them by TMA (one
// 16-row box per 64 columns); the Q buffer's release waits (the caller arrives on q_empty after
// BulkWaitRead, a step later). Rows past the item's end lie past the tensor's (the launch sets
// the flag for batch 1 only), so the TMA clips them. (A fallback to StoreItem's 16-byte stores
// for a warp with rows past the item -- the last block of a sequence in a varlen batch --
// spilled 74-102 bytes of the consumers' 224 registers at block_m 128, however placed.)
template <class Tr, class Step>
__device__ __forceinline__ void StoreItemTma(Step& st, char* smem, const AttnParams& p,
                                             const ItemDesc& x, int qb, int cw, int warp,
                                             int lane, const CUtensorMap* tmap_o) {
  const int64_t row_tok = x.q_tok0 + x.q_begin;
  float* lse_block = p.maybe_lse == nullptr
                         ? nullptr
                         : p.maybe_lse + static_cast<int64_t>(x.head) * p.total_q + row_tok;
  const int warp_row0 = cw * 64 + warp * 16;
  char* sq = smem + qb * Tr::kQBytes;
  st.Stage(sq, warp_row0, lane, x.rows, p.scale_log2, lse_block);
  detail::FenceProxyAsync();  // (each writer: its rows, visible to the TMA's reads)
  __syncwarp();
  if (lane == 0) {
    const uint32_t src = Smem32(sq) + warp_row0 * 128;
#pragma unroll
    for (int sub = 0; sub < Tr::kSub; ++sub) {
      TmaStore3d(tmap_o, src + sub * Tr::kBM * 128, sub * 64, x.head,
                 static_cast<int>(row_tok) + warp_row0);
    }
    BulkCommit();
  }
}

// The stream's wgmma operands by descriptor (kCross): a tile's descriptor is built once from
// its slot's address (detail::SmemDesc) and each 16-deep step adds its byte offset / 16 to the
// low word -- the address field, which never carries into the next field (shared addresses are
// below 2^18) -- where ConsumerStep rebuilds all 16 descriptors of a tile step from addresses
// (AND, shift, OR, uniform moves: ~5 instructions each; session 21 run 1's stall profile counted
// 864 consumer instructions per warp and 128-key tile at block_m 128, ~200 of them per-tile
// bookkeeping, and the consumers issue-bound).
__device__ __forceinline__ uint64_t DescPlus(uint64_t desc, uint32_t off_bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (off_bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// S = Q K^T (ConsumerStep::IssueQk) from the Q rows' and the K tile's descriptors.
template <class Tr, class Step>
__device__ __forceinline__ void IssueQkDesc(Step& st, uint64_t q_desc, uint64_t k_desc) {
  using T = typename Tr::T;
  st.FenceS();
  detail::WgmmaFence();
#pragma unroll
  for (int ks = 0; ks < Tr::kD / 16; ++ks) {
    const uint32_t koff = (ks % 4) * 32;
    detail::Wgmma<T, Tr::kBN>::SS(st.s, DescPlus(q_desc, (ks / 4) * Tr::kBM * 128 + koff),
                                  DescPlus(k_desc, (ks / 4) * Tr::kBN * 128 + koff),
                                  ks > 0 ? 1 : 0);
  }
  detail::WgmmaCommit();
}

// O += P V (ConsumerStep::IssuePv) over the tile's first kGroups 16-key groups, from the V
// tile's descriptor. kGroups = kBN / 32 on a 128-key tile whose keys past 64 all count for
// nothing to this warpgroup (their P is 0): the half-key P V. (S of the first 64 keys alone, by
// m64n64 wgmmas into the same registers, made ptxas serialize every wgmma of the kernel for want
// of registers: C7511.)
template <class Tr, int kGroups, class Step>
__device__ __forceinline__ void IssuePvDesc(Step& st, uint64_t v_desc) {
  using T = typename Tr::T;
#pragma unroll
  for (int kk = 0; kk < kGroups; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) detail::FenceReg(st.pa[kk][e]);
  }
  st.FenceAcc();
  detail::WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < kGroups; ++kk) {
    detail::Wgmma<T, Tr::kD>::RS(st.acc, st.pa[kk], DescPlus(v_desc, kk * 16 * 128));
  }
  detail::WgmmaCommit();
}

// The stream's masks (kCross), specialized by tile kind: ConsumerStep::Mask's key-and-compare per
// element (a key per column, two compares and a select per element, and the kind chosen per
// column) cost ~410 instructions per masked 128-key tile (session 21, run 1: 30% of the tiles
// at low density), and these ~130 (range tiles) and ~190 (gathered tiles). The thread's
// columns are 8 nt + 2 t4 + j, so with the limits shifted by 2 t4 each compare is against an
// immediate.
// Range tile (keys start + col for tile columns col < n): row h keeps its columns below
// lim_h = min(n, pos_h - start + 1) (causal) or n.
template <int kBN, class Step>
__device__ __forceinline__ void MaskRangeTile(Step& st, int lim0, int lim1) {
  const int l0 = lim0 - 2 * st.t4, l1 = lim1 - 2 * st.t4;
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float& a = st.s[nt * 4 + j];
      float& b = st.s[nt * 4 + 2 + j];
      a = nt * 8 + j < l0 ? a : detail::kNegInf;
      b = nt * 8 + j < l1 ? b : detail::kNegInf;
    }
  }
}

// Gathered tile (column tile or packed tails): column col holds key key_at(col) for col < n;
// row h keeps the keys <= q_h (its position, causal; 0x7ffffffe otherwise).
template <int kBN, class Step, class KeyAt>
__device__ __forceinline__ void MaskKeyTile(Step& st, int n, int q0, int q1, KeyAt key_at) {
  const int nl = n - 2 * st.t4;
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int key = nt * 8 + j < nl ? key_at(nt * 8 + 2 * st.t4 + j) : 0x7fffffff;
      float& a = st.s[nt * 4 + j];
      float& b = st.s[nt * 4 + 2 + j];
      a = key <= q0 ? a : detail::kNegInf;
      b = key <= q1 ? b : detail::kNegInf;
    }
  }
}

// The consumers' loop with kCross (PersistTraits): every tile of every item of this CTA as one
// stream through the ping-pong step of RunKeyTiles (consumer_step.cuh; S(t) and P(t-1) V issued
// together), where t and t - 1 may belong to different items. At an item change the old item's
// P V runs with the new item's first S; the old row state (m, l) is set aside for the new
// item's softmax, and the old item's epilogue (normalize, stage in its Q buffer, store) runs
// once that P V is done, before the new item's first P V. Items and tiles come from the
// producer's descriptors (ItemDesc, TileDesc).
template <class Tr, bool kSparse, class Step, class Ring>
__device__ __forceinline__ void ConsumerStream(Step& st, char* smem, const AttnParams& p, int cw,
                                               int tid, int lane, int my_turn, int other_turn,
                                               int turn_threads, const Ring& ring, uint32_t q_full0,
                                               uint32_t q_empty0, int flags,
                                               const CUtensorMap* tmap_o) {
  using T = typename Tr::T;
  constexpr int kBN = Tr::kBN, kQB = Tr::kQBufs;
  const uint32_t sQ0 = Smem32(smem);
  const int warp = tid / 32;
  const int row0 = cw * 64 + warp * 16 + lane / 4;  // + 8 * h
  struct Tile {
    int kind, start, n, last, slot;
    bool half, mixed;
  };
  // The sparse kernel's waits sleep in each try (MbarWaitSleep); the dense persistent kernel's
  // as before.
  const bool sleep = kSparse && (flags & kFlagSleepConsumers) != 0;
  auto wait = [&](uint32_t bar, uint32_t parity) {
    if (sleep) {
      MbarWaitSleep(bar, parity);
    } else {
      MbarWait(bar, parity);
    }
  };
  const float stale = static_cast<float>((flags >> kStaleMaxShift) & 0xff) - 1.f;
  int tile = 0, n_item = 0;
  ItemDesc cur;       // the item of the newest tile
  int cur_qb = 0;     // its Q buffer
  bool more = false;  // another tile of `cur` follows
  auto next_item = [&]() {
    const int qb = n_item % kQB;
    wait(q_full0 + 8 * qb, (n_item / kQB) & 1);
    const ItemDesc x = *(reinterpret_cast<const ItemDesc*>(smem + Tr::kItemDescOff) + qb);
    if (x.flags & 2) return false;
    ++n_item;
    cur = x;
    cur_qb = qb;
    more = true;
    return true;
  };
  // The tile at ring position `tile` (of `cur`): waits for its K, reads its descriptor.
  // Timeline (Traced<Tr> only): thread 0 of consumer warpgroup 0 stamps its items; the waits
  // are summed from an item's Q to the next item's.
  constexpr bool kTrace = TraceOn<Tr>::value;
  const bool tracer = kTrace && cw == 0 && tid == 0;
  unsigned tr_kwait = 0, tr_vwait = 0, tr_turn = 0, tr_tiles = 0;  // (32-bit %clock sums)
  auto stamp = [&](int n, int field) {
    if constexpr (kTrace) {
      if (tracer) TraceSet(n, field, TraceClock());
    }
  };
  auto flush = [&](int n) {  // the sums of item n, then reset
    if constexpr (kTrace) {
      if (tracer) {
        TraceSet(n, kTrCKWait, tr_kwait);
        TraceSet(n, kTrCVWait, tr_vwait);
        TraceSet(n, kTrCTurn, tr_turn);
        TraceSet(n, kTrCTiles, tr_tiles);
      }
      tr_kwait = tr_vwait = tr_turn = tr_tiles = 0;
    }
  };
  auto flush_p = [&](int n) {  // the producer's stamps of item n (TraceP), into its record
    if constexpr (kTrace) {
      if (tracer && n >= 0) {
        const volatile unsigned* r =
            reinterpret_cast<const volatile unsigned*>(smem + Tr::kTraceOff) + (n & 3) * 8;
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        TraceSet(n, kTrMeta, r[kTpW] | (static_cast<unsigned long long>(smid) << 32));
        TraceSet(n, kTrPRound, r[kTpRound]);
        TraceSet(n, kTrPItem, r[kTpItem]);
        TraceSet(n, kTrPQ, r[kTpQ]);
        TraceSet(n, kTrPK0, r[kTpK0]);
        TraceSet(n, kTrPEnd, r[kTpEnd]);
      }
    }
  };
  auto stamp_q = [&](int n) {  // Q landed: the clock and the global timer
    if constexpr (kTrace) {
      if (tracer) {
        TraceSet(n, kTrCQ, TraceClock());
        TraceSet(n, kTrGlobal, TraceGlobal());
      }
    }
  };
  auto clk = [&]() -> unsigned {
    if constexpr (kTrace) return static_cast<unsigned>(clock());
    return 0;
  };
  auto turn = [&]() {
    const unsigned t0 = clk();
    NamedSync(my_turn, turn_threads);
    if constexpr (kTrace) tr_turn += clk() - t0;
  };
  // The descriptor of the tile at ring position `pos` (its K landed: k_full's phase seen);
  // `m`: whether another tile of the same item follows it.
  auto read_desc = [&](Tile& d, int pos, bool& m) {
    const int s = Ring::KSlot(pos);
    const TileDesc td = *(reinterpret_cast<const TileDesc*>(smem + Tr::kTileDescOff) + s);
    d.kind = td.kind_more & 1;
    m = (td.kind_more & 2) != 0;
    d.mixed = (td.kind_more & 4) != 0;
    d.start = td.start;
    d.n = td.n;
    d.slot = s;
    if constexpr (!kSparse) {
      // (The dense persistent kernel, as before: range tiles only.)
      d.last = d.kind == 0 ? td.last : d.mixed ? 0x7fffffff : __ldg(cur.cols + d.start + d.n - 1);
    } else if (d.kind == 0) {
      d.last = td.last;
    } else if (!d.mixed) {
      d.last = __ldg(cur.cols + d.start + d.n - 1);
    } else {
      // A tile with range tails (kSparse only): its keys are cols[start, nc) ++ tails, each part
      // ascending (ItemDesc::flags >> 2 = nc), so its largest key is the larger of the two
      // parts' last ones, read from the key list next to its slot (its producer threads
      // stored them before their arrivals on k_full).
      const int* keys = reinterpret_cast<const int*>(smem + Tr::kTileKeysOff) + s * kBN;
      const int nc = cur.flags >> 2;
      int last = keys[d.n - 1];
      if (d.start < nc) last = max(last, keys[min(d.n, nc - d.start) - 1]);
      d.last = last;
    }
    const int my_first = cur.first_pos + cw * 64;
    d.half = Tr::kHalfTiles && (d.n <= kBN / 2 || (p.causal && d.kind == 0 && d.start >= my_first));
    if (d.kind == 1) detail::FenceProxyAsync();  // gathered K written by cp.async
  };
  auto read_tile = [&](Tile& d) {
    const int s = Ring::KSlot(tile);
    const unsigned t0 = clk();
    wait(ring.KFull(s), Ring::KPhase(tile));
    if constexpr (kTrace) tr_kwait += clk() - t0, ++tr_tiles;
    read_desc(d, tile, more);
  };
  // kFlagEarlyDesc (the sparse kernel, not the traced instance): the next tile's descriptor, read
  // under the current tile's GEMMs (have_nd: `nd` holds it; `more` is then already its own).
  const bool early_desc = kSparse && !kTrace && (flags & kFlagEarlyDesc) != 0;
  const bool early_ranges = (flags & kFlagEarlyDescRanges) != 0;
  bool have_nd = false;
  Tile nd;
  auto release = [&](uint32_t bar) {
    if (lane == 0) MbarArrive(bar);
  };
  // After V landed (PrepareV: up to the rows its P V reads).
  auto prepare_v = [&](int slot, const Tile& d) {
    PrepareV<Tr>(smem, slot, d.kind, d.n, d.half ? kBN / 2 : kBN, tid, cw);
  };
  // Masks S of a tile that needs it (fewer than kBN keys, or keys past one of the warpgroup's
  // rows, causal): range tiles by a per-row column limit, gathered ones by their key numbers.
  auto mask = [&](const Tile& d) {
    const int my_first = cur.first_pos + cw * 64;
    if (d.n == kBN && !(p.causal && d.last > my_first)) return;
    if constexpr (!kSparse) {
      // (The dense persistent kernel: range tiles only, ConsumerStep's mask as before -- the
      // specialized one below spilled 4 bytes there.)
      const int first_pos = cur.first_pos;
      st.Mask([&](int col) { return col >= d.n ? 0x7fffffff : d.start + col; },
              [&](int col, int key, int h) {
                const int pos = first_pos + row0 + 8 * h;
                return col < d.n && (!p.causal || key <= pos);
              });
      return;
    }
    const int pos0 = cur.first_pos + row0;  // the thread's rows: pos0 and pos0 + 8
    if (d.kind == 0) {
      MaskRangeTile<kBN>(st, p.causal ? min(d.n, pos0 - d.start + 1) : d.n,
                         p.causal ? min(d.n, pos0 + 8 - d.start + 1) : d.n);
      return;
    }
    if (!(p.causal && d.last > my_first)) {
      // A gathered tile with no key past the warpgroup's first row (or not causal) that needs
      // a mask has fewer than kBN keys: only its columns past n go (the range mask's compare
      // against an immediate, not the key-and-compare below; session 23).
      MaskRangeTile<kBN>(st, d.n, d.n);
      return;
    }
    const int32_t* cols = cur.cols;
    const int* keys = reinterpret_cast<const int*>(smem + Tr::kTileKeysOff) + d.slot * kBN;
    st.Mask(
        [&](int col) {
          if (col >= d.n) return 0x7fffffff;
          return d.mixed ? keys[col] : __ldg(cols + d.start + col);
        },
        [&](int col, int key, int h) {
          const int pos = pos0 + 8 * h;
          return col < d.n && (!p.causal || key <= pos);
        });
  };
  auto issue_qk = [&](const Tile& d) {
    const uint32_t q_rows = sQ0 + cur_qb * Tr::kQBytes + cw * 64 * 128;
    IssueQkDesc<Tr>(st, detail::SmemDesc(q_rows, 16, 1024),
                    detail::SmemDesc(ring.K(Ring::KSlot(tile)), 16, 1024));
  };
  auto issue_pv = [&](const Tile& d, int vs) {
    const uint64_t v_desc = detail::SmemDesc(ring.V(vs), kBN * 128, 1024);
    if (d.half) {
      IssuePvDesc<Tr, kBN / 32>(st, v_desc);
    } else {
      IssuePvDesc<Tr, kBN / 16>(st, v_desc);
    }
  };
  // kFlagTmaStore (the sparse kernel): the Q buffer whose staged O this warp's TMA store may
  // still read (-1: none); released by release_o once the next tile's P V is done, or
  // before the wait for the next item's Q (that wait may need this buffer: the producer's end
  // marker after a one-tile item), or at the end.
  const bool tma_store = kSparse && (flags & kFlagTmaStore) != 0;
  int pend_qb = -1;
  auto epilogue = [&](const ItemDesc& x, int qb) {
    if constexpr (kSparse) {
      if (tma_store) {
        StoreItemTma<Tr>(st, smem, p, x, qb, cw, warp, lane, tmap_o);
        pend_qb = qb;
        return;
      }
    }
    StoreItem<Tr>(st, smem, p, x, qb, cw, warp, lane, q_empty0 + 8 * qb);
  };
  auto release_o = [&]() {
    if constexpr (kSparse) {
      if (pend_qb >= 0) {
        if (lane == 0) {
          BulkWaitRead<0>();
          MbarArrive(q_empty0 + 8 * pend_qb);
        }
        pend_qb = -1;
      }
    }
  };

  if constexpr (kTrace) {
    if (tracer) TraceSet(0, kTrCWait, TraceClock());
  }
  if (!next_item()) return;
  stamp_q(0);
  Tile d, prev;
  read_tile(d);
  stamp(0, kTrCK0);
  turn();
  issue_qk(d);
  stamp(0, kTrCQk);
  NamedArrive(other_turn, turn_threads);
  WgmmaWait<0>();
  st.FenceS();
  // (A mixed tile's key numbers live next to its K slot: the slot goes back after the mask.)
  if (!d.mixed) release(ring.KEmpty(Ring::KSlot(tile)));
  mask(d);
  if (d.mixed) release(ring.KEmpty(Ring::KSlot(tile)));
  st.Reset();
  {
    float corr[2];
    st.Softmax(p.scale_log2, corr);
  }
  st.ToP();
  prev = d;
  ++tile;
  for (;;) {
    const ItemDesc old = cur;
    const int old_qb = cur_qb;
    const bool same = more || have_nd;
    if constexpr (kTrace) {
      if (!same) stamp(n_item, kTrCWait);
    }
    if (!same) {
      release_o();
      if (!next_item()) break;
    }
    if constexpr (kTrace) {
      if (!same) {
        stamp_q(n_item - 1);
        flush(n_item - 2);
        flush_p(n_item - 3);  // (complete: its producer round ended before this Q's)
      }
    }
    if (have_nd) {
      d = nd;
      have_nd = false;
    } else {
      read_tile(d);
    }
    if constexpr (kTrace) {
      if (!same) stamp(n_item - 1, kTrCK0);
    }
    const int ks = Ring::KSlot(tile), vs = Ring::VSlot(tile - 1);
    const unsigned t_v = clk();
    wait(ring.VFull(vs), Ring::VPhase(tile - 1));
    if constexpr (kTrace) tr_vwait += clk() - t_v;
    prepare_v(vs, prev);
    turn();
    issue_qk(d);
    issue_pv(prev, vs);
    if constexpr (kTrace) {
      if (!same) stamp(n_item - 1, kTrCQk);
    }
    NamedArrive(other_turn, turn_threads);
    if (early_desc && more && MbarTest(ring.KFull(Ring::KSlot(tile + 1)), Ring::KPhase(tile + 1))) {
      const TileDesc* tds = reinterpret_cast<const TileDesc*>(smem + Tr::kTileDescOff);
      if (!early_ranges || (tds[Ring::KSlot(tile + 1)].kind_more & 1) == 0) {
        read_desc(nd, tile + 1, more);
        have_nd = true;
      }
    }
    WgmmaWait<1>();  // S(t) is ready; P(t-1) V is still running
    st.FenceS();
    if (!d.mixed) release(ring.KEmpty(ks));
    mask(d);
    if (d.mixed) release(ring.KEmpty(ks));
    float corr[2];
    if (same) {
      if constexpr (kSparse) {
        // The sparse kernel: a stale row maximum (ConsumerStep::SoftmaxStale), O rescaled only
        // where a row of the warp moved its maximum.
        const bool moved = st.SoftmaxStale(p.scale_log2, corr, stale);
        WgmmaWait<0>();
        st.FenceAcc();
        release(ring.VEmpty(vs));
        release_o();  // (the previous item's staged O, once its TMA store has read it)
        if (__any_sync(0xffffffffu, moved)) st.Rescale(corr);
      } else {
        st.Softmax(p.scale_log2, corr);
        WgmmaWait<0>();
        st.FenceAcc();
        release(ring.VEmpty(vs));
        st.Rescale(corr);
      }
    } else {
      // The new item's softmax from a fresh row state while the old item's last P V runs.
      const float m0 = st.m_i[0], m1 = st.m_i[1], l0 = st.l_i[0], l1 = st.l_i[1];
      st.m_i[0] = st.m_i[1] = detail::kNegInf;
      st.l_i[0] = st.l_i[1] = 0.f;
      st.Softmax(p.scale_log2, corr);
      WgmmaWait<0>();
      st.FenceAcc();
      stamp(n_item - 2, kTrCPvDone);
      release(ring.VEmpty(vs));
      release_o();
      const float n_m0 = st.m_i[0], n_m1 = st.m_i[1], n_l0 = st.l_i[0], n_l1 = st.l_i[1];
      st.m_i[0] = m0, st.m_i[1] = m1, st.l_i[0] = l0, st.l_i[1] = l1;
      // The new tile's P packed before the epilogue (the old P V is done, its A fragments
      // free): S's 64 registers are dead during the epilogue, 32 of P's live instead (the
      // sparse kernel; the dense persistent kernel as before).
      if constexpr (kSparse) st.ToP();
      epilogue(old, old_qb);
      stamp(n_item - 2, kTrCEpi);
      st.m_i[0] = n_m0, st.m_i[1] = n_m1, st.l_i[0] = n_l0, st.l_i[1] = n_l1;
#pragma unroll
      for (int i = 0; i < Tr::kD / 2; ++i) st.acc[i] = 0.f;
    }
    if (!kSparse || same) st.ToP();
    prev = d;
    ++tile;
  }
  LastPv(
      st, ring, tile, my_turn, other_turn, turn_threads, lane, [&](int vs) { prepare_v(vs, prev); },
      [&](int vs) { issue_pv(prev, vs); });
  stamp(n_item - 1, kTrCPvDone);
  epilogue(cur, cur_qb);
  if constexpr (kSparse) {
    if (pend_qb >= 0 && lane == 0) BulkWait<0>();  // (the kernel's last stores complete)
  }
  release_o();
  stamp(n_item - 1, kTrCEpi);
  flush(n_item - 1);
  flush_p(n_item - 2);  // (the end marker came after the producer's last stamps)
  flush_p(n_item - 1);
}

// The pair step (PersistTraits::kPair; block_m 64, one consumer warpgroup): ConsumerStream's
// stream with two consecutive 64-key tiles of one item as one 128-key step, so the per-step
// bookkeeping (waits, descriptors, the turn, row max / sum reductions, the softmax's shuffles)
// is paid once per 128 keys (NOTES.md s35-sparse: ~185 consumer instructions a warp per tile,
// whatever its width). A step is the tile at ring position `tile` and, where its item has
// another, the next one; an item's odd last tile is a step alone. S's column half h holds the
// tile of K slot h (slot = position % 2: the pair's first tile may sit in either half, by the
// CTA's earlier items; P V takes V slot h for P's half h, the first tile's first). The bytes do
// not depend on that parity (under the dynamic work list it changes from run to run): the row
// maximum is exact and the row sum adds the two halves' sums (ExpRow<true>). A lone tile's
// other half is computed from the other K slot (stale data or a load in flight) and masked to
// -inf before the softmax. The producer issues K(u) then V(u - 2) at position u (the item's last
// two V tiles after its last K): a step of positions t, t + 1 waits for K(t), K(t + 1), V(t - 2)
// (all issued before the producer waits for a slot this step frees), then issues S, then waits
// for V(t - 1) (issued once the previous step gave back V(t - 3)'s slot) under S; its P V is two
// commit groups, V(t - 2)'s slot given back when the first is done, which lets K(t + 2),
// V(t), K(t + 3) load under the step.
template <int kH, class Step>
__device__ __forceinline__ void MaskRangeHalf(Step& st, int lim0, int lim1) {
  const int l0 = lim0 - 2 * st.t4, l1 = lim1 - 2 * st.t4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float& a = st.s[(kH * 8 + nt) * 4 + j];
      float& b = st.s[(kH * 8 + nt) * 4 + 2 + j];
      a = nt * 8 + j < l0 ? a : detail::kNegInf;
      b = nt * 8 + j < l1 ? b : detail::kNegInf;
    }
  }
}
template <int kH, class Step, class KeyAt>
__device__ __forceinline__ void MaskKeyHalf(Step& st, int n, int q0, int q1, KeyAt key_at) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = nt * 8 + 2 * st.t4 + j;
      const int key = col < n ? key_at(col) : 0x7fffffff;
      float& a = st.s[(kH * 8 + nt) * 4 + j];
      float& b = st.s[(kH * 8 + nt) * 4 + 2 + j];
      a = key <= q0 ? a : detail::kNegInf;
      b = key <= q1 ? b : detail::kNegInf;
    }
  }
}

// O += P V over P's 16-key groups [kLo, kHi) (group kk: V slot kk / 4, its group kk % 4).
// kFence false: the second half of a step's P V, right after the first (O's registers not
// fenced: the first half's wgmmas still write them).
template <class Tr, int kLo, int kHi, bool kFence = true, class Step>
__device__ __forceinline__ void IssuePvPair(Step& st, uint64_t v0, uint64_t v1) {
  using T = typename Tr::T;
#pragma unroll
  for (int kk = kLo; kk < kHi; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) detail::FenceReg(st.pa[kk][e]);
  }
  if constexpr (kFence) st.FenceAcc();
  detail::WgmmaFence();
#pragma unroll
  for (int kk = kLo; kk < kHi; ++kk) {
    detail::Wgmma<T, Tr::kD>::RS(st.acc, st.pa[kk],
                                 DescPlus(kk < 4 ? v0 : v1, (kk % 4) * 16 * 128));
  }
  detail::WgmmaCommit();
}

template <class Tr, class Step, class Ring>
__device__ __forceinline__ void ConsumerStreamPair(Step& st, char* smem, const AttnParams& p,
                                                   int tid, int lane, int my_turn, int other_turn,
                                                   int turn_threads, const Ring& ring,
                                                   uint32_t q_full0, uint32_t q_empty0, int flags,
                                                   const CUtensorMap* tmap_o) {
  constexpr int kBN = Tr::kBN, kQB = Tr::kQBufs;
  static_assert(kBN == 64 && Tr::kKStages == 2 && (Tr::kStages == 2 || Tr::kStages == 3),
                "pair step");
  constexpr int cw = 0;
  const uint32_t sQ0 = Smem32(smem);
  const uint32_t sK = ring.k_smem;
  const int warp = tid / 32;
  const int row0 = warp * 16 + lane / 4;  // + 8 * h
  struct Tile {
    int kind, start, n, last, slot;
    bool mixed;
  };
  struct Pair {
    Tile t[2];  // positions first, first + 1
    int cnt;
  };
  // What the next step keeps of a step for its P V: per tile kind << 8 | n, the first tile's
  // slot, the count.
  struct Prev {
    int kn[2];
    int cnt, slot0;
  };
  auto keep = [](const Pair& d) {
    return Prev{{d.t[0].kind << 8 | d.t[0].n, d.t[1].kind << 8 | d.t[1].n}, d.cnt, d.t[0].slot};
  };
  // 3 V slots (kStages 3): V slot = position % 3, no longer the K slot; P's half h still takes
  // the tile of K slot h, so each half's V descriptor follows that tile's position. The producer
  // keeps V two positions behind K: the third slot frees V(t)'s load (and the K loads queued
  // behind it) from waiting for P V(t - 2), which released that slot only at the step's end.
  auto v_of_half = [&](int first, int h, int slot0) {
    return detail::SmemDesc(ring.V(Ring::VSlot(first + (h == slot0 ? 0 : 1))), kBN * 128, 1024);
  };
  const bool sleep = (flags & kFlagSleepConsumers) != 0;
  auto wait = [&](uint32_t bar, uint32_t parity) {
    if (sleep) {
      MbarWaitSleep(bar, parity);
    } else {
      MbarWait(bar, parity);
    }
  };
  const float stale = static_cast<float>((flags >> kStaleMaxShift) & 0xff) - 1.f;
  int tile = 0, n_item = 0;
  ItemDesc cur;
  int cur_qb = 0;
  bool more = false;
  auto next_item = [&]() {
    const int qb = n_item % kQB;
    wait(q_full0 + 8 * qb, (n_item / kQB) & 1);
    const ItemDesc x = *(reinterpret_cast<const ItemDesc*>(smem + Tr::kItemDescOff) + qb);
    if (x.flags & 2) return false;
    ++n_item;
    cur = x;
    cur_qb = qb;
    more = true;
    return true;
  };
  auto turn = [&]() { NamedSync(my_turn, turn_threads); };
  auto read_tile = [&](Tile& d, int pos) {
    const int s = Ring::KSlot(pos);
    wait(ring.KFull(s), Ring::KPhase(pos));
    const TileDesc td = *(reinterpret_cast<const TileDesc*>(smem + Tr::kTileDescOff) + s);
    d.kind = td.kind_more & 1;
    more = (td.kind_more & 2) != 0;
    d.mixed = (td.kind_more & 4) != 0;
    d.start = td.start;
    d.n = td.n;
    d.slot = s;
    if (d.kind == 0) {
      d.last = td.last;
    } else if (!d.mixed) {
      d.last = __ldg(cur.cols + d.start + d.n - 1);
    } else {
      const int* keys = reinterpret_cast<const int*>(smem + Tr::kTileKeysOff) + s * kBN;
      const int nc = cur.flags >> 2;
      int last = keys[d.n - 1];
      if (d.start < nc) last = max(last, keys[min(d.n, nc - d.start) - 1]);
      d.last = last;
    }
    if (d.kind == 1) detail::FenceProxyAsync();  // gathered K written by cp.async
  };
  auto read_pair = [&](Pair& d) {
    read_tile(d.t[0], tile);
    d.cnt = 1;
    if (more) {
      read_tile(d.t[1], tile + 1);
      d.cnt = 2;
    }
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) MbarArrive(bar);
  };
  // One tile's mask in its half (as ConsumerStream's mask).
  auto mask_half = [&](auto hc, const Tile& d) {
    constexpr int kH = decltype(hc)::value;
    const int my_first = cur.first_pos;
    if (d.n == kBN && !(p.causal && d.last > my_first)) return;
    const int pos0 = cur.first_pos + row0;
    if (d.kind == 0) {
      MaskRangeHalf<kH>(st, p.causal ? min(d.n, pos0 - d.start + 1) : d.n,
                        p.causal ? min(d.n, pos0 + 8 - d.start + 1) : d.n);
      return;
    }
    if (!(p.causal && d.last > my_first)) {
      MaskRangeHalf<kH>(st, d.n, d.n);
      return;
    }
    const int32_t* cols = cur.cols;
    const int* keys = reinterpret_cast<const int*>(smem + Tr::kTileKeysOff) + d.slot * kBN;
    const int q0 = p.causal ? pos0 : 0x7ffffffe, q1 = p.causal ? pos0 + 8 : 0x7ffffffe;
    if (d.mixed) {
      MaskKeyHalf<kH>(st, d.n, q0, q1, [&](int col) { return keys[col]; });
    } else {
      MaskKeyHalf<kH>(st, d.n, q0, q1, [&](int col) { return __ldg(cols + d.start + col); });
    }
  };
  // S's masks, the K slots released (a mixed tile's after its mask: its key list lies next to
  // the slot), a lone tile's other half to -inf.
  auto mask_release = [&](const Pair& d) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= d.cnt) break;
      if (!d.t[i].mixed) release(ring.KEmpty(d.t[i].slot));
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= d.cnt) break;
      if (d.t[i].slot == 0) {
        mask_half(std::integral_constant<int, 0>(), d.t[i]);
      } else {
        mask_half(std::integral_constant<int, 1>(), d.t[i]);
      }
    }
    if (d.cnt == 1) {
      if (d.t[0].slot == 0) {
        MaskRangeHalf<1>(st, 0, 0);
      } else {
        MaskRangeHalf<0>(st, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= d.cnt) break;
      if (d.t[i].mixed) release(ring.KEmpty(d.t[i].slot));
    }
  };
  auto issue_qk = [&]() {
    using T = typename Tr::T;
    const uint64_t q_desc = detail::SmemDesc(sQ0 + cur_qb * Tr::kQBytes, 16, 1024);
    const uint64_t k_desc = detail::SmemDesc(sK, 16, 1024);
    st.FenceS();
    detail::WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < Tr::kD / 16; ++ks) {
      const uint32_t koff = (ks % 4) * 32;
      detail::Wgmma<T, 128>::SS(st.s, DescPlus(q_desc, (ks / 4) * Tr::kBM * 128 + koff),
                                DescPlus(k_desc, (ks / 4) * Tr::kKSubBytes + koff), ks > 0 ? 1 : 0);
    }
    detail::WgmmaCommit();
  };
  // The previous step's V: waits, the partial range tiles' rows zeroed (PrepareV).
  auto wait_v = [&](const Prev& d, int first) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= d.cnt) break;
      const int vs = Ring::VSlot(first + i);
      wait(ring.VFull(vs), Ring::VPhase(first + i));
      PrepareV<Tr>(smem, vs, d.kn[i] >> 8, d.kn[i] & 0xff, kBN, tid, cw);
    }
  };
  // The previous step's P V, one commit group per tile (the first tile's V slot goes back as soon
  // as its half is done: the producer's next loads wait for it, wait_pv).
  auto issue_pv = [&](const Prev& d, int first) {
    uint64_t v0, v1;
    if constexpr (Tr::kStages == 2) {
      v0 = detail::SmemDesc(ring.V(0), kBN * 128, 1024);
      v1 = detail::SmemDesc(ring.V(1), kBN * 128, 1024);
    } else {
      v0 = v_of_half(first, 0, d.slot0);
      v1 = v_of_half(first, 1, d.slot0);
    }
    if (d.cnt == 2) {
      if (d.slot0 == 0) {
        IssuePvPair<Tr, 0, 4>(st, v0, v1);
        IssuePvPair<Tr, 4, 8, false>(st, v0, v1);
      } else {
        IssuePvPair<Tr, 4, 8>(st, v0, v1);
        IssuePvPair<Tr, 0, 4, false>(st, v0, v1);
      }
    } else {
      if (d.slot0 == 0) {
        IssuePvPair<Tr, 0, 4>(st, v0, v1);
      } else {
        IssuePvPair<Tr, 4, 8>(st, v0, v1);
      }
      detail::WgmmaCommit();  // (an empty group: every step commits S + two P V groups)
    }
  };
  auto wait_v1 = [&](const Prev& d, int first) {
    const int vs = Ring::VSlot(first + 1);
    wait(ring.VFull(vs), Ring::VPhase(first + 1));
    PrepareV<Tr>(smem, vs, d.kn[1] >> 8, d.kn[1] & 0xff, kBN, tid, cw);
  };
  auto wait_v0 = [&](const Prev& d, int first) {
    const int vs = Ring::VSlot(first);
    wait(ring.VFull(vs), Ring::VPhase(first));
    PrepareV<Tr>(smem, vs, d.kn[0] >> 8, d.kn[0] & 0xff, kBN, tid, cw);
  };
  // After the step's S: waits for the previous step's P V, its V slots back (the first tile's as
  // soon as its half is done).
  auto wait_pv = [&](const Prev& d, int first) {
    WgmmaWait<1>();
    if constexpr (Tr::kStages == 2) {
      release(ring.VEmpty(d.slot0));
    } else {
      release(ring.VEmpty(Ring::VSlot(first)));
    }
    WgmmaWait<0>();
    st.FenceAcc();
    if constexpr (Tr::kStages == 2) {
      if (d.cnt == 2) release(ring.VEmpty(d.slot0 ^ 1));
    } else {
      if (d.cnt == 2) release(ring.VEmpty(Ring::VSlot(first + 1)));
    }
  };
  const bool tma_store = (flags & kFlagTmaStore) != 0;
  int pend_qb = -1;
  auto epilogue = [&](const ItemDesc& x, int qb) {
    if (tma_store) {
      StoreItemTma<Tr>(st, smem, p, x, qb, cw, warp, lane, tmap_o);
      pend_qb = qb;
      return;
    }
    StoreItem<Tr>(st, smem, p, x, qb, cw, warp, lane, q_empty0 + 8 * qb);
  };
  auto release_o = [&]() {
    if (pend_qb >= 0) {
      if (lane == 0) {
        BulkWaitRead<0>();
        MbarArrive(q_empty0 + 8 * pend_qb);
      }
      pend_qb = -1;
    }
  };

  if (!next_item()) return;
  Pair d;
  Prev prev;
  read_pair(d);
  turn();
  issue_qk();
  NamedArrive(other_turn, turn_threads);
  WgmmaWait<0>();
  st.FenceS();
  mask_release(d);
  st.Reset();
  {
    float corr[2];
    st.template Softmax<true>(p.scale_log2, corr);
  }
  st.ToP();
  prev = keep(d);
  tile += d.cnt;
  for (;;) {
    const ItemDesc old = cur;
    const int old_qb = cur_qb;
    const bool same = more;
    if (!same) {
      release_o();
      if (!next_item()) break;
    }
    read_pair(d);
    wait_v0(prev, tile - prev.cnt);
    turn();
    issue_qk();
    // The second V of a pair (the producer's last load of the previous step) waited for under
    // this step's S.
    if (prev.cnt == 2) wait_v1(prev, tile - prev.cnt);
    issue_pv(prev, tile - prev.cnt);
    NamedArrive(other_turn, turn_threads);
    // S of this step is ready; the previous step's P V (one or two groups) is still running.
    WgmmaWait<2>();
    st.FenceS();
    mask_release(d);
    float corr[2];
    if (same) {
      const bool moved = st.template SoftmaxStale<true>(p.scale_log2, corr, stale);
      wait_pv(prev, tile - prev.cnt);
      release_o();
      if (__any_sync(0xffffffffu, moved)) st.Rescale(corr);
      st.ToP();
    } else {
      const float m0 = st.m_i[0], m1 = st.m_i[1], l0 = st.l_i[0], l1 = st.l_i[1];
      st.m_i[0] = st.m_i[1] = detail::kNegInf;
      st.l_i[0] = st.l_i[1] = 0.f;
      st.template Softmax<true>(p.scale_log2, corr);
      wait_pv(prev, tile - prev.cnt);
      release_o();
      const float n_m0 = st.m_i[0], n_m1 = st.m_i[1], n_l0 = st.l_i[0], n_l1 = st.l_i[1];
      st.m_i[0] = m0, st.m_i[1] = m1, st.l_i[0] = l0, st.l_i[1] = l1;
      st.ToP();
      epilogue(old, old_qb);
      st.m_i[0] = n_m0, st.m_i[1] = n_m1, st.l_i[0] = n_l0, st.l_i[1] = n_l1;
#pragma unroll
      for (int i = 0; i < Tr::kD / 2; ++i) st.acc[i] = 0.f;
    }
    prev = keep(d);
    tile += d.cnt;
  }
  wait_v(prev, tile - prev.cnt);
  turn();
  issue_pv(prev, tile - prev.cnt);
  NamedArrive(other_turn, turn_threads);
  wait_pv(prev, tile - prev.cnt);
  epilogue(cur, cur_qb);
  if (pend_qb >= 0 && lane == 0) BulkWait<0>();
  release_o();
}

// The kernel's body (PersistentFa3Kernel, PersistentFa3PickKernel): the arguments are the
// kernel's own parameters (the tensor maps stay in parameter space: TMA takes their address).
template <class Tr, bool kSparse>
__device__ __forceinline__ void PersistentFa3Body(
    const AttnParams& p, const SparseIndexView& idx, const SparseSchedule& sched, int num_items,
    int num_m_blocks, int flags, const CUtensorMap& tmap_q, const CUtensorMap& tmap_k,
    const CUtensorMap& tmap_v, const CUtensorMap& tmap_o) {
#if SPATTN_SM90A
  using T = typename Tr::T;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStages = Tr::kStages;
  constexpr int kKStages = Tr::kKStages;  // (K slots; kStages: V slots)
  static_assert(kKStages == kStages || (kSparse && Tr::kCross), "a deeper K ring: the stream only");
  constexpr int kSub = Tr::kSub;
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = smem_raw + ((1024 - (Smem32(smem_raw) & 1023)) & 1023);
  if constexpr (Tr::kNoSlack) {
    if (Smem32(smem_raw) & 1023) __trap();  // (no room for the alignment slack)
  }

  const uint32_t sQ0 = Smem32(smem);
  const uint32_t sK = sQ0 + Tr::kKOff;
  const uint32_t sV = sQ0 + Tr::kVOff;
  const uint32_t bars = sQ0 + Tr::kBarOff;
  constexpr int kQB = Tr::kQBufs;
  auto q_full = [&](int b) { return bars + 8 * b; };
  auto q_empty = [&](int b) { return bars + 8 * (kQB + b); };
  auto k_full = [&](int s) { return bars + 8 * (2 * kQB + s); };
  auto v_full = [&](int s) { return bars + 8 * (2 * kQB + kKStages + s); };
  auto k_empty = [&](int s) { return bars + 8 * (2 * kQB + kKStages + kStages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (2 * kQB + 2 * kKStages + kStages + s); };

  if (threadIdx.x == 0) {
    for (int b = 0; b < kQB; ++b) {
      MbarInit(q_full(b), 1);
      MbarInit(q_empty(b), 4 * Tr::kConsumerWgs);  // every consumer warp releases
    }
    for (int s = 0; s < (kKStages > kStages ? kKStages : kStages); ++s) {
      // every producer thread arrives (TMA: one with the bytes)
      if (s < kKStages) MbarInit(k_full(s), 128);
      if (s < kStages) MbarInit(v_full(s), 128);
      if (s < kKStages) MbarInit(k_empty(s), 4 * Tr::kConsumerWgs);
      if (s < kStages) MbarInit(v_empty(s), 4 * Tr::kConsumerWgs);
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
    // The sparse stream's producer sleeps in its waits (MbarWaitSleep: it waits most of the
    // time, beside the consumer warps on their schedulers); the dense persistent kernel's and
    // the kItems 0 / 1 and one-Q-buffer sparse kernels' as before.
    const bool psleep = kSparse && Tr::kCross && (flags & kFlagSleepProducer) != 0;
    auto pwait = [&](uint32_t bar, uint32_t parity) {
      if (psleep) {
        MbarWaitSleep(bar, parity);
      } else {
        MbarWait(bar, parity);
      }
    };
    if (leader) {
      PrefetchTensorMap(&tmap_q);
      PrefetchTensorMap(&tmap_k);
      PrefetchTensorMap(&tmap_v);
      if (flags & kFlagTmaStore) PrefetchTensorMap(&tmap_o);
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
                      int key, int sub_bytes) {
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
          const uint32_t off = (ch / 8) * sub_bytes + row * 128 + (((ch & 7) ^ (row & 7)) * 16);
          CpAsync16Zfill(dst + off, src + ch * 8, valid);
        }
      }
    };
    // The key number of the column-tile row this thread reads for its warp (one lane per row:
    // its own row), read before the slot is free, so its latency is not paid between the slot's
    // release and the copies.
    const int key_row =
        Tr::kLanes == 1 ? tid : (plane < kWarpRows ? pwarp * kWarpRows + plane : kBN);
    // kFlagPackTails (sparse items of the stream only): gathered tiles over cols ++ range tails.
    const bool pack = kSparse && Tr::kCross && (flags & kFlagPackTails) != 0;
    TailKeys<kBN> tail_keys;  // (reset per item)
    auto tile_key = [&](const Item& it, int kind, int start, int n) {
      if (kind != 1 || key_row >= n) return 0;
      return pack ? tail_keys.Key(it.ks, start + key_row) : __ldg(it.ks.cols + start + key_row);
    };
    // A packed tile's key numbers, next to its K slot, for the consumers' mask (each row's by
    // the thread that read it).
    int* const tile_keys = reinterpret_cast<int*>(smem + Tr::kTileKeysOff);
    // A producer thread's arrival on a slot's barrier after its cp.asyncs: when they land. The
    // leader (kDesc) arrives itself too, with release semantics, so the tile descriptor it wrote
    // before is visible to whoever waits on the slot; its copies' arrival is then not counted
    // but still holds the phase until they land.
    auto arrive_copies = [&](uint32_t full) {
      if (Tr::kDesc && leader) {
        CpAsyncArriveInc(full);
        MbarArrive(full);
      } else {
        CpAsyncArriveNoinc(full);
      }
    };
    // Loads one K or V tile into ring slot `s`; `key` is tile_key's. keys_slot >= 0 (a K tile
    // with range tails): the key numbers go to that slot's list too, and every thread's arrival
    // releases its store.
    auto load = [&](const CUtensorMap* map, const T* base, int64_t tok_stride, uint32_t dst,
                    uint32_t full, const Item& it, int kind, int start, int n, int key,
                    int keys_slot, int sub_bytes) {
      auto arrive = [&]() {
        if (keys_slot >= 0) {
          if (key_row < n) tile_keys[keys_slot * kBN + key_row] = key;
          CpAsyncArriveInc(full);
          MbarArrive(full);
        } else {
          arrive_copies(full);
        }
      };
      if (kind == 0) {
        if (leader) {
          MbarArriveExpectTx(full, Tr::kTileBytes);
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            TmaLoad3d(dst + sub * sub_bytes, map, sub * 64, it.head / p.group, it.k_tok0 + start,
                      full);
          }
        } else {
          MbarArrive(full);
        }
      } else if constexpr (Tr::kLanes > 1) {
        gather(base, tok_stride, dst, it, n, key, sub_bytes);
        arrive();
      } else if (tid >= kBN) {
        MbarArrive(full);  // (64-key tiles: the upper producer threads hold no row)
      } else {
        const bool valid = tid < n;
        const T* src = base + static_cast<int64_t>(it.k_tok0 + key) * tok_stride;
#pragma unroll
        for (int ch = 0; ch < kD / 8; ++ch) {
          const uint32_t off = (ch / 8) * sub_bytes + tid * 128 + (((ch & 7) ^ (tid & 7)) * 16);
          CpAsync16Zfill(dst + off, src + ch * 8, valid);
        }
        arrive();
      }
    };
    // kFlagDynamic: the leader's fetch for the next round, in flight while this round's item
    // loads (list position G + fetch).
    const bool dynamic = kSparse && Tr::kDesc && (flags & kFlagDynamic) != 0;
    int* const next_item = reinterpret_cast<int*>(smem + Tr::kNextItemOff);
    int fetched = 0;
    constexpr bool kTrace = TraceOn<Tr>::value;
    for (int round = 0;; ++round) {
      // (kTrace: the slot of the round's item, rewritten by the next round if it has no tiles)
      if constexpr (kTrace) {
        if (leader) TraceP<Tr>(smem, n_item, kTpRound, static_cast<unsigned>(TraceClock()));
      }
      int w = SnakeItem(round, c, G);
      if (dynamic && round > 0) {
        if (leader) {
          if (fetched == num_items - 1) atomicExch(sched.counter, 0);  // the list's last fetch
          next_item[round & 1] = G + fetched;
        }
        NamedSync(kBarProducer, 128);
        w = next_item[round & 1];
      }
      if (w >= num_items) break;
      if (dynamic && leader) fetched = atomicAdd(sched.counter, 1);
      Item it;
      if (!GetItem<kSparse, kBM>(p, idx, sched, num_m_blocks, w, it)) continue;
      // The item's Q load (and its descriptor): as soon as the item is known to have a tile --
      // from the schedule's record (it.keys; the sparse stream), before the walk to its first
      // tile (the first range reads, one or two dependent L2 reads: s24's timeline had the
      // consumers waiting ~1800-2400 cycles for Q); otherwise after that walk, as before.
      auto issue_q = [&](bool tiles) {
        const int qb = n_item % kQB;
        pwait(q_empty(qb), ((n_item / kQB) & 1) ^ 1);
        if (leader) {
          if constexpr (Tr::kDesc) {
            ItemDesc* d = reinterpret_cast<ItemDesc*>(smem + Tr::kItemDescOff) + qb;
            d->cols = it.ks.cols;
            d->q_tok0 = it.q_tok0;
            d->q_begin = it.q_begin;
            d->rows = it.rows;
            d->first_pos = it.first_pos;
            d->head = it.head;
            // (kSparse stream: the item's column count above the flags, for the consumers'
            // largest key of a tile with range tails.)
            d->flags = (tiles ? 1 : 0) | (kSparse && Tr::kCross ? it.ks.num_cols << 2 : 0);
          }
          MbarArriveExpectTx(q_full(qb), Tr::kQBytes);
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            TmaLoad3d(sQ0 + qb * Tr::kQBytes + sub * kBM * 128, &tmap_q, sub * 64, it.head,
                      it.q_tok0 + it.q_begin, q_full(qb));
          }
          if constexpr (kTrace) TraceP<Tr>(smem, n_item, kTpQ, static_cast<unsigned>(TraceClock()));
        }
        ++n_item;
      };
      const bool early_q = kSparse && Tr::kCross && it.keys;
      if (early_q) issue_q(true);
      // Tiles one ahead: whether another follows is part of a tile's descriptor.
      PackedCursor<kBN, kSparse && Tr::kCross> cursor;
      cursor.Init(flags);
      tail_keys = TailKeys<kBN>();
      int kind = 0, start = 0, n = 0;
      bool mixed = false;
      bool have = cursor.Next(it.ks, kind, start, n, mixed);
      if constexpr (kTrace) {
        if (leader && have) {
          unsigned smid;
          asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
          TraceP<Tr>(smem, n_item - (early_q ? 1 : 0), kTpW, w);
          TraceP<Tr>(smem, n_item - (early_q ? 1 : 0), kTpItem,
                     static_cast<unsigned>(TraceClock()));
        }
      }
      if (Tr::kCross && !have) {
        // No keys: O = 0 and LSE = -inf, written here (the consumers' stream only has items
        // with tiles).
        const int64_t row_tok = it.q_tok0 + it.q_begin;
        T* o_block = static_cast<T*>(p.o) + static_cast<int64_t>(it.head) * p.o_head_stride +
                     row_tok * p.o_token_stride;
        constexpr int kChunks = kD / 8;
        for (int i = tid; i < it.rows * kChunks; i += 128) {
          *reinterpret_cast<uint4*>(o_block + static_cast<int64_t>(i / kChunks) * p.o_token_stride +
                                    (i % kChunks) * 8) = make_uint4(0, 0, 0, 0);
        }
        if (p.maybe_lse != nullptr && tid < it.rows) {
          p.maybe_lse[static_cast<int64_t>(it.head) * p.total_q + row_tok + tid] = detail::kNegInf;
        }
        continue;
      }
      if (!early_q) issue_q(have);
      const T* kbase =
          static_cast<const T*>(p.k) + static_cast<int64_t>(it.head / p.group) * p.k_head_stride;
      const T* vbase =
          static_cast<const T*>(p.v) + static_cast<int64_t>(it.head / p.group) * p.v_head_stride;
      int pkind = 0, pstart = 0, pn = 0, pkey = 0;
      bool have_prev = false;
      // kPair: V two positions behind K (K(u), then V(u - 2)), so a pair step's next K tiles load
      // under its S and first P V half; the item's last two V tiles after its last K.
      int qkind = 0, qstart = 0, qn = 0, qkey = 0;
      bool have_pp = false;
      for (;;) {
        int nkind = 0, nstart = 0, nn = 0;
        bool nmixed = false;
        const bool have_next = have && cursor.Next(it.ks, nkind, nstart, nn, nmixed);
        const int key = have ? tile_key(it, kind, start, n) : 0;
        if (have) {
          const int s = tile % kKStages;
          pwait(k_empty(s), ((tile / kKStages) & 1) ^ 1);
          if (Tr::kDesc && leader) {
            *(reinterpret_cast<TileDesc*>(smem + Tr::kTileDescOff) + s) =
                TileDesc{kind | (have_next ? 2 : 0) | (mixed ? 4 : 0), start, n, start + n - 1};
          }
          load(&tmap_k, kbase, p.k_token_stride, sK + s * Tr::kKSlotBytes, k_full(s), it, kind,
               start, n, key, mixed ? s : -1, Tr::kKSubBytes);
        }
        if constexpr (Tr::kPair) {
          if (have_pp) {
            const int s = (tile - 2) % kStages;
            pwait(v_empty(s), (((tile - 2) / kStages) & 1) ^ 1);
            load(&tmap_v, vbase, p.v_token_stride, sV + s * Tr::kTileBytes, v_full(s), it, qkind,
                 qstart, qn, qkey, -1, kBN * 128);
          }
          if (!have && have_prev) {
            const int s = (tile - 1) % kStages;
            pwait(v_empty(s), (((tile - 1) / kStages) & 1) ^ 1);
            load(&tmap_v, vbase, p.v_token_stride, sV + s * Tr::kTileBytes, v_full(s), it, pkind,
                 pstart, pn, pkey, -1, kBN * 128);
          }
        } else if (have_prev) {
          const int s = (tile - 1) % kStages;
          pwait(v_empty(s), (((tile - 1) / kStages) & 1) ^ 1);
          load(&tmap_v, vbase, p.v_token_stride, sV + s * Tr::kTileBytes, v_full(s), it, pkind,
               pstart, pn, pkey, -1, kBN * 128);
        }
        if constexpr (kTrace) {
          if (leader && have && !have_prev) {
            TraceP<Tr>(smem, n_item - 1, kTpK0, static_cast<unsigned>(TraceClock()));
          }
          if (leader && !have) {
            TraceP<Tr>(smem, n_item - 1, kTpEnd, static_cast<unsigned>(TraceClock()));
          }
        }
        if (!have) break;
        ++tile;
        if constexpr (Tr::kPair) {
          qkind = pkind, qstart = pstart, qn = pn, qkey = pkey;
          have_pp = have_prev;
        }
        pkind = kind, pstart = start, pn = n, pkey = key;
        have_prev = true;
        kind = nkind, start = nstart, n = nn, mixed = nmixed;
        have = have_next;
      }
    }
    if constexpr (Tr::kDesc) {
      // The end of this CTA's items, in the next Q buffer's descriptor (no Q load: the plain
      // arrive completes q_full's phase).
      const int qb = n_item % kQB;
      pwait(q_empty(qb), ((n_item / kQB) & 1) ^ 1);
      if (leader) {
        (reinterpret_cast<ItemDesc*>(smem + Tr::kItemDescOff) + qb)->flags = 2;
        MbarArrive(q_full(qb));
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
  const KvRing<kStages, Tr::kTileBytes, kKStages> ring{sK, sV, k_full(0), v_full(0), k_empty(0),
                                                       v_empty(0)};
  ConsumerStep<T, kD, Tr::kPair ? 128 : kBN, kBM> st(lane);

  if (kPingPong && cw == 1) NamedArrive(kBarTurn0, 256);  // consumer warpgroup 0 goes first
  if constexpr (Tr::kPair && kSparse) {
    ConsumerStreamPair<Tr>(st, smem, p, tid, lane, my_turn, other_turn, kTurnThreads, ring,
                           q_full(0), q_empty(0), flags, &tmap_o);
  } else if constexpr (Tr::kCross) {
    ConsumerStream<Tr, kSparse>(st, smem, p, cw, tid, lane, my_turn, other_turn, kTurnThreads, ring,
                                q_full(0), q_empty(0), flags, &tmap_o);
  } else {
    int tile = 0, n_item = 0;
    for (int round = 0;; ++round) {
      const int qb = n_item % kQB;
      ItemDesc it;
      detail::KeySet ks;  // (without kDesc: the item's keys, walked here too)
      if constexpr (Tr::kDesc) {
        MbarWait(q_full(qb), (n_item / kQB) & 1);
        it = *(reinterpret_cast<const ItemDesc*>(smem + Tr::kItemDescOff) + qb);
        if (it.flags & 2) break;
      } else {
        const int w = SnakeItem(round, c, G);
        if (w >= num_items) break;
        Item full;
        if (!GetItem<kSparse, kBM>(p, idx, sched, num_m_blocks, w, full)) continue;
        it = ItemDesc{
            full.ks.cols, full.q_tok0, full.q_begin, full.rows, full.first_pos, full.head, 1};
        ks = full.ks;
      }
      const int my_first = it.first_pos + cw * 64;

      // A tile of the item's key set; `last`: its last key (column tiles: read as soon as the
      // tile is known, used by the mask after the tile's S is ready, so the load's latency hides
      // under the waits and GEMMs).
      struct Tile {
        int kind, start, n, last;
      };
      detail::TileCursor<kBN> cursor;
      bool more = (it.flags & 1) != 0;  // kDesc: another tile of the item follows
      auto next = [&](Tile& d) {
        if constexpr (Tr::kDesc) {
          // The descriptor lies next to the tile's K slot: wait for it (RunKeyTiles' own wait
          // then finds the phase complete).
          if (!more) return false;
          const int s = tile % kStages;
          MbarWait(k_full(s), (tile / kStages) & 1);
          const TileDesc td = *(reinterpret_cast<const TileDesc*>(smem + Tr::kTileDescOff) + s);
          d.kind = td.kind_more & 1;
          more = (td.kind_more & 2) != 0;
          d.start = td.start;
          d.n = td.n;
          // Column tiles: the last key read here (as without descriptors: its latency hides under
          // the GEMMs before the mask), not by the producer's leader, which would wait for it
          // before every copy (run 1: -3% on 0.05 columns).
          d.last = d.kind == 0 ? td.last : __ldg(it.cols + d.start + d.n - 1);
          return true;
        } else {
          if (!cursor.Next(ks, d.kind, d.start, d.n)) return false;
          d.last = d.kind == 0 ? d.start + d.n - 1 : __ldg(ks.cols + d.start + d.n - 1);
          return true;
        }
      };
      // Gathered tiles were written by cp.async: make them visible to wgmma.
      auto after_k = [&](const Tile& d) {
        if (d.kind == 1) detail::FenceProxyAsync();
      };
      // After the V tile landed (PrepareV).
      auto prepare_v = [&](int slot, const Tile& d) {
        PrepareV<Tr>(smem, slot, d.kind, d.n, kBN, tid, cw);
      };
      // Masks S of a tile: keys past n, causal; column tiles read their key numbers.
      auto mask = [&](decltype(st)& step, const Tile& d) {
        if (d.n == kBN && !(p.causal && d.last > my_first)) return;
        step.Mask(
            [&](int col) {
              if (col >= d.n) return 0x7fffffff;
              return d.kind == 0 ? d.start + col : __ldg(it.cols + d.start + col);
            },
            [&](int col, int key, int h) {
              const int pos = it.first_pos + row0 + 8 * h;
              return col < d.n && (!p.causal || key <= pos);
            });
      };

      st.Reset();
      if constexpr (!Tr::kDesc) MbarWait(q_full(qb), (n_item / kQB) & 1);
      ++n_item;
      RunKeyTiles<Tile>(st, ring, tile, sQ0 + qb * Tr::kQBytes + cw * 64 * 128, my_turn, other_turn,
                        lane, p.scale_log2, next, after_k, prepare_v, mask, kTurnThreads);

      StoreItem<Tr>(st, smem, p, it, qb, cw, warp, lane, q_empty(qb));
    }
  }
  if (kPingPong && cw == 0) NamedSync(my_turn, 256);  // balances warpgroup 1's first "your turn"
#endif                                                // SPATTN_SM90A
}

template <class Tr, bool kSparse>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    PersistentFa3Kernel(const AttnParams p, const SparseIndexView idx, const SparseSchedule sched,
                        int num_items, int num_m_blocks, int flags,
                        const __grid_constant__ CUtensorMap tmap_q,
                        const __grid_constant__ CUtensorMap tmap_k,
                        const __grid_constant__ CUtensorMap tmap_v,
                        const __grid_constant__ CUtensorMap tmap_o) {
  PersistentFa3Body<Tr, kSparse>(p, idx, sched, num_items, num_m_blocks, flags, tmap_q, tmap_k,
                                 tmap_v, tmap_o);
}

// The sparse stream with a per-launch K/V ring (session 31, s31-sparse): one kernel holding two
// stream instances of one shape (TrA, TrB: the same block_m, tile, threads and CTAs per SM, rings
// of different depths: 2 K + 2 V slots and 2 K + 3 V slots in dense_fa3.cu); every CTA runs the
// same one, picked from the schedule's statistics
// (SparseSchedule::stats, written by the schedule's cost pass): TrB where the mean cost of an
// item with keys (64-key tiles) is at most `pick`, else TrA. pick -1: always TrA, -2: always TrB
// (the knob's A/B). No statistics (stats null): TrA.
template <class TrA, class TrB>
__global__ void __launch_bounds__(TrA::kThreads, TrA::kMinBlocks)
    PersistentFa3PickKernel(const AttnParams p, const SparseIndexView idx,
                            const SparseSchedule sched, int num_items, int num_m_blocks, int flags,
                            int pick, const __grid_constant__ CUtensorMap tmap_q,
                            const __grid_constant__ CUtensorMap tmap_k,
                            const __grid_constant__ CUtensorMap tmap_v,
                            const __grid_constant__ CUtensorMap tmap_o) {
  static_assert(TrA::kThreads == TrB::kThreads && TrA::kMinBlocks == TrB::kMinBlocks &&
                    TrA::kBM == TrB::kBM && TrA::kBN == TrB::kBN && TrA::kD == TrB::kD,
                "one launch shape");
  bool b = pick == -2;
  if (pick >= 0 && sched.stats != nullptr) {
    // {sum of the items' costs, items with keys}: the same two words for every thread.
    const unsigned long long sum = sched.stats[0], items = sched.stats[1];
    b = sum <= static_cast<unsigned long long>(pick) * items;
  }
  if (b) {
    PersistentFa3Body<TrB, true>(p, idx, sched, num_items, num_m_blocks, flags, tmap_q, tmap_k,
                                 tmap_v, tmap_o);
  } else {
    PersistentFa3Body<TrA, true>(p, idx, sched, num_items, num_m_blocks, flags, tmap_q, tmap_k,
                                 tmap_v, tmap_o);
  }
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_PERSISTENT_FA3_CUH_
