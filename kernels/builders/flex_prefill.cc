#include "kernels/builders/flex_prefill.h"

namespace spattn {

absl::Status BuildFlexPrefillIndex(const AttentionProblem&, const FlexPrefillParams&, const std::vector<int>&, SparseIndex*) {
  return absl::UnimplementedError("flex_prefill: CPU index builder not implemented yet");
}

}  // namespace spattn
