// Saap (seed 001): de-roped k-means key buckets, query classifier, top-l buckets + sink/local.
#ifndef SPATTN_KERNELS_BUILDERS_SAAP_H_
#define SPATTN_KERNELS_BUILDERS_SAAP_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildSaapIndex(const AttentionProblem& problem, const SaapParams& params,
                            const std::vector<int>& heads, const LayerAssets* assets, int block_m, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAAP_H_
