// FlexPrefill (seed 003): sqrt-JS pattern decision, cumulative-attention budgets.
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

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_FLEX_PREFILL_H_
