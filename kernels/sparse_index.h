// SparseIndex: the one format every method's index builder produces and the sparse kernel reads.
//
// For each head slot s (a query head, listed in `heads`) and each query block b of `block_m`
// query rows (blocks are numbered over the whole batch; sequence i owns blocks
// [block_offsets[i], block_offsets[i+1])), row r = s * num_blocks + b holds two CSR key sets:
//   ranges  [range_indptr[r], range_indptr[r+1]): contiguous key spans [start, start + len)
//   columns [col_indptr[r], col_indptr[r+1]): single keys, gathered one by one
// Key numbers are positions within the sequence, 0 .. k_len-1. Builders guarantee: ranges sorted,
// non-empty, non-overlapping and non-adjacent; columns sorted, unique, outside every range; no key
// after the block's last query position when causal. The kernel applies the per-row causal mask.
#ifndef SPATTN_KERNELS_SPARSE_INDEX_H_
#define SPATTN_KERNELS_SPARSE_INDEX_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/problem.h"

namespace spattn {

// Non-owning view of a SparseIndex; what kernels take. Pointers are host or device memory.
struct SparseIndexView {
  int block_m = 0;
  int num_heads = 0;                       // head slots
  int num_blocks = 0;                      // query blocks over the batch
  const int32_t* heads = nullptr;          // [num_heads] q head of each slot
  const int32_t* block_offsets = nullptr;  // [batch + 1]
  const int32_t* range_indptr = nullptr;   // [num_heads * num_blocks + 1]
  const int32_t* range_start = nullptr;    // [num_ranges]
  const int32_t* range_len = nullptr;      // [num_ranges]
  const int32_t* col_indptr = nullptr;     // [num_heads * num_blocks + 1]
  const int32_t* col_idx = nullptr;        // [num_cols]
};

struct SparseIndex {
  int block_m = 64;
  std::vector<int32_t> heads;
  std::vector<int32_t> block_offsets;
  std::vector<int32_t> range_indptr;
  std::vector<int32_t> range_start;
  std::vector<int32_t> range_len;
  std::vector<int32_t> col_indptr;
  std::vector<int32_t> col_idx;

  int num_heads() const { return static_cast<int>(heads.size()); }
  int num_blocks() const { return block_offsets.empty() ? 0 : block_offsets.back(); }
  int64_t num_rows() const { return static_cast<int64_t>(num_heads()) * num_blocks(); }
  int64_t row(int slot, int block) const {
    return static_cast<int64_t>(slot) * num_blocks() + block;
  }
  SparseIndexView view() const;
};

// The key set of one (head slot, query block) row while a builder assembles it.
struct RowKeys {
  std::vector<std::pair<int32_t, int32_t>> ranges;  // [start, end) half-open
  std::vector<int32_t> cols;

  void AddRange(int64_t start, int64_t end);  // Empty or inverted spans are ignored.
  void AddCol(int64_t key) { cols.push_back(static_cast<int32_t>(key)); }
  // Clips to [0, key_end), sorts and merges ranges (overlapping or adjacent), sorts and dedups
  // columns, drops columns inside ranges, and turns runs of >= `min_run` consecutive columns into
  // ranges (contiguous loads are cheaper than gathers).
  void Normalize(int64_t key_end, int min_run = 16);
};

// Where the query blocks of one sequence sit; shared by all builders.
struct BlockGeometry {
  int seq;        // sequence
  int q_begin;    // first query row (within the sequence) of the block
  int q_end;      // one past the last row
  int first_pos;  // key position of the first row
  int last_pos;   // key position of the last row
  int key_end;    // keys allowed for some row of the block: [0, key_end)
};

// Fills `heads` and `block_offsets` for `problem`, allocating no rows yet.
void InitSparseIndex(const AttentionProblem& problem, const std::vector<int>& heads, int block_m,
                     SparseIndex* index);
// Geometry of global query block `block`.
BlockGeometry GetBlockGeometry(const AttentionProblem& problem, const SparseIndex& index,
                               int block);
// Compacts per-row key sets (indexed by SparseIndex::row, each already normalized) into the CSR
// arrays of `index` (heads and block_offsets must be set).
void CompactRows(std::vector<RowKeys>* rows, SparseIndex* index);

// Checks the invariants above against `problem`; the message names the head slot, block and
// entry that break them.
absl::Status ValidateSparseIndex(const AttentionProblem& problem, const SparseIndex& index);
// The same with the per-row checks for head slot `slot` only (the index-wide ones — sizes, heads,
// block offsets, indptr ends — still run): O(batch + heads + that slot's entries), so a caller
// that looks at every slot of a many-head index in turn (fidelity's Score, AttentionMassRecall)
// reads each entry once instead of once per slot.
absl::Status ValidateSparseIndexSlot(const AttentionProblem& problem, const SparseIndex& index,
                                     int slot);

// (query, key) pairs computed under `index` for head slot `slot` (per-row causal mask applied).
int64_t ComputedPairs(const AttentionProblem& problem, const SparseIndex& index, int slot);

// The boolean mask [q_len, k_len] of sequence `seq` and head slot `slot` (causal applied):
// for tests and the densified-mask reference.
std::vector<uint8_t> DensifyMask(const AttentionProblem& problem, const SparseIndex& index,
                                 int slot, int seq);

}  // namespace spattn

#endif  // SPATTN_KERNELS_SPARSE_INDEX_H_
