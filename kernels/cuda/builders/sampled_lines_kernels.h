// Internal launch API of the GPU sampled_lines index builder (the twin of
// kernels/builders/sampled_lines.cc; host side builders/sampled_lines_host.cc). Plain structs of
// device pointers and sizes; launchers return cudaError_t. Only code under kernels/cuda includes
// this.
//
// Work: the sampled rows of consecutive query blocks of one sequence are packed into groups of at
// most kSlGroupRows rows and kSlGroupBlocks blocks; one CTA per (group, head slot) computes their
// logits against every key the group sees on tensor cores, three times: (1) each row's max and sum
// (online, log2 domain), (2) per block a histogram of entry masses over the bins of
// SampledLinesBin (fixed-point masses, one shared atomic per entry) -> each block's threshold bin
// and a bound on its kept entries (entries below a provable per-block cut bin are not counted;
// the block's total is the sum of its live rows' weights), (3) the kept entries, written to the
// block's slice of an entry list; then a small kernel classifies each entry as a column or a
// diagonal by the last-rows evidence (vertical_slash's estimate). A group whose keys are many
// more than the average CTA's share is split by key tiles into several items (one CTA per item
// and slot, longest items first): pass 1 writes per-item (max, sum) merged by SlMergeStats in split
// order, pass 2 adds each item's fixed-point histograms into global ones with integer atomics
// (order-free: the same bins as one CTA) and a per-block kernel derives thr and the bound, pass 3
// takes slice slots from a global per-row cursor (entry order within a slice is free: the
// classify step and the assembler are per entry). Pass 3 keeps an entry iff its raw product
// q . k >= a per-row threshold found by bisection over the floats on the exact mass test (the
// same test: the test is monotone in q . k, sampled_lines_exp2.h). The row assembler
// (common/row_assembly.cuh) turns each row's entries plus its sink and local ranges into the
// SparseIndex row.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_KERNELS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/cuda/builders/merged_kernels.h"
#include "kernels/cuda/builders/sampled_lines_exp2.h"

namespace spattn {
namespace cuda {

constexpr int kSlGroupRows = 64;      // sampled rows per CTA (4 warps x 16)
constexpr int kSlGroupBlocks = 32;    // query blocks per CTA (histograms in shared memory)
constexpr int kSlBins = 258;          // = kSampledLinesBins (sampled_lines.h)
constexpr int kSlBinFloor = 759;      // = kSampledLinesBinFloor
constexpr float kSlColumnLeak = 8.f;  // = kSampledLinesColumnLeak
// clip_diagonals' codes carry the sampled row (< block_m <= 128) in their low 7 bits: (o + k_len)
// < 2 k_len, so k_len <= kSlMaxAsmSegs x 64K keys (8M) keeps a code within int32.
constexpr int kSlClipRows = 128;

// Sampled rows of consecutive query blocks of one sequence.
struct SlGroup {
  int seq;
  int row_begin, rows;      // into the row table
  int block_begin, blocks;  // global query blocks
  int key_end;              // keys any of its rows sees
  int part_begin, parts;    // its items (key-tile ranges) as part_begin + split, split < parts
  int split_block;          // parts > 1: its first block among the split groups' blocks; else -1
  int tile_base;            // session 41: its key tiles' first record in SlArgs::tile_max
};

// One CTA's work per head slot: key tiles [tile_begin, tile_end) of one group.
struct SlItem {
  int group;
  int split;  // 0 .. parts - 1 (key order)
  int tile_begin, tile_end;
};

// One sampled row.
struct SlRow {
  int q_row;  // row within the sequence
  int pos;    // its key position
  int block;  // global query block
  float w;    // 1 / (rows sampled in its block)
  int group;  // its group
};

struct SlArgs {
  AttnParams p;
  float scale = 0.f;               // softmax_scale
  const int32_t* heads = nullptr;  // [slots]
  int num_slots = 0;
  int num_blocks = 0;
  const SlGroup* groups = nullptr;  // [num_groups]
  int num_groups = 0;
  const SlItem* items = nullptr;  // [num_items], longest first (launch order)
  int num_items = 0;
  const SlRow* rows = nullptr;  // [num_rows]
  int num_rows = 0;
  // Split groups (parts > 1). Pass 1's per-item row statistics [slots * num_items * kSlGroupRows]
  // (index (slot * num_items + part_begin + split) * kSlGroupRows + row in group): log2 max, sum.
  float* part_max = nullptr;
  float* part_sum = nullptr;
  // Pass 2: per (slot, split block) [slots * split_blocks]: the fixed-point histogram (zeroed,
  // x kSlBins), the live rows' weight sum and visible keys (written by split 0), the global block.
  int split_blocks = 0;
  unsigned* split_hist = nullptr;
  float* split_wsum = nullptr;
  int32_t* split_vis = nullptr;
  const int32_t* split_block_ids = nullptr;  // [split_blocks]
  const BlockGeoDev* geo = nullptr;          // [num_blocks]
  float gamma = 0.f;                         // every slot's, unless `gammas`
  const float* gammas = nullptr;  // [slots] per slot (BuildOptions::sampled_lines_gammas), or null
  float diagonal_floor = 0.f;     // SampledLinesParams::diagonal_floor (units of 1 / k_len)
  float short_floor = 0.f;        // SampledLinesParams::short_floor (< 64K keys; 0 = off)
  float diagonal_cost = 0.f;      // SampledLinesParams::diagonal_cost (0 = off)
  bool clip_diagonals = false;    // SampledLinesParams::clip_diagonals (the diagonal codes below)
  // Evidence: vertical_slash's estimate over the last rows (merged_kernels.h EstimateParams).
  const merged::EstimateSeq* ev_seqs = nullptr;  // [batch]
  const double* col_sums = nullptr;              // [slots * col_stride]
  const double* diag_sums = nullptr;             // [slots * diag_stride]
  int64_t col_stride = 0, diag_stride = 0;
  int batch = 0;
  // The evidence as the per-row means V(j) and D(o) (same layouts as col_sums / diag_sums),
  // written by the emit launcher before pass 3, or earlier by LaunchSampledLinesEvidence
  // (evidence_ready: the emit launcher then leaves them).
  float* col_mean = nullptr;
  float* diag_mean = nullptr;
  bool evidence_ready = false;
  // Per sampled row (slot-major [slots * num_rows]): log2-domain max and 1 / sum.
  float* row_max2 = nullptr;
  float* row_inv = nullptr;
  // Per index row (slot * num_blocks + block): threshold bin, a bound on its kept entries (pass
  // 2; scanned in place to the offsets of their slices), the kept entries (pass 3).
  int32_t* thr = nullptr;
  int64_t* kept = nullptr;    // [rows + 1]
  int32_t* counts = nullptr;  // [rows] (zeroed: split groups' pass 3 cursor)
  // Kept entries: pass 3 writes (row position - its block's first row position) * k_len + key j,
  // the classify step turns them into key j (column) or -1 - (o + k_len) (diagonal o); with
  // clip_diagonals -1 - ((o + k_len) * kSlClipRows + rel), rel = the sampled row's position - its
  // block's first row position (SlDiagonalKeys).
  int32_t* entries = nullptr;
  // Pass 3 tests every entry's mass (SPATTN_SL_EMIT_EXACT=1, for comparisons) instead of the
  // equivalent threshold on its raw product q . k.
  bool emit_exact = false;
  // Pass 3's 5-CTA instance (one key buffer) writes the previous tile's entries after tile t + 1's
  // load is issued (SPATTN_SL_EMIT_FLUSH=late) instead of under tile t's products (early, the
  // default). The same entries either way.
  bool emit_flush_late = false;
  // The classify step loads a few entries per thread before it gathers their evidence and
  // classifies them (SlClassifyKernel); false (SPATTN_SL_CLASSIFY_BATCH=0): main's loop, one entry
  // per step. The same codes either way.
  bool classify_batch = true;
  // Pass 2 computes every tile's masses (SPATTN_SL_HIST_EXACT=1, for comparisons) instead of
  // skipping a warp's tile where no raw product reaches its row's count threshold.
  bool hist_exact = false;
  // Pass 2's shared histograms per CTA: the largest group's blocks (<= kSlGroupBlocks; 21 at 3
  // sampled rows per block), so that 5 CTAs per SM fit (SlKnobs::ctas).
  int hist_blocks = kSlGroupBlocks;
  // Session 30. kv_run: the slots come in runs of kv_run consecutive slots of one kv head (divides
  // num_slots; 1 if not even in pairs), the runs SlCtaUnit's launch order keeps together.
  // order_band: 0 = the passes' launch order item by item (slot minor); B > 0 = bands of B items,
  // kv-head run by run within a band (set per pass from SlKnobs::order_band1-3 at launch).
  int kv_run = 1;
  int order_band = 0;
  // Session 41 (SlKnobs::tile_list). Pass 1 records per (slot, group key tile, group row) an
  // upper bound of the row's largest Sanitize(q . k * scale_log2) over the tile's visible keys,
  // as bf16 rounded up (-inf where it sees none): tile_max[slot * tile_stride + (g.tile_base + t)
  // * kSlGroupRows + row]; null: not recorded. Passes 2 (tile_list bit 0) and 3 (bit 1) then
  // load and multiply only the key tiles where some row's bound reaches the Sanitize'd logit of
  // its count / keep threshold on q . k: no entry of a skipped tile counts or is kept (both tests
  // are monotone in q . k), so the same index.
  uint16_t* tile_max = nullptr;
  int64_t tile_stride = 0;
  int tile_list = 0;
};

// The build's comparison knobs, read from the environment once per process (at first use):
// SPATTN_SL_SPLIT_TILES, SPATTN_SL_SPLIT_WAVES (sampled_lines_host.cc SplitLength),
// SPATTN_SL_EMIT_EXACT, SPATTN_SL_EMIT_FLUSH (=late: SlArgs::emit_flush_late),
// SPATTN_SL_CLASSIFY_BATCH (=0: SlArgs::classify_batch off),
// SPATTN_SL_HIST_EXACT, SPATTN_SL_ASM_BUCKET (=0 / =1: never / always bucket the entries by
// assembler segment), SPATTN_SL_ASM_SPANS (=0: SlAsmArgs::row_spans off) and SPATTN_SL_WGMMA (=0:
// passes 1-3's products by mma.sync, main's before session 26, instead of wgmma on a compute
// capability 9.0 device; the same products bit for bit, checked by CountSampledLinesTileMismatches)
// and SPATTN_SL_TILE_CENSUS (=1: passes 2 and 3 count their warp tiles that add nothing, printed to
// stderr per build; a diagnostic, a separate kernel instance, it synchronizes). Tests change them
// through the returned reference, between builds only.
struct SlKnobs {
  int split_tiles = 0;  // > 0: every split item has this many key tiles
  int split_waves = 6;  // <= 0: never split
  bool emit_exact = false;
  bool emit_flush_late = false;
  bool classify_batch = true;  // SPATTN_SL_CLASSIFY_BATCH (=0: off): SlArgs::classify_batch
  bool hist_exact = false;
  int asm_bucket = -1;    // -1: bucket rows of >= 5 segments; 0 / 1: never / always
  bool asm_spans = true;  // SlAsmArgs::row_spans
  int bucket_loads = 1;   // SPATTN_SL_BUCKET_LOADS (8: batched): SlAsmArgs::bucket_loads
  bool tile_census = false;
  bool wgmma = true;
  // SPATTN_SL_CTAS=P1,P2,P3: CTAs per SM the wgmma instances of passes 1-3 are built for (their
  // __launch_bounds__: 4 = 128 registers, main's before session 27; 5 = 96 registers; a missing
  // value 4). Pass 2's 5 needs its histograms to leave room for 5 CTAs (SlArgs::hist_blocks <=
  // 21), else it runs the 4-CTA instance. Pass 3's 5 (session 28) reads Q by the SS wgmma from
  // shared memory and loads its key tiles into one buffer (its 128-register instance: Q in
  // registers, two key buffers). The same index either way (the same products and tests).
  int ctas1 = 5;
  int ctas2 = 5;
  int ctas3 = 5;
  // Session 30. SPATTN_SL_ORDER_BAND=B1,B2,B3 (a missing value 0): the launch order of passes 1-3
  // (SlArgs::order_band; >= the items: kv-head runs over the whole launch). The same index.
  // Pass 3 defaults to one band of every item: its CTAs of one kv head then stream the same key
  // tiles together (H100, session 30's combined run: emit 7.96 / 8.18 -> 7.11 / 7.23 ms at 128K,
  // 0.567 -> 0.552 at 32K, same index); passes 1-2 lost in that order (s30-slkv: 4.39 -> 4.88,
  // 9.50 -> 10.18 ms). SPATTN_SL_ORDER_BAND=0 gives the item order in every pass.
  int order_band1 = 0;
  int order_band2 = 0;
  int order_band3 = 1 << 30;
  // Session 33 (host only; the same index either way). est_stream: the last-rows estimate, which
  // only the emit launch reads, runs on a second stream beside passes 1-2 and is joined before
  // the emit launch (SPATTN_SL_EST_STREAM=0: main's, on the build's stream before pass 1; 1: the
  // second stream at the device's greatest priority; 2: at the default priority).
  // one_upload: the host tables (heads, evidence sequences, groups, items, rows, geometry, ...)
  // in one copy (SPATTN_SL_ONE_UPLOAD=0: main's, one pageable copy per table).
  int est_stream = 1;
  bool one_upload = true;
  // Session 38 (host only; the same index). early_est: the estimate (its heads and sequences in
  // a small copy of their own) is enqueued before the host builds the rows / groups / items
  // tables, so they are built while the GPU runs it (SPATTN_SL_EARLY_EST=1; 0: main's order).
  // On since session 38: 32K build 0.97x of main's order on an H200 (NOTES, "Session 38 — lead").
  bool early_est = true;
  // Session 41 (the same index; SlArgs::tile_max): SPATTN_SL_TILE_LIST=L, bit 0 pass 2, bit 1
  // pass 3 skip the key tiles where pass 1's per-row tile maxima say no entry counts / is kept
  // (0: main's, no record). Off where the records would take more than 256 MiB.
  int tile_list = 0;
};
SlKnobs& SampledLinesKnobs();

// Pass 1 (row statistics).
cudaError_t LaunchSampledLinesStats(const SlArgs& a, cudaStream_t stream);
// Pass 2 (histograms -> thr, kept counts).
cudaError_t LaunchSampledLinesHistogram(const SlArgs& a, cudaStream_t stream);
// The evidence means V(j), D(o) from the estimate's sums alone (SlArgs::col_mean, diag_mean).
cudaError_t LaunchSampledLinesEvidence(const SlArgs& a, cudaStream_t stream);
// The evidence means (unless SlArgs::evidence_ready), pass 3 (the kept entries into the slices at
// the scanned offsets in `kept`, their number into `counts`), then the entries classified as
// columns or diagonals.
cudaError_t LaunchSampledLinesEmit(const SlArgs& a, cudaStream_t stream);

// Row assembly: per index row its entries plus sink [0, sink) and local
// [first_pos - local + 1, last_pos].
struct SlAsmArgs {
  const BlockGeoDev* geo = nullptr;
  int num_blocks = 0;
  int num_rows = 0;                  // slots * num_blocks
  const int64_t* offsets = nullptr;  // [num_rows + 1] entry slices
  const int32_t* counts = nullptr;   // [num_rows] entries in each slice
  const int32_t* entries = nullptr;
  const int32_t* k_lens = nullptr;  // [batch]
  int sink_tokens = 0, local_tokens = 0;
  // SampledLinesParams::clip_diagonals, rows_per_block and edge_rows: a diagonal code's keys are
  // those of the rows its sampled row stands for (SampledLinesRowSpan).
  bool clip_diagonals = false;
  int rows_per_block = 0;
  bool edge_rows = true;
  // The assembler source's per-entry work cut (SlAsmSrc): each row's sampled rows' spans found
  // once (Begin), diagonals outside a segment's keys skipped before their span is found, a few
  // entries loaded per thread at a time. false (SPATTN_SL_ASM_SPANS=0): main's loop, every
  // diagonal entry of every segment calls SampledLinesRowSpan (comparisons, tests). The same bits
  // either way.
  bool row_spans = true;
  // Session 31, opt-in (SPATTN_SL_BUCKET_LOADS=8; not measured): entries each thread loads before
  // it buckets or copies any (1: main's loops, one dependent load per thread and step; > 1: 8).
  // The same buckets (a bucket's order is the atomics' either way).
  int bucket_loads = 1;
  // The entries bucketed in place by the assembler's key segments (LaunchSampledLinesBucket), so
  // that each segment reads only its own; null `seg`: every segment reads the row's whole slice.
  // Bucket 2 s holds the row's entries whose keys reach segment s's bit arrays and no later
  // segment's, bucket 2 s + 1 those that reach segment s + 1's too (an entry spans <= 128 keys).
  int max_segs = 0;              // segments of the longest row (SampledLinesAsmSegments)
  int32_t* seg = nullptr;        // [num_rows * (2 max_segs + 1)] bucket sizes, then starts
  int32_t* max_count = nullptr;  // [1] the longest slice (count pass; zeroed before)
  int32_t* bucketed = nullptr;   // = entries, rewritten in bucket order by the fill pass
  int32_t* staging = nullptr;    // [staging_rows * staging_len] a copy of one row per CTA
  int staging_rows = 0;
  int64_t staging_len = 0;
};
cudaError_t LaunchSampledLinesAssemble(const SlAsmArgs& a, const row_assembly::AsmOut& out,
                                       bool fill, cudaStream_t stream);

// The assembler's segments of a row with keys [0, key_end) (common/row_assembly.cuh walks
// key_end / 32 + 1 words, kSlAsmSegWords a segment), and the most the bucketing takes.
constexpr int kSlAsmSegWords = 2048;  // = row_assembly::kAsmSegWords
constexpr int kSlMaxAsmSegs = 128;    // 8M keys
inline int SampledLinesAsmSegments(int key_end) {
  return static_cast<int>((static_cast<int64_t>(key_end) + 31) / 32 / kSlAsmSegWords) + 1;
}
// Count pass (fill false): each row's bucket sizes into `seg`, the longest slice into
// `max_count`; fill pass (staging carved, staging_rows CTAs): each row's slice copied to its CTA's
// staging and written back in bucket order, `seg` turned into bucket starts (entries that set no
// key dropped). Needs max_segs <= kSlMaxAsmSegs.
cudaError_t LaunchSampledLinesBucket(const SlAsmArgs& a, bool fill, cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SAMPLED_LINES_KERNELS_H_
