// SampleAttention (seed 004): sampled query blocks, column and slash CRA selection.
//
// Per (q head, sequence), following Algorithm 1 of the paper with blk = params.block_size:
//  1. Query-guided chunked sampling. The q_len queries are split into n equal chunks, n =
//     chunk_n capped at the sequence's number of query blocks; chunk i (1-based) owns rows
//     [floor((i-1) q_len / n), floor(i q_len / n)) and samples the blk rows at its bottom,
//     Q[i*itv - blk : i*itv] (clipped at row 0). Their exact softmax over all (causal) keys is
//     computed.
//  2. Block reduction. The sampled probabilities are summed per column block (key j -> j / blk)
//     and per slash block (diagonal offset t = pos - j -> floor(t / blk)).
//  3. CRA filtering. Per chunk, the smallest set of column blocks whose share of the summed
//     probability reaches alpha_c (sorted descending, ties to the lower block), likewise slash
//     blocks against alpha_s.
//  4. Merge. Each chunk's selection is extended over the rows of its chunk (merge_index with
//     itv): a column block b covers keys [b blk, (b+1) blk); a slash block s covers, for a query
//     block with positions [first, last], keys [first - (s+1) blk + 1, last - s blk]. A query
//     block straddling two chunks takes the union. The local window [first - local_tokens + 1,
//     last] is added (it is usually selected anyway as slash block 0). Everything is contiguous,
//     so rows hold ranges only; index blocks have block_size rows.
// Chunked prefill: pos is the key position of the query (k_len - q_len + row).
// Thread-safe: reads its inputs only and writes `out`; runs on CpuThreads() threads.
#ifndef SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_
#define SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildSampleAttentionIndex(const AttentionProblem& problem,
                                       const SampleAttentionParams& params,
                                       const std::vector<int>& heads, SparseIndex* out);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAMPLE_ATTENTION_H_
