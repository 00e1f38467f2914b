// spattn-bench --methods=promise (issue 11, only when named): does the selection keep its recall
// promise on prompts it was not calibrated on? For each target (0.90 / 0.95 / 0.98) the pattern
// search chooses per-head configs on a calibration prompt of --search_len tokens (seed + 1000);
// then held-out prompts of the same synthetic model (other seeds) of 0.25x .. 8x that length go
// through the worker's recall guard (on the GPU with --device=cuda, WorkerCudaPath; else on the
// host), and the served configs' recall is measured exactly on other rows than the guard's
// probes, on the indexes the backend builds for them (per build group, as the worker builds:
// the GPU builders with --device=cuda, the host builders on the CPU). One JSON line per (target, length): recall mean / min, heads within 0.02 of the
// target, density, guard time; "kept" = mean >= target and >= 95 % of heads within 0.02; and one
// summary line per target over all lengths.
#ifndef SPATTN_TESTS_BENCH_PROMISE_LINES_H_
#define SPATTN_TESTS_BENCH_PROMISE_LINES_H_

#include <cstdint>
#include <ostream>
#include <vector>

#include "absl/status/status.h"
#include "kernels/builders/build_index.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/workload/workload.h"
#include "server/recall_guard.h"
#include "tests/bench/backend.h"

namespace spattn {

inline constexpr char kPromiseMethod[] = "promise";

struct PromiseOptions {
  std::vector<double> targets = {0.90, 0.95, 0.98};
  std::vector<double> factors = {0.25, 0.5, 1, 2, 4, 8};  // held-out length / calibration length
  int calib_len = 2048;
  int search_rows = 128;  // the search's exact rows per prompt
  int recall_rows = 128;  // exact rows per head of the served recall (seed 777: not the probes)
  int probe_rows = -1;    // guard probe rows (-1: the worker's, 32 host / 64 CUDA)
  int min_len = 0;        // held-out prompts shorter than this are skipped
  int max_len = 1 << 20;  // held-out prompts longer than this are skipped
  // The searched configs start from ScaleConfigToLength(config, calib_len, served length, e),
  // as a worker starts from HeadConfig.calibrated_tokens; 0 = unscaled.
  double length_exponent = RecallGuardOptions::kLengthExponent;
  // The host guard's fine ladder step (RecallGuardOptions::fine_step; 0: doublings only).
  double fine_step = RecallGuardOptions().fine_step;
  // The host guard's adaptive try (RecallGuardOptions::adaptive).
  MethodConfig adaptive = RecallGuardOptions::DefaultAdaptive();
  MethodConfig adaptive_also;  // RecallGuardOptions::adaptive_also
  bool adaptive_auto = false;  // RecallGuardOptions::adaptive_auto (spattn-bench's default: auto)
  BuildOptions build;
  // PatternSearchOptions::sampled_lines_margin of the search (spattn-bench
  // --search_sampled_lines_margin); 0 = as before.
  double sampled_lines_margin = 0;
  // The search's candidates (spattn-bench --search_candidates); empty = DefaultCandidates().
  std::vector<MethodConfig> candidates;
  // spattn-bench --search_candidates=auto: each held-out length is served the configs of the
  // search AutoCandidatesForLength(length, auto_max_len) picks (each such search once per
  // target, on the same calibration prompt); `candidates` and `sampled_lines_margin` unused.
  bool auto_candidates = false;
  int64_t auto_max_len = kAutoSampledLinesMaxTokens;
};

// `model`: the bench's workload options (shape heads, dtype, workload, model seed); lengths and
// seeds are set here. `backend` runs the guard when it has the worker's path (GuardOnDevice).
absl::Status EmitPromiseLines(const WorkloadOptions& model, AttentionBackend* backend,
                              const PromiseOptions& options, std::ostream& out, std::ostream& err);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_PROMISE_LINES_H_
