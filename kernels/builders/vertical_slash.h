// MInference vertical-slash (seed 000): last_q estimate, top-k columns and diagonals, merged.
//
// Per q head and sequence: A = softmax(Q[-last_q:] K^T * scale) with the causal mask (Alg. 2);
// vertical scores are A's column sums, slash scores its sums along each diagonal offset
// o = query position - key. The first `forced_columns` columns and the `forced_diagonals`
// diagonals nearest the main one rank first; the top `vertical_size` columns and top
// `slash_size` diagonals (forced ones included; at least all forced ones) are kept. Equal scores
// rank by lower index / lower offset. Alg. 4 then turns them, per query block of block_m rows,
// into key ranges (slash segments [first_pos - o, last_pos - o]) and columns (vertical lines),
// merged, disjoint and causal. Chunked prefill and varlen batches estimate per sequence from that
// sequence's last queries; GQA reads kv head h / group. Memory: last_q * k_len floats per head
// in flight, no S x S buffer. Thread-safe (re-entrant); multi-threaded over heads and blocks.
#ifndef SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_
#define SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildVerticalSlashIndex(const AttentionProblem& problem,
                                     const VerticalSlashParams& params,
                                     const std::vector<int>& heads, int block_m, SparseIndex* out);

// The lines selected for one (q head, sequence), before the merge.
struct VerticalSlashLines {
  std::vector<int32_t> columns;  // key positions, increasing
  std::vector<int32_t> offsets;  // diagonal offsets (query position - key), decreasing
};

// The estimate + top-k step alone (what BuildVerticalSlashIndex runs per head and sequence);
// for tests and statistics. `problem` and `params` must already be valid.
absl::Status SelectVerticalSlashLines(const AttentionProblem& problem,
                                      const VerticalSlashParams& params, int q_head, int seq,
                                      VerticalSlashLines* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_
