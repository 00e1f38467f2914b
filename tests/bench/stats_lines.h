// spattn-bench's statistics lines (pseudo-methods of --methods, only when named):
//   oracle       per head group, the oracle densities at the run's target recall
//                (--search_target_recall) at row, query-block-column and 64x64-block
//                granularity on sampled 64-row query blocks (kernels/workload/attention_stats.h)
//   topk_recall  per head group, MInference's Fig. 2b/2c statistics: the share of attention mass
//                in each row's top-k keys on the same prompt, and with the top-k indices of
//                another prompt of the same model (seed + 1); k = seq_len / 32 (4096 at 128K)
#ifndef SPATTN_TESTS_BENCH_STATS_LINES_H_
#define SPATTN_TESTS_BENCH_STATS_LINES_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/problem.h"
#include "kernels/workload/workload.h"

namespace spattn {

inline constexpr char kOracleMethod[] = "oracle";
inline constexpr char kTopKRecallMethod[] = "topk_recall";

bool IsStatsMethod(const std::string& name);

struct StatsLineOptions {
  double target = 0.95;   // oracle: recall target
  int sample_blocks = 8;  // oracle: query blocks per head
  int block = 64;         // oracle: query block rows and tile width
  int sample_rows = 64;   // topk_recall: rows per head
  int top_k = 0;          // topk_recall: 0 = ceil(k_len / 32)
  uint64_t seed = 0;
  bool table = false;  // a markdown row per group instead of JSON
};

// Writes the lines of `method` (oracle or topk_recall) for `groups` (name, q heads) and an "all"
// line when there are several groups. topk_recall needs `maybe_workload` (the other prompt is
// generated from its options with seed + 1); FAILED_PRECONDITION without it. `prefix` is the
// JSON of the common fields (workload, seq_len, ...) without braces.
absl::Status EmitStatsLines(const std::string& method, const AttentionProblem& problem,
                            const Workload* maybe_workload,
                            const std::vector<std::pair<std::string, std::vector<int>>>& groups,
                            const StatsLineOptions& options, const std::string& prefix,
                            std::ostream& out);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_STATS_LINES_H_
