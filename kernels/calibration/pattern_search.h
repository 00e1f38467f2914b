// Kernel-aware per-head pattern search (MInference, seed 000, §3.2 and Alg. 1): the offline step a
// user runs once per model before serving. For every q head of a layer it tries a list of
// candidate configs (methods x parameter settings) on one or more calibration problems of that
// layer, measures each one's attention-mass recall (kernels/fidelity.h, exact over sampled query
// rows) and its cost, and picks the cheapest candidate that reaches a target recall; dense is the
// fallback (recall 1 by definition, cost = all causal pairs).
//
// Where MInference fixes a FLOPs budget and maximises output recall, this search fixes the recall
// and minimises the work, which is what a server wants to publish per head. The cost is
// "kernel-aware" in the same sense: it counts the (query, key) pairs the sparse kernel really
// computes under the index the builder produced (ComputedPairs: per-row causal mask, ranges and
// gathered columns), plus the index build's own work in pair-equivalents (ModeledBuildPairs).
//
// Every candidate is built through BuildSparseIndex, i.e. by the same builders the worker runs.
#ifndef SPATTN_KERNELS_CALIBRATION_PATTERN_SEARCH_H_
#define SPATTN_KERNELS_CALIBRATION_PATTERN_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"

namespace spattn {

// ---- Candidates.

// The default search space, every method but Saap, a few settings each (sizes in tokens):
//   a_shape           sink 64, local 256 / 512 / 1024 / 2048 / 4096
//   vertical_slash    (vertical, slash) = (64, 256), (256, 512), (500, 1000), (1000, 2048),
//                     (1000, 4096); last_q 64, forced 30 columns / 100 diagonals (paper)
//   block_sparse      top_k 8 / 16 / 32 / 64 blocks of 64
//   flex_prefill      gamma 0.9 / 0.95 (tau 0.1, min_budget 1024, block 128)
//   sample_attention  alpha_c = alpha_s = 0.9 / 0.95 (chunk_n 2, block 128)
//   anchor            theta 6 / 9 / 12 (step 16, block 128, init 2048)
//   sampled_lines     gamma 0.85 / 0.9 / 0.95 / 0.975 / SampledLinesGammaFor(0.98) (0.99; its
//                     other parameters at their defaults)
// The other parameters keep the paper defaults of kernels/method_config.h.
std::vector<MethodConfig> DefaultCandidates();

// Saap candidates for a layer whose assets hold `num_centroids` centroids: top_l 8 / 16 / 32
// (sink 1, local 2047).
std::vector<MethodConfig> SaapCandidates(int num_centroids);

// The default candidates of `methods` (in DefaultCandidates() order; kDense adds nothing: dense
// is always the fallback). Saap candidates need `maybe_assets` with centroids: without it
// FAILED_PRECONDITION naming saap.
absl::StatusOr<std::vector<MethodConfig>> CandidatesForMethods(const std::vector<Method>& methods,
                                                               const LayerAssets* maybe_assets);

// Whether `maybe_assets` holds a Saap classifier for q head `head`. SearchHeadPatterns tries
// Saap candidates only on such heads (a layer's published assets may cover some heads only).
bool HasClassifier(const LayerAssets* maybe_assets, int head);

// "all" (every method but saap) or a comma-separated list of method names, e.g.
// "a_shape,vertical_slash". INVALID_ARGUMENT names the unknown method.
absl::StatusOr<std::vector<Method>> ParseCandidateMethods(absl::string_view spec);

// ---- Candidates by length ("auto", issue 11 item 5).

// Which search space wins on the worker's guarded path depends on the length and on the
// sampled_lines build (H100, llm_mix 32 q / 8 kv heads, d 128, bf16, target 0.95, 16K
// calibration prompt; README's performance section): sampled_lines alone searched at the guard's
// gamma (margin 0.01, guard adaptive sampled_lines,flex_prefill) against the default search
// (guarded): session 25 32K 6.24 vs 9.81 ms, 128K 93.77 vs 90.55; session 26, with
// sampled_lines' passes on wgmma (kernels/cuda/NOTES.md "s26-slbuild"), 32K 5.38 vs 9.64 ms and
// 128K 83.69 vs 89.38, its promise kept at 0.90 / 0.95 / 0.98 at 64K and 128K on two model seeds
// (bench/results/gpu/h100-2026-11-27-s26/call2) and at 4K-32K (session 25). "auto" (the default
// of spattnctl calibrate --candidates and spattn-bench --search_candidates since session 27;
// "all" there is the search over DefaultCandidates) picks by the length the configs are
// calibrated for / served at: up to kAutoSampledLinesMaxTokens the sampled_lines-only search
// with margin kAutoSampledLinesMargin, above it the default search (margin 0). Both callers add
// Saap's candidates to either where the layer has assets (issue 11 item 6). Session 27 (H100,
// guarded on the defaults, kernels/cuda/NOTES.md "s27-auto"): 32K 5.54 vs 9.52 ms with main's
// defaults in one call; 128K 84.50 vs 88.44 ms (two calls).
inline constexpr char kAutoCandidates[] = "auto";
// The longest length (tokens) "auto" searches sampled_lines alone for: 128K, the longest length
// where that search was measured faster and keeping the promise (above). At 1M (session 24,
// without the guard) sampled_lines alone was faster too, but the guarded sampled_lines-only path
// was not measured there.
inline constexpr int64_t kAutoSampledLinesMaxTokens = 131072;
inline constexpr double kAutoSampledLinesMargin = 0.01;

// What one search searches: the candidate methods and the sampled_lines margin.
struct CandidateChoice {
  // ParseCandidateMethods' output: the listed methods, or every method but saap for "all".
  std::vector<Method> methods;
  // The spec was "all" (or "auto" picked the default search): callers add saap where the layer
  // has assets, as for --candidates=all.
  bool all = false;
  // PatternSearchOptions::sampled_lines_margin for this search.
  double sampled_lines_margin = 0;
  // The spec was "auto" (the choice followed `length`).
  bool automatic = false;
};

// Whether `spec` is "auto" (case-insensitive, surrounding spaces ignored).
bool IsAutoCandidates(absl::string_view spec);

// The length rule of "auto": for `length` <= `auto_max_len` (default kAutoSampledLinesMaxTokens;
// spattnctl calibrate --auto_max_len, spattn-bench --search_auto_max_len move it),
// {sampled_lines} with margin kAutoSampledLinesMargin; above it the default search
// (ParseCandidateMethods("all"), all = true, margin 0). INVALID_ARGUMENT "length: ..." when
// length < 1, "auto_max_len: ..." when auto_max_len < 1.
absl::StatusOr<CandidateChoice> AutoCandidatesForLength(
    int64_t length, int64_t auto_max_len = kAutoSampledLinesMaxTokens);

// A candidate spec resolved for a search of `length` tokens: "auto" -> AutoCandidatesForLength
// (length, auto_max_len) (`margin` must then be 0: INVALID_ARGUMENT "sampled_lines_margin: ... auto sets it"), else
// ParseCandidateMethods(spec) with `margin` (length unused). INVALID_ARGUMENT names the field:
// "candidates: ..." (ParseCandidateMethods'), "sampled_lines_margin: ..." (negative, NaN, inf, or
// given with auto), "length: ..." (auto with length < 1), "auto_max_len: ..." (< 1).
absl::StatusOr<CandidateChoice> ResolveCandidates(
    absl::string_view spec, int64_t length, double margin,
    int64_t auto_max_len = kAutoSampledLinesMaxTokens);

// "sampled_lines (margin 0.01)" or "all" / the method list, for logs and bench params.
std::string CandidateChoiceLabel(const CandidateChoice& choice);

// A short label with the parameters the default candidates vary, for tables:
// "a_shape(64,1024)" (sink, local), "vertical_slash(500,1000)" (vertical, slash),
// "block_sparse(k=16)", "flex_prefill(gamma=0.9)", "sample_attention(alpha=0.9)" (or
// "alpha_c=..,alpha_s=.." when they differ), "anchor(theta=12)", "saap(l=16)",
// "sampled_lines(gamma=0.95)", "dense".
std::string ConfigLabel(const MethodConfig& config);

// ---- Cost model.

// Modeled work of building `config`'s index for ONE q head of `problem`, in pair-equivalents (one
// pair = what the sparse kernel spends on one (query, key): a q.k dot product and a p.v update,
// i.e. two length-head_dim products; a builder's length-head_dim dot product counts 0.5). Summed
// over the sequences (q = q_len, k = k_len), from what each builder computes:
//   dense, a_shape     0 (static patterns read no tensor data)
//   vertical_slash     0.5 * min(last_q, q) * k                  (last_q x all keys, Alg. 2)
//   block_sparse       0.5 * (q + k + nq * nk / 2)               (pooling + pooled causal map)
//   flex_prefill       0.5 * (min(B, q) * k + q + k + nq * nk / 2)  (last block x keys + map)
//   sample_attention   0.5 * min(chunk_n, nq) * min(B, q) * k    (sampled blocks x keys)
//   anchor             0.5 * (q * (min(init, k) + min(step * B / 2, k)) + nq * k)
//                      (per-row anchor over init + local keys, pooled queries x keys)
//   saap               kSaapBuildCost * 0.5 * (k * C + rows * mlp_macs / head_dim), rows = q,
//                      or min(classify_rows * ceil(q / 64), q) when classify_rows < 64 (the
//                      key assignment of the head's kv head charged to the head alone)
//                      (key -> centroid assignment, query classifier, row assembly)
//   sampled_lines      10 * 0.5 * (1.5 * rows_per_block * ceil(q / Bs) + min(last_q, q)) * k
//                      (three passes over the sampled rows, half the keys each under the
//                      mask, and the last-rows evidence; 10 = kSampledLinesEntryCost; Bs its
//                      query block rows, `sampled_lines_block_m`)
// with B the method's block size, nq = ceil(q / B), nk = ceil(k / B), C the centroid count and
// mlp_macs the classifier's multiply-adds per query (from `maybe_assets`; 0 without them).
double ModeledBuildPairs(const AttentionProblem& problem, const MethodConfig& config,
                         const LayerAssets* maybe_assets, int sampled_lines_block_m = 64);

// What one sampled_lines entry costs in its GPU builder's passes (exp, shared-memory histogram
// atomics, the kept-entry pass), in kernel pairs. Measured, not derived (H100): the formula
// without the factor gives 0.049 / 0.047 of the dense pairs at 32K / 128K (32 q heads, d 128).
// Session 16 (bench/results/gpu/h100-2026-11-26-s16): build 15.7 / 145.8 ms against the dense
// kernel's 14.6 / 225.4 ms, 22x / 14x, so 16 (without it the search chose sampled_lines for
// most heads and the searched mix ran 2.8x slower at 32K: 36.8 ms of build for 4.1 ms of
// kernel). Session 17's builder (bench/results/selection/s17-slbuild/run4): 9.0 / 86.1 ms, 12.6x
// / 8.1x of the same dense times, so 10.
inline constexpr double kSampledLinesEntryCost = 10;

// What one Saap product (a key x centroid or classifier multiply-add counted as above) costs in
// its GPU builder's stages (key assignment, histogram + scatter, classifier, top-l, the row
// assembler's count + fill, which the products do not count), in kernel pairs. Measured, not
// derived (H100, llm_mix 32 q / 8 kv heads, d 128, bf16, 1024 centroids, classifier d -> 1024 ->
// 1024, classify_rows 4, every head Saap): session 27's combined run built in 2.47 / 11.19 ms
// against the dense kernel's 13.64 / 219.2 ms at 32K / 128K (bench/results/gpu/
// h100-2026-11-27-s27), split by session 20's stage profile (keys 20 / 17 %, classify 49 / 40 %,
// count + fill and gaps 31 / 43 %); a head priced alone (its kv head's keys, its own classifier
// rows and its share of the rest) measures 5.9x / 6.4x the formula without the factor, so 6.
// Without it (session 27, factor 1 and the keys shared by the group) the model priced Saap's
// build at ~1 % of the dense pairs where it measured ~18 %: the default search with assets chose
// saap(l=8) on 15 of 32 heads at 32K and the guarded path read 7.59 ms against 5.30 ms without
// Saap (bench/results/gpu/h100-2026-11-27-s27/call2).
inline constexpr double kSaapBuildCost = 6;

// The weight of sampled_lines' modeled build in the search's cost (PatternSearchOptions::
// sampled_lines_build_weight), a policy knob, not a work model: the per-head cost counts one
// head's build and kernel on the calibration prompt, while the worker serves the guarded plan on
// longer prompts, where the other methods' configs (calibrated just above the target) are
// widened by the guard and every distinct config is its own GPU build. Session 24 (s24-guarded,
// H100, llm_mix 32/8 heads d128, 16K calibration, target 0.95, served at 32K; kernels/cuda/
// NOTES.md) measured 0.1: the search then picks sampled_lines for 15 of 32 heads (3 with 1),
// guarded density 0.132 instead of 0.169 at the same recall (0.970 / 0.971), but the same total
// (9.83 ms against 9.91 ms: build +1.0 ms, kernel -1.1 ms; every distinct sampled_lines gamma
// the guard widens to is one more build), so the default stays 1 (the search as before).
inline constexpr double kSampledLinesBuildWeight = 1;

// ---- Search.

struct PatternSearchOptions {
  // Attention-mass recall a head's config must reach, in (0, 1]. Default: 0.95.
  double target_recall = 0.95;
  // Query rows per problem over which recall is computed exactly (stratified over the batch,
  // kernels/fidelity.h SampleQueryRows); <= 0 takes every row (memory O(S^2) per head).
  // Default: 256.
  int sample_rows = 256;
  // Seed of the row sample. Default: 0.
  uint64_t seed = 0;
  // Multiplies ModeledBuildPairs in the cost; 0 ranks by kernel work alone. Default: 1.
  double build_cost_weight = 1.0;
  // Multiplies build_cost_weight for sampled_lines candidates (its modeled build stays the
  // measured per-entry work, kSampledLinesEntryCost). Default: kSampledLinesBuildWeight.
  double sampled_lines_build_weight = kSampledLinesBuildWeight;
  // Searches sampled_lines at the gamma the worker's recall guard checks, so that the guard does
  // not widen what the search chose: when > 0, every sampled_lines candidate is searched at
  // gamma >= SampledLinesGammaFor(target_recall, sampled_lines_margin) (its gamma raised to that
  // where lower; a candidate then equal to an earlier one is not built again: it is skipped, and
  // with keep_all_scores its `all` entry repeats the earlier one's score), and reaches the target
  // only there (KeepsTargetServed with this margin). The guard's margin is
  // RecallGuardOptions::margin (0.01): with it, 0.95 searches sampled_lines at 0.96 or more.
  // Finite and >= 0. Default: 0 (sampled_lines candidates searched as given).
  double sampled_lines_margin = 0;
  // BuildOptions::block_m (query rows per index block for dense, a_shape, vertical_slash, saap).
  // Default: 64.
  int block_m = 64;
  // BuildOptions::sampled_lines_block_m: sampled_lines' own query block rows (0: block_m), so
  // that its candidates are scored and costed on the blocks the worker builds them on
  // (spattnctl calibrate passes the worker's default, 128). Default: 0.
  int sampled_lines_block_m = 0;
  // q heads to search; empty = every q head. Default: empty.
  std::vector<int> heads;
  // The layer's Saap assets; needed when a candidate is saap. Not owned. Default: none.
  const LayerAssets* maybe_assets = nullptr;
  // Score every candidate on every head and keep the scores (HeadSearchResult::all). Without
  // it, a candidate whose modeled build cost alone exceeds a head's second-lowest cost found so
  // far among candidates reaching the target is not built for that head (it could be neither
  // chosen nor runner-up there; candidates go by increasing build cost).
  // The choice is the same either way. Default: false.
  bool keep_all_scores = false;
};

// One candidate on one head, averaged over the calibration problems.
struct CandidateScore {
  // Position in the candidate list; kDenseFallback for the implicit dense candidate.
  int candidate = -1;
  MethodConfig config;
  double recall = 0;        // mean over problems of the mean recall of the sampled rows
  double recall_min = 0;    // smallest per-problem mean recall: what must reach the target
  double density = 0;       // mean over problems of computed pairs / causal pairs
  double kernel_pairs = 0;  // mean over problems of computed pairs
  double build_pairs = 0;   // mean over problems of ModeledBuildPairs
  double cost = 0;          // kernel_pairs + build_cost_weight * build_pairs
  bool meets_target = false;
};
inline constexpr int kDenseFallback = -1;

struct HeadSearchResult {
  int head = 0;
  // The cheapest candidate reaching the target (dense when none does, or when dense is cheaper).
  CandidateScore chosen;
  // The next one in the ranking: the next cheapest reaching the target, else the one with the
  // best recall among those that do not.
  bool has_runner_up = false;
  CandidateScore runner_up;
  // Every candidate in list order, dense last (only with keep_all_scores).
  std::vector<CandidateScore> all;
};

struct PatternSearchResult {
  std::vector<HeadSearchResult> heads;  // in the order of options.heads (or 0 .. H-1)
  std::vector<int> skipped_heads;       // per candidate: heads it was not built for (the bound,
                                        // or all: a duplicate, sampled_lines_margin)
  // Measured wall seconds (informational; the choice never depends on them).
  std::vector<double> build_seconds;  // per candidate: index builds, summed over problems
  double exact_seconds = 0;           // exact attention of the sampled rows
  double score_seconds = 0;           // recall and density of every index
  double total_seconds = 0;
};

// Whether `config` keeps `target` on prompts other than the calibration ones by its own rule:
// sampled_lines only with gamma >= SampledLinesGammaFor(target, margin) (margin: the search's
// PatternSearchOptions::sampled_lines_margin, 0 by default; its served recall follows gamma
// at every length, not the calibration prompt's recall: issue 11 item 3; a gamma below it that
// reaches the target on a short calibration prompt falls short on long ones). Other methods:
// true (their recall on the calibration prompts decides). A candidate reaches the target only
// when this holds too.
bool KeepsTargetServed(const MethodConfig& config, double target, double margin = 0);

// Recall at or above target - kRecallTolerance counts as reaching it: the exact probabilities
// are kept in fp32, so a full row sums to 1 only within ~1e-7.
inline constexpr double kRecallTolerance = 1e-6;

// Searches every head of `problems` (host memory; all with the same head counts and head_dim,
// e.g. several prompts of one layer) over `candidates`. A candidate reaches the target on a head
// when its recall does on every problem (the worst prompt decides: configs are published for
// prompts not seen here). Errors: INVALID_ARGUMENT naming the bad
// option ("target_recall", "sample_rows", "build_cost_weight", "sampled_lines_build_weight",
// "sampled_lines_margin", "block_m", "sampled_lines_block_m", "heads",
// "candidates[i]: ...", "problems[i]: ..."), FAILED_PRECONDITION when a saap candidate has no
// assets. Deterministic for given inputs (multi-threaded through ParallelFor; no timing enters
// the choice). Thread-safe: reads its inputs only.
absl::StatusOr<PatternSearchResult> SearchHeadPatterns(
    const std::vector<const AttentionProblem*>& problems,
    const std::vector<MethodConfig>& candidates, const PatternSearchOptions& options);

// ---- Checking configs on other inputs.

struct HeadEvaluation {
  int head = 0;
  double recall = 0;   // mean over the sampled rows (AttentionMassRecall)
  double density = 0;  // computed pairs / causal pairs
};

// Recall and density of `configs[i]` on q head `heads[i]` of `problem` (e.g. a held-out draw),
// each head's index built alone through BuildSparseIndex (`block_m`, `sampled_lines_block_m`:
// BuildOptions'). INVALID_ARGUMENT for mismatched sizes or a bad head; builder errors pass
// through. Thread-safe: reads its inputs only.
absl::StatusOr<std::vector<HeadEvaluation>> EvaluateHeadConfigs(
    const AttentionProblem& problem, const std::vector<int>& heads,
    const std::vector<MethodConfig>& configs, int sample_rows, uint64_t seed, int block_m = 64,
    const LayerAssets* maybe_assets = nullptr, int sampled_lines_block_m = 0);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CALIBRATION_PATTERN_SEARCH_H_
