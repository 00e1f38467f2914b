#include "kernels/builders/block_sparse.h"

namespace spattn {

absl::Status BuildBlockSparseIndex(const AttentionProblem&, const BlockSparseParams&, const std::vector<int>&, SparseIndex*) {
  return absl::UnimplementedError("block_sparse: CPU index builder not implemented yet");
}

}  // namespace spattn
