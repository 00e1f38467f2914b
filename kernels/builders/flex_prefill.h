// FlexPrefill (seed 003): sqrt-JS pattern decision, cumulative-attention budgets.
//
// Per q head and sequence, with B = block_size (index block_m = B, key blocks aligned at key 0):
//  1. Representative queries Q^ = the sequence's last min(B, q_len) query rows (Alg. 2).
//     True block distribution: the rows' causal softmax over all keys, summed within each key
//     block and averaged over the rows. Estimated one: softmax(scale * mean(Q^) . pooled K^T)
//     over the key blocks. d = sqrt(JSD(estimated || true)), natural log.
//  2. d < tau -> query-aware (Alg. 4): pooled (mean) Q per query block against pooled K, causal at
//     block level, softmax per query block. With `flatten` the whole map is normalized and the
//     fewest blocks whose scores sum to >= gamma of its total are kept (ties: lower query block,
//     then lower key block); without it each query block keeps its own fewest blocks reaching
//     gamma (App. F.4).
//     Otherwise vertical-slash (Alg. 3): Q^'s attention summed per column and per diagonal and
//     normalized; the fewest columns and the fewest diagonals whose mass reaches gamma, each count
//     clamped to [min_budget, max_budget] tokens (one line = one token per query row), then
//     merged per query block as MInference's Alg. 4.
//  3. Every query block keeps its first key block and the key block(s) holding its own positions
//     (paper §4.1). In query-aware heads min_budget / max_budget bound each query block's
//     selection to [ceil(min_budget / B), ceil(max_budget / B)] key blocks (best-scored first;
//     the kept first/diagonal blocks are never dropped).
// Memory: B * k_len floats per head in flight and O(key blocks) per query block: no S x S, no
// (S/B)^2 buffer (the flattened selection finds its threshold with a value histogram and a
// second pass). Thread-safe (re-entrant); multi-threaded over heads.
#ifndef SPATTN_KERNELS_BUILDERS_FLEX_PREFILL_H_
#define SPATTN_KERNELS_BUILDERS_FLEX_PREFILL_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildFlexPrefillIndex(const AttentionProblem& problem, const FlexPrefillParams& params,
                                   const std::vector<int>& heads, SparseIndex* out);

// What the pattern search decided for one (head slot, sequence).
struct FlexPrefillChoice {
  double js_distance = 0;    // sqrt of the Jensen-Shannon divergence, in [0, sqrt(ln 2)]
  bool query_aware = false;  // js_distance < tau
  int num_columns = 0;       // vertical-slash heads: columns kept
  int num_diagonals = 0;     // vertical-slash heads: diagonals kept
};

// BuildFlexPrefillIndex that also reports the choices: (*maybe_choices)[slot * batch + seq].
absl::Status BuildFlexPrefillIndexWithChoices(const AttentionProblem& problem,
                                              const FlexPrefillParams& params,
                                              const std::vector<int>& heads, SparseIndex* out,
                                              std::vector<FlexPrefillChoice>* maybe_choices);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_FLEX_PREFILL_H_
