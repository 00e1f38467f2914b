// AnchorAttention (seed 002): anchor from init + local keys, stripe selection by threshold.
#ifndef SPATTN_KERNELS_BUILDERS_ANCHOR_H_
#define SPATTN_KERNELS_BUILDERS_ANCHOR_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildAnchorIndex(const AttentionProblem& problem, const AnchorParams& params,
                              const std::vector<int>& heads, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_ANCHOR_H_
