// MInference vertical-slash (seed 000): last_q estimate, top-k columns and diagonals, merged.
#ifndef SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_
#define SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildVerticalSlashIndex(const AttentionProblem& problem, const VerticalSlashParams& params,
                                     const std::vector<int>& heads, int block_m, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_VERTICAL_SLASH_H_
