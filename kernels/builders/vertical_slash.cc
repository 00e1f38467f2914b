#include "kernels/builders/vertical_slash.h"

namespace spattn {

absl::Status BuildVerticalSlashIndex(const AttentionProblem&, const VerticalSlashParams&, const std::vector<int>&, int, SparseIndex*) {
  return absl::UnimplementedError("vertical_slash: CPU index builder not implemented yet");
}

}  // namespace spattn
