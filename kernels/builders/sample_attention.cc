#include "kernels/builders/sample_attention.h"

namespace spattn {

absl::Status BuildSampleAttentionIndex(const AttentionProblem&, const SampleAttentionParams&, const std::vector<int>&, SparseIndex*) {
  return absl::UnimplementedError("sample_attention: CPU index builder not implemented yet");
}

}  // namespace spattn
