#include "kernels/builders/anchor.h"

namespace spattn {

absl::Status BuildAnchorIndex(const AttentionProblem&, const AnchorParams&, const std::vector<int>&, SparseIndex*) {
  return absl::UnimplementedError("anchor: CPU index builder not implemented yet");
}

}  // namespace spattn
