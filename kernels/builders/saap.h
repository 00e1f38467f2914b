// Saap (seed 001): de-roped k-means key buckets, query classifier, top-l buckets + sink/local.
//
// Per sequence and kv head:
//  * Keys are de-roped (RoPE removed at their key positions 0 .. k_len-1, with the layer's
//    theta / inverse frequencies) and assigned to the nearest unit centroid (spherical k-means
//    centroids from LayerAssets::centroids[kv_head]); bucket members are kept as CSR lists
//    (Off/Idx of the paper's App. F), sorted by position.
//  * Queries are de-roped at their positions (k_len - q_len + row under chunked prefill) and fed
//    to the q head's classifier (LayerAssets::classifiers[q_head], batch norm folded); its
//    output distribution softmax(logits) is summed over the rows of a query block and over the
//    requested q heads of the GQA group (Sec. 5, "Batched queries": sum of f_q(q_i), then the
//    top-l), and the top_l buckets (ties to the lower bucket) are visited.
//  * Index row of a block: the sink [0, sink_tokens) and local window [first - local_tokens + 1,
//    last] as ranges (the paper's dense "1 + 2047"), plus every member of the visited buckets
//    before the block's causal end as gathered columns. All requested heads of a GQA group share
//    the rows, as they share the search in the paper.
// Missing assets: FAILED_PRECONDITION naming what is missing; shape mismatches: INVALID_ARGUMENT.
// Thread-safe: reads its inputs only and writes `out`; runs on CpuThreads() threads.
#ifndef SPATTN_KERNELS_BUILDERS_SAAP_H_
#define SPATTN_KERNELS_BUILDERS_SAAP_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildSaapIndex(const AttentionProblem& problem, const SaapParams& params,
                            const std::vector<int>& heads, const LayerAssets* assets, int block_m,
                            SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAAP_H_
