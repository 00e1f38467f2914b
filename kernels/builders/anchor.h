// AnchorAttention (seed 002): anchor from init + local keys, stripe selection by threshold.
//
// Per (q head, sequence), with b = params.block_size for both query and key blocks (the paper
// uses one size, 128) and query blocks grouped by `step` (Algorithms 1 and 2 of the paper):
//  * Group g holds query blocks [g step, (g+1) step); its local window starts at the position
//    of its first query, gfp (Alg. 1, j_start), and ends at each row's own position (causal).
//  * Anchor (Alg. 1, Eq. 1): per query row, x_a = max of q.k * softmax_scale over the init keys
//    [0, init_tokens) and the local window [gfp, pos]. The paper's K_1 is one key block;
//    init_tokens generalises it.
//  * Stripes (Alg. 2, Eq. 2): per query block, the pooled query avgpool(Q) (mean of its rows)
//    and the pooled anchor avgpool(x_a) (mean of its rows' anchors). Key j between the init keys
//    and the group's local window, [init_tokens, gfp), is kept for the whole group when, for
//    any block of the group, avgpool(x_a) - avgpool(Q).k_j * softmax_scale <= theta.
//  * Index (Alg. 3): every block of the group reads the init range, its local range [gfp, last]
//    and the group's kept keys as gathered columns (stripe granularity: single keys).
// Chunked prefill: positions are key positions, so [init_tokens, gfp) spans the earlier context.
// Not causal: the local window is the group's whole span and stripes also cover keys after it.
// Thread-safe: reads its inputs only and writes `out`; runs on CpuThreads() threads.
#ifndef SPATTN_KERNELS_BUILDERS_ANCHOR_H_
#define SPATTN_KERNELS_BUILDERS_ANCHOR_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildAnchorIndex(const AttentionProblem& problem, const AnchorParams& params,
                              const std::vector<int>& heads, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_ANCHOR_H_
