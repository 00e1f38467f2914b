// MInference block-sparse (seed 000): mean-pooled Q/K, top-k key blocks per query block.
#ifndef SPATTN_KERNELS_BUILDERS_BLOCK_SPARSE_H_
#define SPATTN_KERNELS_BUILDERS_BLOCK_SPARSE_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildBlockSparseIndex(const AttentionProblem& problem, const BlockSparseParams& params,
                                   const std::vector<int>& heads, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_BLOCK_SPARSE_H_
