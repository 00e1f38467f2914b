// Attention-mass recall of a sparse index (DESIGN §8): for a fixed sample of query rows, the share
// of the exact softmax mass over all allowed keys that the index's selected keys carry, averaged
// over the sampled rows. The worker computes it per head when a request sets estimate_recall.
#ifndef SPATTN_SERVER_RECALL_H_
#define SPATTN_SERVER_RECALL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// Recall of head slot `slot` of `index` on `sample_rows` query rows drawn (without replacement,
// deterministic in `seed`) from all query rows of the batch; every row when there are fewer.
// Rows without an allowed key are skipped; 1 when no row has one. Host memory only. Thread-safe.
absl::StatusOr<double> EstimateRecall(const AttentionProblem& problem, const SparseIndex& index,
                                      int slot, int sample_rows, uint64_t seed);

}  // namespace spattn

#endif  // SPATTN_SERVER_RECALL_H_
