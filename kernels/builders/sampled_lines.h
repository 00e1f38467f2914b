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
//  1. Sampling. In every query block of n rows, s rows: with edge_rows (the default) the rows
//     floor(i (n - 1) / (s - 1)), i < s, i.e. the block's first and last rows and the rest evenly
//     between; without it the centres floor((2i + 1) n / (2 s)) (duplicates dropped; s = 1 takes
//     the centre either way). Their exact causal softmax over every key is computed (fp32
//     logits) -- s / B of the dense QK^T work. Edge rows: query-specific keys (retrieval heads)
//     change at arbitrary rows, and a run of rows with its own keys that crosses a block
//     boundary -- the common case for runs longer than a block -- always holds an edge row,
//     while centred rows miss its part before the first / after the last of them (llm_mix
//     retrieval groups of 32-256 rows: 3.0% of rows missed by 2 centred rows, 0.9% by 2 edge
//     rows, 1.2% by 3 centred, none by 3 edge rows).
//  2. Line evidence from the sequence's last min(last_q, q_len) rows (vertical_slash's estimate,
//     Alg. 2 of MInference): V(j) = column sum at key j / the rows that see j, D(o) = diagonal
//     sum at offset o = pos - key / the rows that reach o. A key j of a sampled row at position
//     pos is a "diagonal" entry when D(pos - j) > V(j), D(pos - j) > diagonal_floor / k_len
//     (its mass follows the distance, above diagonal_floor uniform shares: local windows, slash
//     lines) and no column explains D(pos - j) (SampledLinesColumnLeak: a heavy column j' that
//     the evidence rows cross at offsets o adds V(j') / rows to each D(o), so D(o) * rows must
//     exceed min(8, rows / 4) x the largest V over the keys pos' - o of the evidence rows),
//     else a "column"
//     entry (sinks, heavy hitters, the query-specific keys of retrieval and topic heads that no
//     diagonal explains, and background keys). A diagonal entry costs a 64-key range, a column
//     one key: background entries that pass as diagonals were most of the excess density over
//     the query-block-column oracle (issue 11 item 4; llm_mix 32/8 heads d128, gamma 0.95, CPU
//     sampled_lines_probe, 128 held-out rows per head, oracle on 16 blocks per head):
//       32K: floor 2 (the old rule): density 0.0676 = 1.71x oracle, recall 0.961 (min head 0.934)
//            + column test (factor 2):       0.0646 = 1.64x, 0.961 (0.934)
//            + floor 4:                      0.0536 = 1.36x, 0.957 (0.932; 32/32 heads >= 0.93)
//            + floor 5:                      0.0505 = 1.28x, 0.955 (0.929; 31/32)
//            column test factor 8, floor 3:  0.0523 = 1.33x, 0.957 (0.930; 32/32) (s18 defaults)
//                                  floor 4:  0.0488 = 1.24x, 0.955 (0.928; 31/32)
//                                  floor 5:  0.0459 = 1.16x, 0.954 (0.925; 30/32)
//       16K: floor 2 1.23x / 0.965; factor 2 + floor 4 1.00x / 0.959; factor 8 + floor 4
//            0.94x / 0.957 (32/32).
//     The GPU builder gives the same densities at 32K (H100, spattn-bench, 256 recall rows per
//     head; kernels/cuda/NOTES.md "Session 18 — s18-sldensity"); at 128K (GPU only) the floor
//     costs more recall:
//     floor 3 1.17x / 0.951, floor 3.5 1.12x / 0.949, floor 4 1.08x / 0.948 (oracle 0.0681), so
//     the floor 3 was the default for 2 centred rows, the highest that kept recall 0.95 at 32K
//     and 128K. Defaults since session 19 (rows 3, edge rows, floor 7; H100 spattn-bench, 256
//     recall rows, oracle on 16 blocks per head; kernels/cuda/NOTES.md "Session 19 —
//     s19-sldensity"): 32K 1.28x the oracle at recall 0.958 (retrieval heads 0.957; were 1.33x,
//     0.957, 0.939), 128K 1.13x at 0.952 (retrieval 0.948; were 1.17x, 0.951, 0.920); the third
//     row costs 1.3x / 1.4x the build (8.1 -> 10.6 ms at 32K, 76.6 -> 109.5 ms at 128K).
//     Higher floors cost slash and vertical_slash heads their lines (16K, floor 8 without the
//     column test: 2 of 4 slash heads below 0.93). Optional cost test (diagonal_cost, default
//     off): D(o) must also exceed SampledLinesDiagonalBar, cost x block rows x the block's
//     threshold-bin edge. On 128-row blocks (H100, 16 oracle blocks per head; NOTES "Session 20
//     -- s20-sldensity") floor 5 + cost 0.2 gives 1.28x the oracle at 32K (recall 0.951; the
//     defaults 1.47x, 0.960) but recall 0.941 at 128K (defaults 1.30x, 0.953), hence off.
//     short_floor (default 9, since session 22): the floor for sequences of fewer than 64K keys
//     (SampledLinesFloor). With clipped diagonals (step 3) 32K keeps item 3's promise at floor 9
//     and 128K needs 7: one floor cannot serve both (kernels/cuda/NOTES.md "Session 22 --
//     s22-sldensity"; 4K and 16K keep it at 9 too).
//  3. Per query block, each (sampled row, key) entry weighs m = p / (rows sampled), as fp32.
//     Entries are binned by the top 12 bits of m's fp32 representation (SampledLinesBin: 8 bins
//     per octave, ~9% apart; everything below 2^-32 in bin 0); the threshold bin is the highest
//     one at which the mass of the bins at or above it reaches gamma of the block's total. Every
//     entry in those bins keeps its line: a column j as a key column, a diagonal o as the range
//     [first_pos - o, last_pos - o] (MInference Alg. 4: it holds key pos - o for every row of
//     the block). Binning, not a sort, so that the GPU builder selects the same way in one pass.
//     clip_diagonals (default true since session 22): a diagonal entry of sampled row r keeps
//     only the keys pos - o of the rows r stands for (SampledLinesRowSpan: those nearer to r
//     than to the other sampled rows; with 3 edge rows of 128, rows 0-31, 32-95, 96-127), so a
//     line all 3 rows see keeps the whole range and one seen by one row a quarter or half of
//     it. Background entries that pass as diagonals are seen by one row; real lines by all.
//     H100, spattn-bench llm_mix seed 0, 128-row blocks, 256 recall rows (oracle on 16 blocks
//     per head): 32K at floor 9 density 0.0544 = 1.29x the oracle, recall 0.9565 (32/32 heads
//     within 0.02; whole ranges, floor 7: 0.0621 = 1.47x, 0.9595), 128K at floor 7 0.0898 =
//     1.21x, 0.9510 (31/32; whole ranges 0.0962 = 1.30x, 0.9533).
//     Entries, not lines (for now): ranking each line by its mass summed over the sampled rows
//     (the column oracle's rule; CPU experiment, session 21) cut 128K's density at a smaller
//     recall cost than the floor does (1.26x -> 1.15x the oracle for 0.953 -> 0.951, seed 1)
//     but not 32K's (seed 0: 1.35x at floor 6); it needs a line-sum pass in the GPU twin.
//     kernels/cuda/NOTES.md "Session 21 -- s21-sldensity".
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
#include "kernels/builders/sampled_lines_bar.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// `gammas`: empty, or per entry of `heads` that head's gamma (in (0, 1]) instead of params.gamma
// (BuildOptions::sampled_lines_gammas): each head's rows are those of a build of it alone at its
// gamma (gamma is read per head only in step 3's threshold).
absl::Status BuildSampledLinesIndex(const AttentionProblem& problem,
                                    const SampledLinesParams& params, const std::vector<int>& heads,
                                    int block_m, SparseIndex* out,
                                    const std::vector<float>& gammas = {});

// Checks `gammas` (SampledLinesParams::gamma per head) against `heads`: empty, or one per head,
// each in (0, 1]. INVALID_ARGUMENT naming the first bad one. Shared with the GPU twin.
absl::Status CheckSampledLinesGammas(const std::vector<float>& gammas, size_t heads);

// Step 3's bins (kSampledLinesBins of them, sampled_lines_bar.h): SampledLinesBin(m) in
// [0, kSampledLinesBins) for m in (0, 1].
int SampledLinesBin(float mass);

// Step 2's column test: whether D(offset) = `d` (over `rows` evidence rows) is what a column
// leaves on the diagonals its rows cross it at -- d * rows <= min(kSampledLinesColumnLeak,
// rows / 4) x the largest V(j) (`col`) over the keys j = pos - offset of the evidence rows. A
// line's keys have V ~ d (one row of `rows` crosses each on the line), so a line passes with
// d * rows ~ rows x V; a column that one row crosses at `offset` gives d * rows ~ V, a few times
// V where its mass varies over the rows (RoPE).
inline constexpr float kSampledLinesColumnLeak = 8.f;
bool SampledLinesColumnLeak(float d, int rows, const float* col, int first_pos, int last_pos,
                            int k_len, int offset);

// Issue 11 item 3: the gamma at which sampled_lines keeps a served mean recall of `target` on
// rows it did not sample, at any length, for a caller that also needs `margin` above the target:
// target + max(margin, kSampledLinesGammaSlope x max(0, target - 0.95)), at most 0.999. The one
// rule of sampled_lines' gamma: the calibration search asks it with no margin
// (pattern_search.h KeepsTargetServed: 0.90 / 0.95 / 0.98 -> 0.90 / 0.95 / 0.99), the worker's
// recall guard with its margin (server/recall_guard.h AdaptiveConfig: its try is kept only when
// its estimate reaches target + margin; margin 0.01 -> 0.91 / 0.96 / 0.99, at least the adaptive's
// own 0.95). Both allowances are for the same shortfall (the rows not sampled keep less than gamma
// near 1; the estimate's own sampling error), so the larger one, not their sum: with the sum,
// 0.98 + 0.01 asks 0.999, whose entries need 11.7 GB at 128K keys, more than the worker's 8 GiB
// CUDA workspace (RESOURCE_EXHAUSTED ends the guard's widening for every head), and gamma 0.99
// already keeps 0.98 at 4K-128K (H100, kernels/cuda/NOTES.md "Session 23 -- s23-guard").
// Its rule has no calibration length (the same share of each
// block's sampled mass at every length), so the served recall follows gamma, not the calibration
// prompt: the held-out rows keep more than gamma at low gammas and less close to 1 (H100,
// spattn-bench llm_mix seed 0, 128-row blocks, 256 recall rows; kernels/cuda/NOTES.md
// "Session 21 -- s21-sldensity" and "Session 22 -- s22-sldensity"): gamma 0.90 -> 0.926-0.966
// at 4K-128K, 0.95 -> 0.950-0.974 (64K 0.9514, 96K 0.9500), 0.98 -> 0.975-0.977 from 16K up
// (short); with the session-22 defaults 0.985 -> 0.9867 / 0.9804 / 0.9810 / 0.97997 at 4K / 16K
// / 32K / 128K (128K short by 3e-5) and 0.99 -> 0.9901 / 0.9857 / 0.9865 / 0.9853 / 0.9858 at
// 4K / 16K / 32K / 64K / 128K (every head within 0.02 of 0.98).
inline constexpr double kSampledLinesGammaSlope = 1.0 / 3.0;
double SampledLinesGammaFor(double target, double margin = 0.0);

// Step 2's cost test: SampledLinesDiagonalBar (sampled_lines_bar.h, shared with the GPU twin).

// Evidence rows (positions first_pos..last_pos) that see key `key` / reach offset `offset`.
int SampledLinesColumnRows(int first_pos, int last_pos, int k_len, bool causal, int key);
int SampledLinesDiagonalRows(int first_pos, int last_pos, int k_len, bool causal, int offset);

// The sampled rows (within the sequence) of the query block of rows [q_begin, q_end): step 1
// (`edge_rows`: SampledLinesParams::edge_rows).
std::vector<int> SampledLinesRows(int q_begin, int q_end, int rows_per_block, bool edge_rows);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAMPLED_LINES_H_
