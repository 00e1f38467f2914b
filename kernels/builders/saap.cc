#include "kernels/builders/saap.h"

namespace spattn {

absl::Status BuildSaapIndex(const AttentionProblem&, const SaapParams&, const std::vector<int>&, const LayerAssets*, int, SparseIndex*) {
  return absl::UnimplementedError("saap: CPU index builder not implemented yet");
}

}  // namespace spattn
