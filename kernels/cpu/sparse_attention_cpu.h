// The CPU sparse attention kernel over a SparseIndex: the worker's fallback without a GPU and the
// twin the CUDA kernel is tested against. Tiles of 64 keys (contiguous for ranges, gathered for
// columns), one online softmax per query row, fp32 accumulation, multi-threaded over rows.
#ifndef SPATTN_KERNELS_CPU_SPARSE_ATTENTION_CPU_H_
#define SPATTN_KERNELS_CPU_SPARSE_ATTENTION_CPU_H_

#include "absl/status/status.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// Writes O (and the LSE when problem.maybe_lse is set) for the head slots of `index`; rows of other
// heads are untouched. Query rows with no selected key get 0 and -inf. Host memory only.
absl::Status SparseAttentionCpu(const AttentionProblem& problem, const SparseIndex& index);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CPU_SPARSE_ATTENTION_CPU_H_
