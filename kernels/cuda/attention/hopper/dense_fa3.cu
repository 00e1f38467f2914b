// Host side of the Hopper dense kernel: TMA descriptors (cuTensorMapEncodeTiled through the
// runtime's driver entry point, so no -lcuda) and the launch.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/attention/hopper/dense_fa3.cuh"
#include "kernels/cuda/attention/hopper/hopper_launch.h"
#include "kernels/cuda/attention/hopper/persistent_fa3.cuh"

namespace spattn {
namespace cuda {
namespace hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// [tokens, heads, head_dim] with element strides; boxes of 64 elements (128 bytes, one swizzle
// row) x 1 head x `box_rows` tokens.
bool EncodeTokens(CUtensorMap* map, DType dtype, const void* base, int64_t tokens, int heads,
                  int head_dim, int64_t token_stride, int64_t head_stride, int box_rows) {
  auto encode = Encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * 2,
                                 static_cast<cuuint64_t>(token_stride) * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, 3, const_cast<void*>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

bool EncodeAll(const AttnParams& p, int box_q, int box_k, CUtensorMap* tq, CUtensorMap* tk,
               CUtensorMap* tv) {
  const int kv_heads = p.num_q_heads / p.group;
  return EncodeTokens(tq, p.dtype, p.q, p.total_q, p.num_q_heads, p.head_dim, p.q_token_stride,
                      p.q_head_stride, box_q) &&
         EncodeTokens(tk, p.dtype, p.k, p.total_k, kv_heads, p.head_dim, p.k_token_stride,
                      p.k_head_stride, box_k) &&
         EncodeTokens(tv, p.dtype, p.v, p.total_k, kv_heads, p.head_dim, p.v_token_stride,
                      p.v_head_stride, box_k);
}

// An integer environment variable, `def` when unset or empty.
int EnvInt(const char* name, int def) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? def : std::atoi(v);
}

// The launch knobs of this file (kernels/cuda/README.md; each is described where it is used),
// read from the environment once per process (Knobs()), again only through ReloadKnobs().
struct LaunchKnobs {
  int l2_mb = -1;            // SPATTN_HOPPER_L2_MB (-1: unset)
  int tail_split = 1;        // SPATTN_HOPPER_TAIL_SPLIT
  bool narrow_first = true;  // SPATTN_HOPPER_NARROW_FIRST
  int pack_tails = 2;        // SPATTN_HOPPER_PACK_TAILS (the sparse kernel)
  int items = 2;             // SPATTN_HOPPER_ITEMS (the sparse kernel)
  int sparse_stages = 2;     // SPATTN_HOPPER_SPARSE_STAGES
  int sparse_ring = 0;       // SPATTN_HOPPER_SPARSE_RING (the stream's K/V ring; 0 per launch)
  int ring_v3_cost = 24;     // SPATTN_HOPPER_RING_V3_COST (the per-launch choice's bound)
  int column_lanes = 4;      // SPATTN_HOPPER_COLUMN_LANES
  int causal_bn = 176;       // SPATTN_HOPPER_CAUSAL_BN
  int full_bn = 176;         // SPATTN_HOPPER_FULL_BN
  int d128_stages = 2;       // SPATTN_HOPPER_D128_STAGES
  int d64_wgs = 3;           // SPATTN_HOPPER_D64_WGS
  bool bm64 = true;          // SPATTN_HOPPER_BM64
  bool dynamic = true;       // SPATTN_HOPPER_DYNAMIC (the sparse kernel's work list)
  int sleep_waits = 3;       // SPATTN_HOPPER_SLEEP_WAITS (the sparse stream's mbarrier waits)
  int stale_max = 8;         // SPATTN_HOPPER_STALE_MAX (the sparse stream's row maximum)
  bool tma_store = true;     // SPATTN_HOPPER_TMA_STORE (the sparse stream's epilogue)
  int early_desc = 0;        // SPATTN_HOPPER_EARLY_DESC (the sparse stream's next descriptor)
  int pair_step = 1;         // SPATTN_HOPPER_PAIR_STEP (block_m 64: 128-key consumer steps; 2: 3 V slots)
  std::string trace;         // SPATTN_HOPPER_TRACE (timeline file of the sparse stream)
  int trace_launch = 0;      // SPATTN_HOPPER_TRACE_LAUNCH
};

LaunchKnobs ReadKnobs() {
  LaunchKnobs k;
  k.l2_mb = EnvInt("SPATTN_HOPPER_L2_MB", k.l2_mb);
  k.tail_split = EnvInt("SPATTN_HOPPER_TAIL_SPLIT", k.tail_split);
  k.narrow_first = EnvInt("SPATTN_HOPPER_NARROW_FIRST", 1) != 0;
  k.pack_tails = EnvInt("SPATTN_HOPPER_PACK_TAILS", k.pack_tails);
  k.items = EnvInt("SPATTN_HOPPER_ITEMS", k.items);
  k.sparse_stages = EnvInt("SPATTN_HOPPER_SPARSE_STAGES", k.sparse_stages);
  k.sparse_ring = EnvInt("SPATTN_HOPPER_SPARSE_RING", k.sparse_ring);
  k.ring_v3_cost = EnvInt("SPATTN_HOPPER_RING_V3_COST", k.ring_v3_cost);
  k.column_lanes = EnvInt("SPATTN_HOPPER_COLUMN_LANES", k.column_lanes);
  k.causal_bn = EnvInt("SPATTN_HOPPER_CAUSAL_BN", k.causal_bn);
  k.full_bn = EnvInt("SPATTN_HOPPER_FULL_BN", k.full_bn);
  k.d128_stages = EnvInt("SPATTN_HOPPER_D128_STAGES", k.d128_stages);
  k.d64_wgs = EnvInt("SPATTN_HOPPER_D64_WGS", k.d64_wgs);
  k.bm64 = EnvInt("SPATTN_HOPPER_BM64", 1) != 0;
  k.dynamic = EnvInt("SPATTN_HOPPER_DYNAMIC", 1) != 0;
  k.sleep_waits = EnvInt("SPATTN_HOPPER_SLEEP_WAITS", k.sleep_waits);
  k.stale_max = std::max(-1, std::min(254, EnvInt("SPATTN_HOPPER_STALE_MAX", k.stale_max)));
  k.tma_store = EnvInt("SPATTN_HOPPER_TMA_STORE", 1) != 0;
  k.early_desc = EnvInt("SPATTN_HOPPER_EARLY_DESC", 0);
  // On since session 38: 32K 0.95-0.98 of the 64-key step, 128K a tie (NOTES, s38-sparse).
  k.pair_step = EnvInt("SPATTN_HOPPER_PAIR_STEP", k.pair_step);
  const char* trace = std::getenv("SPATTN_HOPPER_TRACE");
  k.trace = trace == nullptr ? "" : trace;
  k.trace_launch = EnvInt("SPATTN_HOPPER_TRACE_LAUNCH", k.trace_launch);
  return k;
}

LaunchKnobs& Knobs() {
  static LaunchKnobs knobs = ReadKnobs();
  return knobs;
}

// Heads per L2 section of the dense grid (DenseFa3Kernel's SectionTile): as many GQA groups as
// have their K and V (mean sequence length) within `SPATTN_HOPPER_L2_MB` (default 32 MB, as
// FlashAttention-3; the H100/H200 L2 is 50 MB), rounded down to a power of two, at least one group.
// 0 gives the plain order (heads fastest).
// Unless SPATTN_HOPPER_L2_MB is set, a non-causal grid whose kv heads hold at most kOneGroupMb
// of K/V each runs one GQA group per section (one head in MHA): its
// query blocks side by side, then the next group's, so the CTAs in flight read one or two kv
// heads' K/V tiles at the same time (NOTES.md: session 20 s20-dense for MHA d = 128, L2 hit rate
// 84% -> 94%, L2 load sectors -39%, 8K +3-4% on an H100, the 8-head sections of the 32 MB rule
// reading MHA's tiles 8 CTAs apart; session 21 s21-dense for GQA and d = 64: 8K medians
// +0.2-2.2% (one +6%), none lower).
// Causal grids keep the 32 MB rule (one-group sections at 8K: MHA 3-11% slower, GQA within
// 1.5%).
// The bound: 4 MB in sessions 20-21 (8K keys at d = 128, 16K at d = 64), 16 MB since session 22
// (32K keys at d = 128, 64K at d = 64; NOTES.md session 22 s22-dense: the 32K A/B against the
// 32 MB rule, SPATTN_HOPPER_L2_MB=32).
constexpr double kOneGroupMb = 16.0;

int SectionHeads(const AttnParams& p) {
  const int total_hb = p.num_q_heads * std::max(p.batch, 1);
  const int knob = Knobs().l2_mb;
  if (knob == 0) return p.num_q_heads;
  const double kv_bytes =
      static_cast<double>(p.total_k) / std::max(p.batch, 1) * p.head_dim * 2.0 * 2.0;
  if (knob < 0 && !p.causal && kv_bytes <= kOneGroupMb * 1048576.0) {
    return std::min(p.group, total_hb);
  }
  const int mb = knob < 0 ? 32 : knob;
  const double fit = mb * 1048576.0 / std::max(kv_bytes, 1.0);
  int64_t groups = 1;
  while (static_cast<double>(groups * 2) <= fit && groups * 2 * p.group <= total_hb) groups *= 2;
  return static_cast<int>(std::min<int64_t>(groups * p.group, total_hb));
}

int NumSms() {
  static int sms = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return n;
  }();
  return sms;
}

// The tail split of the dense grid (DenseFa3Kernel's DenseSplit): the last `ctas % SMs` query
// blocks (one CTA per SM: every dense shape takes more than half the shared memory) would run as
// a partial wave. Each of them runs as `pieces` CTAs over a share of its key tiles when the
// estimate of the tail's time (a piece costs 1 / pieces of a block plus kPieceCost, a merge
// kMergeCost per other piece, in waves of pieces) beats the whole blocks' one wave by 5%.
// Non-causal only (causal grids run the longest blocks first; the tail is short blocks).
// SPATTN_HOPPER_TAIL_SPLIT: unset/1 this estimate, 0 off, k >= 2 k pieces.
struct TailPlan {
  int64_t ctas = 0;       // whole blocks
  int64_t full_ctas = 0;  // of which run whole
  int pieces = 1;         // CTAs per split block (1: no split)
  int64_t split_blocks() const { return pieces > 1 ? ctas - full_ctas : 0; }
};

template <class Tr>
TailPlan PlanTail(const AttnParams& p, int max_q_len) {
  TailPlan t;
  const int blocks = (max_q_len + Tr::kBM - 1) / Tr::kBM;
  t.ctas = static_cast<int64_t>(p.num_q_heads) * blocks * p.batch;
  t.full_ctas = t.ctas;
  const int knob = Knobs().tail_split;
  if (p.causal || knob == 0 || t.ctas == 0) return t;
  const int sms = NumSms();
  const int64_t tail = t.ctas % sms;
  if (tail == 0) return t;
  const int64_t mean_keys = p.total_k / std::max(p.batch, 1);
  const int tiles = static_cast<int>((mean_keys + Tr::kBN - 1) / Tr::kBN);
  int pieces = 1;
  if (knob >= 2) {
    pieces = std::min(knob, 16);
  } else {
    constexpr double kPieceCost = 0.03, kMergeCost = 0.01;
    double best = 0.95;  // the tail's whole blocks: one wave, less the margin
    for (int k = 2; k <= std::min(8, tiles / 2); ++k) {
      const double waves = static_cast<double>((k * tail + sms - 1) / sms);
      const double est = waves * (1.0 / k + kPieceCost) + kMergeCost * (k - 1);
      if (est < best) {
        best = est;
        pieces = k;
      }
    }
  }
  if (pieces > 1) {
    t.full_ctas = t.ctas - tail;
    t.pieces = pieces;
  }
  return t;
}

// Workspace of a plan: the counters (256-byte aligned), then the partials.
template <class Tr>
int64_t CounterBytes(const TailPlan& t) {
  return (t.split_blocks() * 4 + 255) / 256 * 256;
}
template <class Tr>
int64_t SplitBytes(const TailPlan& t) {
  if (t.split_blocks() == 0) return 0;
  return CounterBytes<Tr>(t) +
         t.split_blocks() * t.pieces * (Tr::kD / 2 + 4) * (128 * Tr::kConsumerWgs) * int64_t{4};
}

template <class Tr>
cudaError_t LaunchShape(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  const int blocks = (max_q_len + Tr::kBM - 1) / Tr::kBM;
  if (blocks == 0 || p.batch == 0) return cudaSuccess;
  CUtensorMap tq, tk, tv;
  if (!EncodeAll(p, Tr::kBM, Tr::kBN, &tq, &tk, &tv)) return cudaErrorInvalidValue;
  auto kernel = DenseFa3Kernel<Tr>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  const TailPlan plan = PlanTail<Tr>(p, max_q_len);
  DenseSplit split;
  int64_t grid = plan.ctas;
  split.full_ctas = static_cast<int>(plan.ctas);
  if (plan.split_blocks() > 0 && p.maybe_dense_workspace != nullptr) {
    char* ws = static_cast<char*>(p.maybe_dense_workspace);
    split.full_ctas = static_cast<int>(plan.full_ctas);
    split.pieces = plan.pieces;
    split.counters = reinterpret_cast<int*>(ws);
    split.partials = reinterpret_cast<float*>(ws + CounterBytes<Tr>(plan));
    grid = plan.full_ctas + plan.split_blocks() * plan.pieces;
  }
  // SPATTN_HOPPER_NARROW_FIRST=0: partial first key tiles computed at the full tile width
  // (the A/B baseline of NOTES.md session 18).
  const bool narrow_first = Knobs().narrow_first;
  kernel<<<static_cast<unsigned>(grid), Tr::kThreads, Tr::kSmemBytes, stream>>>(
      p, tq, tk, tv, blocks, SectionHeads(p), split, narrow_first);
  return cudaGetLastError();
}

// ---- The sparse stream's timeline (SPATTN_HOPPER_TRACE=<file>; NOTES.md session 24) ----------
// Launch number SPATTN_HOPPER_TRACE_LAUNCH (default 0, the first) after each knob (re)load runs
// the traced instance (Traced<Tr>: clock64 stamps per item, persistent_fa3.cuh's TraceField)
// instead of the default one, waits for it and appends to the file a header line and one JSON
// line per (CTA, item): the producer's stamps "p" (round start, item looked up, Q issued, first
// K issued, last V issued) and the consumer warpgroup 0's "c" (waits for the item, Q landed,
// first K landed, first S issued, last P V done, epilogue stored), in SM cycles from the CTA's
// first stamp, and the consumer's K / V / turn wait cycles summed over the item. The other
// launches run the default kernel. Only the default bf16 d = 128 stream kernels have a traced
// instance. SPATTN_HOPPER_TRACE_TAG (read at each dump) labels the header (cuda_bench sets it
// per index). kernels/cuda/bench/sparse_timeline.py summarizes the file.
int& TraceLaunches() {
  static int n = 0;
  return n;
}

template <class Tr>
constexpr bool kTraceable = std::is_same<typename Tr::T, __nv_bfloat16>::value && Tr::kD == 128 &&
                            Tr::kCross && Tr::kLanes == 4 && Tr::kStages == 2 &&
                            Tr::kKStages == 2;

template <class Tr>
cudaError_t LaunchTraced(const AttnParams& p, const SparseIndexView& idx,
                         const SparseSchedule& sched, int num_items, int num_m_blocks, int flags,
                         int grid, const CUtensorMap& tq, const CUtensorMap& tk,
                         const CUtensorMap& tv, const CUtensorMap& to, cudaStream_t stream) {
  using TrT = Traced<Tr>;
  auto kernel = PersistentFa3Kernel<TrT, true>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TrT::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int per = (num_items + grid - 1) / grid;
  const int cap = std::min(num_items, 8 * per + 64);
  const size_t words = static_cast<size_t>(grid) * cap * kTraceWords;
  unsigned long long* buf = nullptr;
  if ((err = cudaMalloc(&buf, words * 8)) != cudaSuccess) return err;
  TraceBuf tb{buf, cap};
  if ((err = cudaMemsetAsync(buf, 0, words * 8, stream)) != cudaSuccess ||
      (err = cudaMemcpyToSymbolAsync(g_sparse_trace, &tb, sizeof(tb), 0, cudaMemcpyHostToDevice,
                                     stream)) != cudaSuccess) {
    cudaFree(buf);
    return err;
  }
  kernel<<<grid, TrT::kThreads, TrT::kSmemBytes, stream>>>(p, idx, sched, num_items,
                                                           num_m_blocks, flags, tq, tk, tv, to);
  err = cudaGetLastError();
  std::vector<unsigned long long> h(words);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) {
    err = cudaMemcpy(h.data(), buf, words * 8, cudaMemcpyDeviceToHost);
  }
  cudaFree(buf);
  if (err != cudaSuccess) return err;
  FILE* f = std::fopen(Knobs().trace.c_str(), "a");
  if (f == nullptr) return cudaSuccess;
  int clock_khz = 0, device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  const char* tag = std::getenv("SPATTN_HOPPER_TRACE_TAG");
  std::fprintf(f,
               "{\"trace\": \"%s\", \"items\": %d, \"ctas\": %d, \"block_m\": %d, \"flags\": %d, "
               "\"cap\": %d, \"clock_khz\": %d, \"total_q\": %lld}\n",
               tag == nullptr ? "" : tag, num_items, grid, Tr::kBM, flags, cap, clock_khz,
               static_cast<long long>(p.total_q));
  for (int c = 0; c < grid; ++c) {
    const unsigned long long* r0 = h.data() + static_cast<size_t>(c) * cap * kTraceWords;
    // The producer's words hold the low 32 bits of the SM's clock64: placed by the record's
    // consumer stamp kTrCQ (within 2^31 cycles of it).
    auto full = [](const unsigned long long* r, int field) {
      if (field > kTrPEnd || r[kTrCQ] == 0) return static_cast<long long>(r[field]);
      const unsigned long long ref = r[kTrCQ];
      return static_cast<long long>(ref) +
             static_cast<int32_t>(static_cast<uint32_t>(r[field]) - static_cast<uint32_t>(ref));
    };
    const long long base = full(r0, kTrPRound);
    for (int n = 0; n < cap; ++n) {
      const unsigned long long* r = r0 + static_cast<size_t>(n) * kTraceWords;
      if (r[kTrPItem] == 0 || r[kTrCQ] == 0) break;
      auto rel = [&](int field) { return r[field] == 0 ? -1LL : full(r, field) - base; };
      std::fprintf(f,
                   "{\"c\": %d, \"n\": %d, \"w\": %u, \"sm\": %u, \"tiles\": %llu, "
                   "\"g\": %llu, \"p\": [%lld, %lld, %lld, %lld, %lld], \"q\": [%lld, %lld, "
                   "%lld, %lld, %lld, %lld], \"kw\": %llu, \"vw\": %llu, \"tw\": %llu}\n",
                   c, n, static_cast<unsigned>(r[kTrMeta] & 0xffffffffu),
                   static_cast<unsigned>(r[kTrMeta] >> 32), r[kTrCTiles],
                   r[kTrGlobal], rel(kTrPRound), rel(kTrPItem), rel(kTrPQ), rel(kTrPK0),
                   rel(kTrPEnd), rel(kTrCWait), rel(kTrCQ), rel(kTrCK0), rel(kTrCQk),
                   rel(kTrCPvDone), rel(kTrCEpi), r[kTrCKWait], r[kTrCVWait], r[kTrCTurn]);
    }
  }
  std::fclose(f);
  return cudaSuccess;
}

// TrB (not void): the sparse stream's per-launch ring choice, PersistentFa3PickKernel<Tr, TrB>
// with `pick` (its argument: the mean item cost up to which TrB runs, -1 always Tr, -2 always
// TrB).
template <class Tr, bool kSparse, class TrB = void>
cudaError_t LaunchPersistent(const AttnParams& p, const SparseIndexView& idx,
                             const SparseSchedule& sched, int num_items, int num_m_blocks,
                             cudaStream_t stream, int pick = -1) {
  if (num_items <= 0 || p.batch == 0) return cudaSuccess;
  CUtensorMap tq, tk, tv;
  if (!EncodeAll(p, Tr::kBM, Tr::kBN, &tq, &tk, &tv)) return cudaErrorInvalidValue;
  constexpr bool kPick = !std::is_same<TrB, void>::value;
  using TrB_ = typename std::conditional<kPick, TrB, Tr>::type;
  constexpr int kSmem = Tr::kSmemBytes > TrB_::kSmemBytes ? Tr::kSmemBytes : TrB_::kSmemBytes;
  // (Each branch names only its own kernel: no instance of the other.)
  cudaError_t err;
  if constexpr (kPick) {
    err = cudaFuncSetAttribute(PersistentFa3PickKernel<Tr, TrB_>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  } else {
    err = cudaFuncSetAttribute(PersistentFa3Kernel<Tr, kSparse>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  }
  if (err != cudaSuccess) return err;
  const int grid = std::min(num_items, NumSms() * Tr::kMinBlocks);
  // Range tails packed with the columns (kFlagPackTails; SPATTN_HOPPER_PACK_TAILS: 2 (default)
  // every item with tails, 1 per item only where that saves tiles, 3 as 1 and also where it
  // ties if the item has columns (kFlagPackTies), 0 off; the schedule's cost model follows the
  // same knob, dispatch.cu).
  const int pack = Knobs().pack_tails;
  int flags = !kSparse || !Tr::kCross || pack == 0 ? 0
              : pack == 2                          ? kFlagPackTails | kFlagPackAlways
              : pack == 3                          ? kFlagPackTails | kFlagPackTies
                                                   : kFlagPackTails;
  // The dynamic work list (kFlagDynamic; SPATTN_HOPPER_DYNAMIC=0: the snake order for all
  // items, the A/B baseline of NOTES.md session 21). Needs the consumers to take their items
  // from the producer's descriptors (kDesc) and the schedule's counter.
  if (kSparse && Tr::kDesc && sched.counter != nullptr && Knobs().dynamic) flags |= kFlagDynamic;
  // The sparse stream's sleeping mbarrier waits (SPATTN_HOPPER_SLEEP_WAITS: bit 0 the producer's,
  // bit 1 the consumers'; default 3) and its stale row maximum (SPATTN_HOPPER_STALE_MAX: the
  // bound in log2 units, default 8; 0 moves the maximum wherever it rises; -1 rescales O every
  // tile, as before session 23). NOTES.md session 23 (s23-sparse).
  if (kSparse && Tr::kCross) {
    const int sw = Knobs().sleep_waits;
    flags |= ((sw & 1) ? kFlagSleepProducer : 0) | ((sw & 2) ? kFlagSleepConsumers : 0) |
             ((Knobs().stale_max + 1) << kStaleMaxShift);
    // The next tile's descriptor read under the current tile's GEMMs (kFlagEarlyDesc;
    // SPATTN_HOPPER_EARLY_DESC=1; default 0: at the step's start, as before session 32: range
    // indexes +1.4-2 % at 32K, gathered columns / sampled_lines -1.8 %; NOTES.md s32-sparse).
    // =2: range tiles only (kFlagEarlyDescRanges; session 33).
    if (Knobs().early_desc != 0) flags |= kFlagEarlyDesc;
    if (Knobs().early_desc == 2) flags |= kFlagEarlyDescRanges;
  }
  // The sparse stream's TMA-store epilogue (kFlagTmaStore; SPATTN_HOPPER_TMA_STORE=0: the
  // 16-byte stores of session 24, NOTES.md session 25 s25-sparse): O's map with 16-row boxes
  // (one warp's rows); batch 1 only (the TMA clips the last block's rows past the tensor's end;
  // in a varlen batch they would be the next sequence's); without a map (strides TMA cannot
  // describe) the stores as before.
  CUtensorMap to = tq;
  if (kSparse && Tr::kCross && Knobs().tma_store && p.batch == 1 &&
      EncodeTokens(&to, p.dtype, p.o, p.total_q, p.num_q_heads, p.head_dim, p.o_token_stride,
                   p.o_head_stride, 16)) {
    flags |= kFlagTmaStore;
  }
  if constexpr (kSparse && kTraceable<Tr>) {
    if (!Knobs().trace.empty() && TraceLaunches()++ == Knobs().trace_launch) {
      return LaunchTraced<Tr>(p, idx, sched, num_items, num_m_blocks, flags, grid, tq, tk, tv,
                              to, stream);
    }
  }
  if constexpr (kPick) {
    static_assert(kSparse && Tr::kCross, "the ring choice: the sparse stream only");
    PersistentFa3PickKernel<Tr, TrB_><<<grid, Tr::kThreads, kSmem, stream>>>(
        p, idx, sched, num_items, num_m_blocks, flags, pick, tq, tk, tv, to);
  } else {
    PersistentFa3Kernel<Tr, kSparse><<<grid, Tr::kThreads, kSmem, stream>>>(
        p, idx, sched, num_items, num_m_blocks, flags, tq, tk, tv, to);
  }
  return cudaGetLastError();
}

template <typename T, int kD, bool kSparse>
cudaError_t PersistentDim(const AttnParams& p, const SparseIndexView& idx,
                          const SparseSchedule& sched, int num_items, int num_m_blocks,
                          cudaStream_t stream) {
  if constexpr (kSparse) {
    // block_m 64: one consumer warpgroup per CTA, two CTAs per SM, 64-key tiles (2 ring slots
    // at d = 128, 4 at d = 64).
    // SPATTN_HOPPER_ITEMS (d = 128; PersistTraits::kItems, default 2): 1 = item and tile
    // descriptors without the cross-item stream, 0 = neither (the session-16 kernel), for A/B.
    const int items = kD == 128 ? Knobs().items : 2;
    if (idx.block_m == 64) {
      if (items == 0) {
        return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64, 0>, true>(
            p, idx, sched, num_items, num_m_blocks, stream);
      }
      if (items == 1) {
        return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64, 1>, true>(
            p, idx, sched, num_items, num_m_blocks, stream);
      }
      // SPATTN_HOPPER_PAIR_STEP=1, d = 128: two 64-key tiles of an item per consumer step
      // (PersistTraits::kPair, ConsumerStreamPair; session 36, H200 32K: a_shape / block_sparse /
      // vertical_slash +2.3 / +3.2 / +1.7 %). Its bytes follow the item, not the schedule
      // (ExpRow<true>, session 37). Off by default: 128K not yet a clear no-loss (s37-sparse,
      // H200: block_sparse 1.034 of the 64-key step's time, one process).
      // Not under SPATTN_HOPPER_TRACE: the timeline's stamps are the 64-key stream's.
      if constexpr (kD == 128) {
        // SPATTN_HOPPER_PAIR_STEP=2 (s38-sparse): the same step with 3 V slots (no alignment
        // slack: PersistTraits::kNoSlack), only where two of its CTAs fit an SM (else the 2-V
        // step: same bytes).
        if (Knobs().pair_step == 2 && Knobs().trace.empty()) {
          using Tr3 = PersistTraits<T, kD, 3, 2, 4, 64, 2, 2, true>;
          static const bool fits = [] {
            auto kernel = PersistentFa3Kernel<Tr3, true>;
            int n = 0;
            const bool ok =
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Tr3::kSmemBytes) == cudaSuccess &&
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, Tr3::kThreads,
                                                              Tr3::kSmemBytes) == cudaSuccess &&
                n >= Tr3::kMinBlocks;
            std::fprintf(stderr, "spattn: SPATTN_HOPPER_PAIR_STEP=2: %d B, %d CTAs an SM: %s\n",
                         Tr3::kSmemBytes, n, ok ? "3 V slots" : "too few, the 2-V pair step");
            return ok;
          }();
          if (fits) {
            return LaunchPersistent<Tr3, true>(p, idx, sched, num_items, num_m_blocks, stream);
          }
        }
        if (Knobs().pair_step != 0 && Knobs().trace.empty()) {
          return LaunchPersistent<PersistTraits<T, kD, 2, 2, 4, 64, 2, 0, true>, true>(
              p, idx, sched, num_items, num_m_blocks, stream);
        }
      }
      return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64>, true>(
          p, idx, sched, num_items, num_m_blocks, stream);
    }
    if (kD == 128 && items == 0) {
      return LaunchPersistent<PersistTraits<T, kD, 2, 2, 4, 128, 0>, true>(p, idx, sched, num_items,
                                                                           num_m_blocks, stream);
    }
    if (kD == 128 && items == 1) {
      return LaunchPersistent<PersistTraits<T, kD, 2, 2, 4, 128, 1>, true>(p, idx, sched, num_items,
                                                                           num_m_blocks, stream);
    }
  }
  if constexpr (kSparse && kD == 128) {
    // d = 128: 3 ring slots with one Q buffer, or 2 slots with two (SPATTN_HOPPER_SPARSE_STAGES).
    if (Knobs().sparse_stages == 3) {
      return LaunchPersistent<PersistTraits<T, 128, 3, 1>, true>(p, idx, sched, num_items,
                                                                 num_m_blocks, stream);
    }
    // Lanes per gathered key row (PersistTraits::kLanes, default 4; SPATTN_HOPPER_COLUMN_LANES
    // = 1, 2, 16 for the A/B of NOTES.md, session 16).
    switch (Knobs().column_lanes) {
      case 1:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 1>, true>(p, idx, sched, num_items,
                                                                      num_m_blocks, stream);
      case 2:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 2>, true>(p, idx, sched, num_items,
                                                                      num_m_blocks, stream);
      case 16:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 16>, true>(p, idx, sched, num_items,
                                                                       num_m_blocks, stream);
      default:
        break;
    }
    // The stream's K/V ring, chosen per launch (NOTES.md session 31, s31-sparse; session 30,
    // s30-ring measured the deeper rings): beside two Q buffers, 2 K + 2 V slots ("k2", the ring
    // of sessions 16-30) or 2 K + 3 V slots ("v3": an item's first V tiles come earlier; short
    // items, +0.4..4 % at 32K), one kernel holding both: v3 where the schedule's mean cost of an
    // item with keys (SparseSchedule::stats, 64-key tiles) is at most SPATTN_HOPPER_RING_V3_COST
    // (default 24 = 12 tiles of 128 keys), else k2. SPATTN_HOPPER_SPARSE_RING: 0 that choice
    // (default), 22 the k2 kernel alone (PersistentFa3Kernel; also whenever SPATTN_HOPPER_TRACE is
    // set: the traced instance), 23 always v3. (3 K + 2 V slots, "k3": slower than k2 at 32K and
    // 128K in session 31's call 1; not built.)
    const int ring = Knobs().trace.empty() ? Knobs().sparse_ring : 22;
    if (ring != 22) {
      const int pick = ring == 23 ? -2 : std::max(Knobs().ring_v3_cost, 0);
      return LaunchPersistent<PersistTraits<T, 128, 2>, true,
                              PersistTraits<T, 128, 3, 2, 4, 128, 2, 2>>(
          p, idx, sched, num_items, num_m_blocks, stream, pick);
    }
  }
  using Tr = PersistTraits<T, kD, kD == 128 ? 2 : 4>;
  return LaunchPersistent<Tr, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
}

template <bool kSparse>
cudaError_t PersistentTyped(const AttnParams& p, const SparseIndexView& idx,
                            const SparseSchedule& sched, int num_items, int num_m_blocks,
                            cudaStream_t stream) {
  if (p.dtype == DType::kBF16) {
    if (p.head_dim == 128) {
      return PersistentDim<__nv_bfloat16, 128, kSparse>(p, idx, sched, num_items, num_m_blocks,
                                                        stream);
    }
    return PersistentDim<__nv_bfloat16, 64, kSparse>(p, idx, sched, num_items, num_m_blocks,
                                                     stream);
  }
  if (p.head_dim == 128) {
    return PersistentDim<__half, 128, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
  }
  return PersistentDim<__half, 64, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
}

// Calls f(Shape<Tr>{}) with the dense kernel's traits for `p` (and the knobs).
template <class Tr>
struct Shape {
  using Traits = Tr;
};

template <typename T, class F>
auto WithShapeTyped(const AttnParams& p, F f) {
  if (p.head_dim == 128) {
    // Non-causal: 176-key tiles unless SPATTN_HOPPER_FULL_BN=128.
    // Causal: 176-key tiles too unless SPATTN_HOPPER_CAUSAL_BN=128 (NOTES.md session 17: 176
    // measured 4-9% faster at 32K).
    if (p.causal ? Knobs().causal_bn == 176 : Knobs().full_bn == 176) {
      return f(Shape<Fa3Traits<T, 128, 2, 2, 176>>{});
    }
    // 128-key tiles: a 2-slot K/V ring unless SPATTN_HOPPER_D128_STAGES=3.
    if (Knobs().d128_stages == 3) return f(Shape<Fa3Traits<T, 128, 3>>{});
    return f(Shape<Fa3Traits<T, 128, 2>>{});
  }
  // d = 64: 3 consumer warpgroups (192-row blocks) unless SPATTN_HOPPER_D64_WGS=2.
  if (Knobs().d64_wgs == 2) return f(Shape<Fa3Traits<T, 64, 4, 2>>{});
  return f(Shape<Fa3Traits<T, 64, 4, 3>>{});
}

template <class F>
auto WithShape(const AttnParams& p, F f) {
  if (p.dtype == DType::kBF16) return WithShapeTyped<__nv_bfloat16>(p, f);
  return WithShapeTyped<__half>(p, f);
}

}  // namespace

void ReloadKnobs() {
  Knobs() = ReadKnobs();
  TraceLaunches() = 0;
}

bool DenseSupported(const AttnParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return false;
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (p.total_k <= 0 || p.total_q <= 0 || p.group <= 0) return false;
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v)) return false;
  for (int64_t stride : {p.q_token_stride, p.q_head_stride, p.k_token_stride, p.k_head_stride,
                         p.v_token_stride, p.v_head_stride}) {
    if (stride <= 0 || stride % 8 != 0) return false;
  }
  return Encoder() != nullptr;
}

cudaError_t LaunchDense(const AttnParams& p, int max_q_len, bool persistent, cudaStream_t stream) {
  if (persistent) {
    const int blocks = (max_q_len + 127) / 128;
    return PersistentTyped<false>(p, SparseIndexView(), SparseSchedule(),
                                  blocks * p.num_q_heads * p.batch, blocks, stream);
  }
  return WithShape(p, [&](auto shape) {
    return LaunchShape<typename decltype(shape)::Traits>(p, max_q_len, stream);
  });
}

int64_t DenseWorkspaceBytes(const AttnParams& p, int max_q_len, bool persistent,
                            int64_t* zero_bytes) {
  *zero_bytes = 0;
  if (persistent || !DenseSupported(p)) return 0;
  return WithShape(p, [&](auto shape) -> int64_t {
    using Tr = typename decltype(shape)::Traits;
    const TailPlan plan = PlanTail<Tr>(p, max_q_len);
    const int64_t bytes = SplitBytes<Tr>(plan);
    if (bytes > 0) *zero_bytes = CounterBytes<Tr>(plan);
    return bytes;
  });
}

bool SparseSupported(const AttnParams& p, const SparseIndexView& index) {
  // block_m 64 on this path unless SPATTN_HOPPER_BM64=0 (then the deep wgmma kernel, variant 4).
  const bool bm_ok = index.block_m == 128 || (index.block_m == 64 && Knobs().bm64);
  return bm_ok && DenseSupported(p);
}

cudaError_t LaunchSparse(const AttnParams& p, const SparseIndexView& index,
                         const SparseSchedule& schedule, cudaStream_t stream) {
  return PersistentTyped<true>(p, index, schedule, schedule.num_items, 0, stream);
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn
