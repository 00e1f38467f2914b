// Internal launch API of the GPU index builders of vertical_slash, block_sparse and flex_prefill:
// plain params structs of device pointers and sizes, and launchers that return cudaError_t. The
// host side (builders/<method>_host.cc with builder_steps.h) sizes every buffer from host-known
// counts, carves it from the build's workspace and calls these; only code under kernels/cuda
// includes this header.
//
// Units: a (head slot, sequence) pair, numbered unit = slot * batch + seq. Rows: a (head slot,
// query block) pair of the SparseIndex, row = slot * num_blocks + block.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_MERGED_KERNELS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_MERGED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace spattn {
namespace cuda {
namespace merged {

// Keys per CTA of the last-rows estimate (4 tiles of 64).
inline constexpr int kEstKeysPerCta = 256;
// Longest estimate (last_q of vertical_slash, block_size of flex_prefill) the GPU path takes.
inline constexpr int kMaxEstimateRows = 1024;

// Per-sequence plan of the last-rows estimate: softmax of the sequence's last `n` query rows over
// its keys, reduced to column sums and diagonal sums (vertical_slash, flex_prefill).
struct EstimateSeq {
  int64_t col_base = 0;      // start of the sequence's columns in a slot's column array (= cu_k)
  int64_t diag_base = 0;     // start of its offsets in a slot's diagonal array
  int64_t dpart_base = 0;    // start of its diagonal partials: ctas * (n + kEstKeysPerCta - 1)
  int64_t rowpart_base = 0;  // start of its row-sum partials: n * ctas
  int32_t q_row0 = 0;        // global token of estimate row 0
  int32_t k_begin = 0;       // global token of key 0
  int32_t kl = 0;            // keys
  int32_t n = 0;             // estimate rows (0: the sequence has no queries)
  int32_t first_pos = 0;     // key position of estimate row 0
  int32_t min_offset = 0;    // smallest diagonal offset (query position - key) the rows reach
  int32_t num_offsets = 0;   // offsets min_offset .. min_offset + num_offsets - 1
  int32_t ctas = 0;          // key chunks of kEstKeysPerCta keys
  int32_t cta_begin = 0;     // prefix of ctas over the sequences
  int32_t row_base = 0;      // prefix of n over the sequences
};

struct EstimateParams {
  const void* q = nullptr;                        // [total_q, num_q_heads, head_dim]
  const void* k = nullptr;                        // [total_k, num_kv_heads, head_dim]
  int64_t q_token_stride = 0, q_head_stride = 0;  // elements
  int64_t k_token_stride = 0, k_head_stride = 0;
  DType dtype = DType::kBF16;
  int head_dim = 0;  // 64 or 128
  float scale = 0.f;
  bool causal = true;
  int num_slots = 0;
  const int32_t* slot_head = nullptr;  // [num_slots] q head of each slot
  int group = 1;                       // q heads per kv head
  int batch = 0;
  const EstimateSeq* seqs = nullptr;  // [batch]
  int total_ctas = 0;                 // sum of seqs[].ctas
  int max_n = 0;                      // largest seqs[].n (shared-memory sizing)
  // Per slot: rows_stride = sum n, rowpart_stride = sum n * ctas, col_stride = total_k,
  // diag_stride = sum num_offsets, dpart_stride = sum ctas * (n + kEstKeysPerCta - 1).
  int64_t rows_stride = 0, rowpart_stride = 0, col_stride = 0, diag_stride = 0, dpart_stride = 0;
  uint32_t* row_max = nullptr;  // [slots * rows_stride] ordered keys, zeroed before pass 1
  double* row_part = nullptr;   // [slots * rowpart_stride] partial sums of exp per (row, cta)
  float* row_inv = nullptr;     // [slots * rows_stride] 1 / sum, 0 for rows without keys
  double* col_sums = nullptr;   // [slots * col_stride]
  double* dpart = nullptr;      // [slots * dpart_stride]
  double* diag_sums = nullptr;  // [slots * diag_stride]
  // Set by the launcher (EstKnobs::est_tail 2): pass 3's diagonal sums of a full chunk by
  // balanced pairs of diagonals (the same sums, other threads; vertical_slash.cu).
  bool diag_pairs = false;
};

// Pass 1 (row maxima), 2 (row exp sums) or 3 (probabilities → column sums and diagonal
// partials); after pass 2 LaunchEstimateRowInv, after pass 3 LaunchEstimateDiagCombine.
cudaError_t LaunchEstimatePass(const EstimateParams& p, int pass, cudaStream_t stream);
cudaError_t LaunchEstimateRowInv(const EstimateParams& p, cudaStream_t stream);
cudaError_t LaunchEstimateDiagCombine(const EstimateParams& p, cudaStream_t stream);

// Selected lines (columns and diagonal offsets) per unit.
struct LineSeq {
  int64_t col_base = 0;        // start of the sequence's column slots within a slot's line array
  int64_t off_base = 0;        // start of its offset slots
  int32_t col_k = 0;           // vertical_slash: columns to keep (host-known count)
  int32_t off_k = 0;           // vertical_slash: offsets to keep
  int32_t forced_col_end = 0;  // columns [0, forced_col_end) rank first
  int32_t forced_off_lo = 0, forced_off_hi = 0;  // offset indices [lo, hi) rank first
};

struct LineSelectParams {
  int num_slots = 0, batch = 0;
  const EstimateSeq* seqs = nullptr;  // [batch]
  const LineSeq* lines = nullptr;     // [batch]
  const double* col_sums = nullptr;   // as EstimateParams
  const double* diag_sums = nullptr;
  int64_t col_stride = 0, diag_stride = 0;
  int32_t* line_cols = nullptr;  // [slots * cols_stride] key positions, increasing per unit
  int32_t* line_offs = nullptr;  // [slots * offs_stride] diagonal offsets, increasing per unit
  int64_t cols_stride = 0, offs_stride = 0;
  int32_t* unit_ncols = nullptr;  // [slots * batch]
  int32_t* unit_noffs = nullptr;  // [slots * batch]
  // flex_prefill (flex = true): per list, the fewest lines whose mass reaches gamma of the total,
  // clamped to [min_budget, max_budget]; only units with unit_is_vs[unit] != 0.
  bool flex = false;
  float gamma = 0.f;
  int min_budget = 0, max_budget = 0;
  const uint8_t* unit_is_vs = nullptr;
};
cudaError_t LaunchSelectLines(const LineSelectParams& p, cudaStream_t stream);

// Per-row merge of lines (and flex_prefill's kept blocks) into ranges + columns, exactly as
// RowKeys::Normalize after AddVerticalSlash: count pass (counts), then fill pass (at indptr).
struct MergeParams {
  int num_slots = 0, batch = 0, num_blocks = 0, block_m = 0;
  bool causal = true;
  const int32_t* cu_q = nullptr;           // [batch + 1] device
  const int32_t* cu_k = nullptr;           // [batch + 1] device
  const int32_t* block_offsets = nullptr;  // [batch + 1] device
  const int32_t* line_cols = nullptr;
  const int32_t* line_offs = nullptr;
  const int64_t* unit_col_base = nullptr;  // [slots * batch] start of a unit's columns
  const int64_t* unit_off_base = nullptr;  // [slots * batch]
  const int32_t* unit_ncols = nullptr;
  const int32_t* unit_noffs = nullptr;
  // Groups of the lines (LaunchGroupLines): column runs at 2 * unit_col_base, offset clusters
  // for full blocks and for the sequence's last (partial) block at 2 * unit_off_base.
  const int32_t* col_runs = nullptr;
  const int32_t* clusters_full = nullptr;
  const int32_t* clusters_last = nullptr;
  const int32_t* unit_nruns = nullptr;  // [slots * batch]
  const int32_t* unit_ncl_full = nullptr;
  const int32_t* unit_ncl_last = nullptr;
  const uint8_t* maybe_unit_is_vs = nullptr;  // flex: rows of other units are skipped
  int kept_block = 0;              // flex: each row also keeps key block 0 and its diagonal blocks
  int32_t* range_count = nullptr;  // count pass: [rows]
  int32_t* col_count = nullptr;
  // [rows * 64]: per row, each lane's inclusive prefix of new ranges (bit 31: its first range
  // continues the previous lane's last one), then each lane's inclusive prefix of columns;
  // written by the count pass, read by the fill pass (so it walks the row once, not twice).
  int32_t* lane_prefix = nullptr;
  const int32_t* range_indptr = nullptr;  // fill pass
  const int32_t* col_indptr = nullptr;
  int32_t* range_start = nullptr;
  int32_t* range_len = nullptr;
  int32_t* col_idx = nullptr;
};
cudaError_t LaunchMergeRows(const MergeParams& p, bool fill, cudaStream_t stream);
// Fills the groups of MergeParams (col_runs, clusters_*, unit_n*) from the selected lines.
cudaError_t LaunchGroupLines(const MergeParams& p, int32_t* col_runs, int32_t* clusters_full,
                             int32_t* clusters_last, int32_t* unit_nruns, int32_t* unit_ncl_full,
                             int32_t* unit_ncl_last, cudaStream_t stream);

// Mean-pooled keys per (kv head, key block of `block` keys aligned at key 0 of each sequence),
// summed in row order in fp32 like PooledKeys: out [num_kv_heads][total_kb][head_dim].
struct PoolKeysParams {
  const void* k = nullptr;
  int64_t k_token_stride = 0, k_head_stride = 0;
  DType dtype = DType::kBF16;
  int head_dim = 0, num_kv_heads = 0, block = 0, batch = 0;
  const int32_t* cu_k = nullptr;        // [batch + 1] device
  const int32_t* kb_offsets = nullptr;  // [batch + 1] device: prefix of key blocks
  int total_kb = 0;
  float* out = nullptr;
};
cudaError_t LaunchPoolKeys(const PoolKeysParams& p, cudaStream_t stream);

// Query-block rows processed together by one CTA (block_sparse and flex_prefill's query-aware
// heads): the pooled queries of `rows` consecutive query blocks of one unit.
struct RowGroup {
  int32_t slot = 0, seq = 0, first_block = 0, rows = 0;  // first_block: within the sequence
};

// Shared geometry of the pooled builders.
struct PooledSeq {
  int32_t q_begin = 0;  // cu_q
  int32_t ql = 0, kl = 0;
  int32_t nk = 0;          // key blocks
  int32_t kb_base = 0;     // prefix of nk
  int32_t block_base = 0;  // first global query block (block_offsets)
};

struct BlockRowsParams {
  const void* q = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  DType dtype = DType::kBF16;
  int head_dim = 0;
  float scale = 0.f;
  bool causal = true;
  int block = 0, top_k = 0;
  const int32_t* slot_head = nullptr;
  int group = 1, batch = 0, num_blocks = 0;
  const PooledSeq* seqs = nullptr;
  const float* pooled_k = nullptr;  // LaunchPoolKeys output
  int total_kb = 0;
  const RowGroup* groups = nullptr;
  int num_groups = 0;
  int max_rows = 0;  // rows per group (smem sizing)
  int nk_max = 0;
  int cap = 0;                     // range slots per row
  int32_t* tmp_start = nullptr;    // [rows * cap]
  int32_t* tmp_end = nullptr;      // [rows * cap]
  int32_t* range_count = nullptr;  // [rows]
  // Long sequences (the rows' logits and flags do not fit shared memory): per-CTA slots of
  // BlockSparseScratchBytes each in global memory, and the grid is `scratch_ctas` CTAs walking
  // the groups. nullptr: everything in shared memory, one CTA per group.
  unsigned char* scratch = nullptr;
  int scratch_ctas = 0;
  // PROFILE only (read on the host): launch the kernel instance that adds up its phases' cycles
  // into the counters BlockSparsePhasesBegin zeroes (block_sparse_host.cc).
  bool phases = false;
};
cudaError_t LaunchBlockSparseRows(const BlockRowsParams& p, cudaStream_t stream);
// Dynamic shared memory of LaunchBlockSparseRows for `max_rows` rows of up to nk_max key blocks
// (the kernel also takes ~8 KB of static shared memory); `global_scratch`: the logits and flags
// in global memory instead.
int64_t BlockSparseSmemBytes(int head_dim, int max_rows, int nk_max, bool global_scratch = false);
// Bytes of one CTA's global scratch slot (logits and per-warp flags).
int64_t BlockSparseScratchBytes(int max_rows, int nk_max);
// Most rows per group the row kernels take (block_sparse and flex_prefill).
inline constexpr int kMaxRowsPerGroup = 16;

// Moves per-row slots [row * cap, + count) into the CSR arrays at range_indptr.
cudaError_t LaunchCompactRanges(const int32_t* tmp_start, const int32_t* tmp_end, int cap,
                                int64_t rows, const int32_t* range_indptr, int32_t* range_start,
                                int32_t* range_len, cudaStream_t stream);

// ---- flex_prefill

// Per-unit state of the flattened query-aware selection (a radix walk over the probabilities'
// bits, 8 bits a level).
struct FlexUnitState {
  double target = 0;  // gamma * total mass
  double t_rem = 0;   // mass still needed inside the current prefix group
  unsigned long long prefix = 0, mask = 0;
  int32_t take_eq = 0;     // entries of the prefix group taken (INT32_MAX: all)
  int32_t resolved = 0;    // 1: the rule is final
  int32_t needs_ties = 0;  // 1: take_eq < group size at full resolution (tie ranks needed)
  int32_t pad = 0;
};

struct FlexParams {
  // Inputs.
  const void* q = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  DType dtype = DType::kBF16;
  int head_dim = 0;
  float scale = 0.f;
  bool causal = true;
  int block = 0;
  float gamma = 0.f, tau = 0.f;
  int min_blocks = 0, max_blocks = 0;  // per query block; max_blocks 0 = no limit
  bool flatten = true;
  const int32_t* slot_head = nullptr;
  int group = 1, num_slots = 0, batch = 0, num_blocks = 0;
  const PooledSeq* seqs = nullptr;
  const EstimateSeq* est = nullptr;
  const float* pooled_k = nullptr;
  int total_kb = 0;
  const double* col_sums = nullptr;
  int64_t col_stride = 0;
  // Decision scratch: per slot, total_kb entries each.
  double* truth = nullptr;
  double* estimate = nullptr;
  double* terms = nullptr;        // [slots * total_kb * 2]
  uint8_t* unit_is_vs = nullptr;  // [slots * batch]
  // Session 35: the decision's arrays in shared memory (32 * decide_nk bytes, decide_nk >= every
  // sequence's key blocks) where they fit; false or too long: the global scratch above.
  bool decide_smem = false;
  int decide_nk = 0;
  // Query-aware rows.
  const RowGroup* groups = nullptr;
  int num_groups = 0, max_rows = 0, nk_max = 0;
  float* row_mx = nullptr;      // [slots * num_blocks]
  double* row_sum = nullptr;    // [slots * num_blocks]
  double* row_total = nullptr;  // [slots * num_blocks]
  // [slots * num_blocks] flatten: tie counts, then their exclusive prefix; otherwise each row's
  // gamma count k (written by the count pass, read by the fill pass).
  int32_t* row_ties = nullptr;
  int* hist_count = nullptr;       // [slots * batch * 256]
  double* hist_mass = nullptr;     // [slots * batch * 256]
  FlexUnitState* state = nullptr;  // [slots * batch]
  int32_t* range_count = nullptr;  // [rows]
  int32_t* col_count = nullptr;
  const int32_t* range_indptr = nullptr;
  int32_t* range_start = nullptr;
  int32_t* range_len = nullptr;
  // Long sequences: the query-aware rows' probabilities and per-warp flags in per-CTA global
  // slots of FlexQaScratchBytes, the grid `scratch_ctas` CTAs walking the groups (as
  // BlockRowsParams::scratch). nullptr: shared memory, one CTA per group.
  unsigned char* scratch = nullptr;
  int scratch_ctas = 0;
};

// Decision per unit: sqrt-JS distance of the pooled estimate against the last block's true block
// distribution; unit_is_vs = !(distance < tau). Needs the estimate's column sums.
cudaError_t LaunchFlexDecide(const FlexParams& p, cudaStream_t stream);
// Query-aware rows, one launch per mode: 0 stats (+ level-0 histogram), 1 histogram of level
// `level`, 2 tie counts, 3 count, 4 fill.
cudaError_t LaunchFlexQaRows(const FlexParams& p, int mode, int level, cudaStream_t stream);
// Dynamic shared memory of LaunchFlexQaRows (plus ~28 KB static); `global_scratch`: the
// probabilities and flags in global memory instead.
int64_t FlexQaSmemBytes(int head_dim, int max_rows, int nk_max, bool global_scratch = false);
// Bytes of one CTA's global scratch slot (probabilities and per-warp flags).
int64_t FlexQaScratchBytes(int max_rows, int nk_max);
// Levels of the flattened selection (8 bits of the 64-bit keys each).
inline constexpr int kFlexLevels = 8;
// Per unit: after the level's histogram, picks the digit where the cumulative mass crosses the
// target and prepares the next level (level 0 also sums the unit's total).
cudaError_t LaunchFlexQaScan(const FlexParams& p, int level, cudaStream_t stream);
// Per unit with needs_ties: exclusive prefix of row_ties over the unit's rows.
cudaError_t LaunchFlexTieScan(const FlexParams& p, cudaStream_t stream);
// flex_prefill's pooled keys: LaunchPoolKeys' values, two channels a thread (flex_prefill.cu).
cudaError_t LaunchFlexPoolKeys(const PoolKeysParams& p, cudaStream_t stream);
// Session 35: exclusive scans of the merge's row counts (n = rows + 1 entries, the last 0) into
// the indptr arrays in one launch of one CTA; `totals` (2 entries, e.g. mapped pinned host
// memory) gets the range and column totals (flex_prefill.cu).
cudaError_t LaunchFlexCsrScan(const int32_t* range_count, const int32_t* col_count,
                              int32_t* range_indptr, int32_t* col_indptr, int64_t n,
                              int32_t* totals, cudaStream_t stream);

}  // namespace merged
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_MERGED_KERNELS_H_
