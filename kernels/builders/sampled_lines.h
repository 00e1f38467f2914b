// sampled_lines: per query block, the fewest vertical (column) and slash (diagonal) lines whose
// mass on a few sampled rows of that block reaches gamma (issue 11 item 4: near the
// query-block-column oracle).
//
// The query-block-column oracle keeps, per query block, the fewest key columns whose mass
// averaged over the block's rows reaches the target. Fixed line budgets (vertical_slash) or one
// budget per head (flex_prefill's last-block estimate) miss it where a head's structure differs
// along the sequence (query-specific retrieval keys, topic segments) and overshoot it where a
// ladder doubles budgets. This method estimates each block's own distribution instead:
//
// Per (q head, sequence), with B = block_m (index blocks of B rows) and s = rows_per_block:
//  1. Sampling. In every query block of n rows, the rows floor((2i + 1) n / (2 s)), i < s (evenly
//     spread, duplicates dropped). Their exact causal softmax over every key is computed (fp32
//     logits) -- s / B of the dense QK^T work.
//  2. Line evidence from the sequence's last min(last_q, q_len) rows (vertical_slash's estimate,
//     Alg. 2 of MInference): V(j) = column sum at key j / the rows that see j, D(o) = diagonal
//     sum at offset o = pos - key / the rows that reach o. A key j of a sampled row at position
//     pos is a "diagonal" entry when D(pos - j) > V(j) and D(pos - j) > 2 / k_len (its mass
//     follows the distance, above twice the uniform share: local windows, slash lines), else a
//     "column" entry (sinks, heavy hitters, the query-specific keys of retrieval and topic heads
//     that no diagonal explains, and background keys). Without the floor about half of the
//     background keys a high gamma reaches become 64-key diagonal ranges: on llm_mix at 16K
//     (8 heads) gamma 0.95 gives density 0.139 at recall 0.979 without it, 0.065 / 0.968 with
//     2 / k_len and 0.057 / 0.963 with 4 / k_len, which turns too many topic-segment keys into
//     columns that other rows of the block do not share (held-out recall of topic heads drops).
//  3. Per query block, each (sampled row, key) entry weighs m = p / (rows sampled), as fp32.
//     Entries are binned by the top 12 bits of m's fp32 representation (SampledLinesBin: 8 bins
//     per octave, ~9% apart; everything below 2^-32 in bin 0); the threshold bin is the highest
//     one at which the mass of the bins at or above it reaches gamma of the block's total. Every
//     entry in those bins keeps its line: a column j as a key column, a diagonal o as the range
//     [first_pos - o, last_pos - o] (MInference Alg. 4: it holds key pos - o for every row of
//     the block). Binning, not a sort, so that the GPU builder selects the same way in one pass.
//  4. Always kept: keys [0, sink_tokens) and the local range [first_pos - local_tokens + 1,
//     last_pos] (the block's own diagonal needs local_tokens >= B).
// Chunked prefill: pos is the key position of the query (k_len - q_len + row); without the causal
// mask offsets may be negative. Memory: O(k_len) per (head, sequence) for the evidence plus
// s x k_len per query block in flight; no S x S buffer. Thread-safe (re-entrant); multi-threaded
// over heads, then over query blocks.
#ifndef SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_H_
#define SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

absl::Status BuildSampledLinesIndex(const AttentionProblem& problem,
                                    const SampledLinesParams& params, const std::vector<int>& heads,
                                    int block_m, SparseIndex* out);

// Step 3's bins: SampledLinesBin(m) in [0, kSampledLinesBins) for m in (0, 1].
inline constexpr int kSampledLinesBinFloor = 759;  // (fp32 bits >> 20) of 2^-32, minus one
inline constexpr int kSampledLinesBins = 258;      // bin of 1.0 = 1016 - 759, plus one
int SampledLinesBin(float mass);

// Step 2's column test: whether D(offset) = `d` (over `rows` evidence rows) is what a column
// leaves on the diagonals its rows cross it at -- d * rows <= kSampledLinesColumnLeak x the
// largest V(j) (`col`) over the keys j = pos - offset of the evidence rows.
inline constexpr float kSampledLinesColumnLeak = 2.f;
bool SampledLinesColumnLeak(float d, int rows, const float* col, int first_pos, int last_pos,
                            int k_len, int offset);

// Evidence rows (positions first_pos..last_pos) that see key `key` / reach offset `offset`.
int SampledLinesColumnRows(int first_pos, int last_pos, int k_len, bool causal, int key);
int SampledLinesDiagonalRows(int first_pos, int last_pos, int k_len, bool causal, int offset);

// The sampled rows (within the sequence) of the query block of rows [q_begin, q_end): step 1.
std::vector<int> SampledLinesRows(int q_begin, int q_end, int rows_per_block);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_H_
