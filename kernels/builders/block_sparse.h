// MInference block-sparse (seed 000, Alg. 3): mean-pooled Q/K, top-k key blocks per query block.
//
// Per q head and sequence: Q and K are mean-pooled in blocks of block_size rows (query blocks are
// the index blocks, key blocks are aligned at key 0; a last partial block is the mean of its
// rows). Block scores are pooled Q . pooled K^T * scale with the block-level causal mask (key
// block j is visible to a query block when it starts at or before the block's last query
// position). The key blocks that hold the block's own query positions (the diagonal blocks:
// one, or two under chunked prefill when positions do not align with key blocks) are always
// kept; with them, the top_k best visible key blocks become key ranges. Softmax does not change
// a row's order, so the logits are ranked directly; equal scores rank by lower block. GQA reads kv
// head h / group. block_m of the index = block_size. Thread-safe (re-entrant); multi-threaded.
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
