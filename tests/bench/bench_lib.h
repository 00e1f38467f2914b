// spattn-bench as a library: flag parsing, method parameters, and the benchmark run that prints
// one JSON line (or a markdown table row) per (method, head group). See `spattn-bench --help`.
#ifndef SPATTN_TESTS_BENCH_BENCH_LIB_H_
#define SPATTN_TESTS_BENCH_BENCH_LIB_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"
#include "tests/bench/backend.h"

namespace spattn {

struct BenchFlags {
  std::string workload = "llm_mix";    // Default: llm_mix (or a head kind).
  std::string q_file, k_file, v_file;  // Default: none (synthetic workload).
  std::string layout = "auto";         // Default: auto.
  int seq_len = 4096;                  // Default: 4096 keys per sequence.
  int q_len = 0;                       // Default: 0 = seq_len (less: chunked prefill).
  int batch = 1;                       // Default: 1 sequence.
  int heads = 8;                       // Default: 8 q heads.
  int kv_heads = 2;                    // Default: 2 kv heads.
  int head_dim = 128;                  // Default: 128.
  std::string dtype = "bf16";          // Default: bf16.
  bool causal = true;                  // Default: true.
  double rope_theta = 500000;          // Default: 500000.
  double concentration = 1.0;          // Default: 1.
  uint64_t seed = 0;                   // Default: 0.
  // Method names, or "searched": each head runs the config the pattern search chose for it on
  // a calibration prompt (only when named: "all" leaves it out). Default: all.
  std::vector<std::string> methods;
  // "method.name" -> value, in the order given.
  std::vector<std::pair<std::string, std::string>> params;
  std::string device = "cpu";  // Default: cpu.
  // --device=cuda: the worker's CUDA workspace (the kept indexes of every head group, the
  // builders' scratch). Default: 0 = 8 GiB on a device of 32 GiB or more, else 1 GiB; a 1M-key
  // chunk needs more (tests/gpu/run_1m.sh).
  int64_t gpu_workspace_bytes = 0;
  // Default: -1 / 0 = auto: 1 warm-up and 3 timed runs, or 0 and 1 when one dense pass over
  // the problem exceeds 5e10 flop (about 16K tokens x 8 heads x d 128 and up, on a CPU).
  int warmup = -1;
  int repeat = 0;
  int recall_rows = 256;          // Default: 256 sampled query rows (0: all rows).
  int threads = 0;                // Default: 0 = all cores.
  std::string group_by = "auto";  // Default: auto (kind for synthetic, all for files).
  int block_m = 64;               // Default: 64.
  // sampled_lines' own query block rows, as the worker's --sampled_lines_block_m (0: block_m).
  int sampled_lines_block_m = 128;  // Default: 128 (the worker's).
  // Saap: calibrate the layer assets (kernels/calibration: k-means with saap.num_centroids,
  // classifier) on the first calibrate_len queries of sequence 0 before running. Without it
  // saap has no assets and reports an error line.
  bool calibrate = false;       // Default: false.
  int calibrate_len = 4096;     // Default: 4096.
  int calibrate_steps = 100;    // Default: 100 classifier training steps.
  int calibrate_hidden = 1024;  // Default: 1024 (the paper's classifier width).
  // "searched": SearchHeadPatterns on a calibration prompt of the same model (seed + 1000,
  // model seed = seed) of search_len tokens; its configs are then applied at the full length.
  int search_len = 0;                  // Default: 0 = min(seq_len, 16384).
  double search_target_recall = 0.95;  // Default: 0.95.
  // "searched"/"guarded"/"promise": PatternSearchOptions::sampled_lines_margin (sampled_lines
  // candidates searched at gamma >= SampledLinesGammaFor(target, margin), the guard's gamma
  // with the guard's margin 0.01); 0 = the search as before.
  double search_sampled_lines_margin = 0;  // Default: 0.
  // "guarded": the guard's probe rows per head; -1 = the worker's (32 on the host, 64 on CUDA).
  int guard_probe_rows = -1;  // Default: -1.
  // "guarded"/"promise": the searched configs start from their key-count budgets scaled by
  // (served / search length)^e (ScaleConfigToLength, as the worker does with
  // HeadConfig.calibrated_tokens); < 0 = the worker's RecallGuardOptions::kLengthExponent,
  // 0 = unscaled.
  double guard_length_exponent = -1;  // Default: -1.
  // "guarded"/"promise" on the host: the guard's fine ladder step (RecallGuardOptions::
  // fine_step); < 0 = the worker's, 0 = doublings only.
  double guard_fine_step = -1;  // Default: -1.
  // "guarded"/"promise" (host and device guard): the adaptive tries (server/recall_guard.h
  // SetAdaptiveTries): "auto" (the worker's default: per head by its searched method,
  // RecallGuardOptions::adaptive_auto), or AdaptiveByName's sampled_lines, flex_prefill or none
  // for every head ("M1,M2": both tried, as RecallGuardOptions::adaptive_also).
  std::string guard_adaptive = "auto";  // Default: auto.
  // "promise" (tests/bench/promise_lines.h): shortest and longest held-out prompt (0 = no
  // limit), exact rows of its search and served recall (0 = 128), targets (empty = 0.90, 0.95,
  // 0.98).
  int promise_min_len = 0;
  int promise_max_len = 0;
  int promise_search_rows = 0;
  std::vector<double> promise_targets;
  // "auto": the candidates and sampled_lines margin AutoCandidatesForLength picks for the
  // served length (searched / guarded: seq_len; promise: each held-out prompt's); "all" (the
  // search's default candidates, the default before session 27); or a comma-separated method
  // list (kernels/calibration ParseCandidateMethods). With auto and all, saap's candidates join
  // in searched when --calibrate gave assets.
  std::string search_candidates = "auto";  // Default: auto.
  // "auto": the longest served length searched with sampled_lines alone (kernels/calibration
  // kAutoSampledLinesMaxTokens).
  int search_auto_max_len = 131072;  // Default: 131072 (bench_test checks it equals the constant).
  bool table = false;                     // Default: false (JSON lines).
  std::string dump;                       // Default: none.
  bool help = false;
};

// The --help text.
std::string BenchUsage();

// Parses argv-style flags (without the program name): --flag=value or --flag value; bool flags
// may omit the value; --METHOD.PARAM=value and --param METHOD.PARAM=value set method parameters.
// INVALID_ARGUMENT names the bad flag.
absl::StatusOr<BenchFlags> ParseBenchFlags(const std::vector<std::string>& args);

// Method parameters are set with SetMethodParam (kernels/method_config.h, the parameter table).

// The pseudo-method of BenchFlags::methods that runs the pattern search's per-head choices.
inline constexpr char kSearchedMethod[] = "searched";
// The pseudo-method that runs the searched configs after the worker's recall guard
// (server/recall_guard.h) checked and widened them on the benchmark's prompt.
inline constexpr char kGuardedMethod[] = "guarded";

// Heads sharing one method config, as the worker's planner groups them (one index build each).
struct ConfigGroup {
  MethodConfig config;
  std::vector<int> heads;  // Ascending.
  // Per entry of `heads`, the head's own config where it differs from `config` in a per-head
  // parameter (sampled_lines' gamma; RunConfigGroups builds with BuildOptionsForHeads); empty =
  // `config` for every head.
  std::vector<MethodConfig> head_configs;
};

// Groups `heads` by `config_of_head[h]` (indexed by q head) as the worker's planner does: configs
// that share a build (SameBuildGroup: equal in every group-splitting parameter but sampled_lines'
// gamma, which each head keeps in head_configs) share a group; groups are ordered by their first
// head.
std::vector<ConfigGroup> GroupHeadsByConfig(const std::vector<int>& heads,
                                            const std::vector<MethodConfig>& config_of_head);

// What RunConfigGroups measured.
struct GroupRun {
  double build_ms = 0;               // summed over the groups
  double kernel_ms = 0;              // summed over the groups
  double pairs_ms = 0;               // summed: the device stats after each build (not in build_ms)
  std::vector<SparseIndex> indexes;  // one per group, in group order
};

// Builds each group's index with `backend` (prepared on `problem`) and runs the kernel over it,
// group after group, so that together the groups write every listed head's output. `validate`
// checks each index against the format's invariants first (INTERNAL "invalid index: ...");
// `fetch` makes each group's output visible in the host problem's O. Errors of the backend pass
// through. Not thread-safe (drives `backend`).
absl::StatusOr<GroupRun> RunConfigGroups(AttentionBackend* backend, const AttentionProblem& problem,
                                         const std::vector<ConfigGroup>& groups,
                                         const BuildOptions& options, bool validate, bool fetch);

// Runs the benchmark: JSON lines (or the table) to `out`, progress and errors to `err`.
// Returns the process exit code: 0 ok (even when some methods failed: their lines carry
// "error"), 2 bad flags, 1 when the run could not start (bad files, device unavailable).
int RunBench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_BENCH_LIB_H_
