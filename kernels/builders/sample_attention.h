// SampleAttention (seed 004): sampled query blocks, column and slash CRA selection.
#ifndef SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_
#define SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildSampleAttentionIndex(const AttentionProblem& problem, const SampleAttentionParams& params,
                                       const std::vector<int>& heads, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_
