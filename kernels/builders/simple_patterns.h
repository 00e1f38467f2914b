// Static patterns that read no tensor data: dense (all causal keys) and A-shape (sink + local).
#ifndef SPATTN_KERNELS_BUILDERS_SIMPLE_PATTERNS_H_
#define SPATTN_KERNELS_BUILDERS_SIMPLE_PATTERNS_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// One range per block: every key the (causal) mask allows.
absl::Status BuildDenseIndex(const AttentionProblem& problem, const std::vector<int>& heads,
                             int block_m, SparseIndex* out);

// Per query block: the sink [0, sink_tokens) and the local window ending at the block's last
// query, starting local_tokens - 1 keys before its first query. Block-granular like MInference's
// kernel: the first row sees exactly sink + local keys, later rows up to block_m - 1 more.
absl::Status BuildAShapeIndex(const AttentionProblem& problem, const AShapeParams& params,
                              const std::vector<int>& heads, int block_m, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SIMPLE_PATTERNS_H_
