// Statistics of exact attention that say how sparse a problem's attention is and how much of it
// depends on the prompt, computed exactly (fp32 dot products, double softmax) on sampled rows:
//
// * TopKRecall: MInference (seed 000, Fig. 2b/2c) measured on LLaMA-3-8B at 128K that the top
//   4096 keys of each query row carry 96.8 % of its attention mass, and that the top 4096 indices
//   found on another prompt (same row position) carry only 83.7 %: attention is sparse, but where
//   it lands moves with the text. These are the two numbers a synthetic workload must reproduce
//   for a sparse method's measurements on it to mean anything.
// * OracleDensities: the least density any index can have at a given recall target, at three
//   granularities (one key set per query row; per 64-row query block a set of key columns; per
//   query block a set of 64x64 blocks), so a method is read against the best possible at its own
//   granularity.
//
// Both read host problems (Q/K in bf16/fp16/fp32) and are multi-threaded (ParallelFor).
#ifndef SPATTN_KERNELS_WORKLOAD_ATTENTION_STATS_H_
#define SPATTN_KERNELS_WORKLOAD_ATTENTION_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/problem.h"

namespace spattn {

struct TopKRecallOptions {
  // Keys kept per row. Default: 4096 (MInference's k).
  int top_k = 4096;
  // Query rows, stratified over the batch (kernels/fidelity.h SampleQueryRows, every row of the
  // attention matrix equally likely: rows with at most top_k keys count with recall 1, as in a
  // whole-matrix statistic). Default: 64.
  int sample_rows = 64;
  uint64_t seed = 0;       // Default: 0.
  std::vector<int> heads;  // Default: empty = every q head.
};

struct HeadTopKRecall {
  int head = 0;
  double same = 0;   // mean over rows: mass of the row's own top-k keys
  double cross = 0;  // mean over rows: mass, on problem b, of the top-k keys of the same row of a
};

// Same-prompt (on `a`) and cross-prompt (indices from `a`, mass on `b`) top-k recall per head.
// `a` and `b` must have the same sequences, head counts and head_dim (two prompts of one
// layer); INVALID_ARGUMENT otherwise or for bad options.
absl::StatusOr<std::vector<HeadTopKRecall>> TopKRecall(const AttentionProblem& a,
                                                       const AttentionProblem& b,
                                                       const TopKRecallOptions& options);

struct OracleOptions {
  // Recall target in (0, 1]. Default: 0.95.
  double target = 0.95;
  // Query blocks per head, stratified over the batch's blocks. Default: 8.
  int sample_blocks = 8;
  // Query block rows and key block width of the block oracle. Default: 64.
  int block = 64;
  uint64_t seed = 0;       // Default: 0.
  std::vector<int> heads;  // Default: empty = every q head.
};

struct HeadOracle {
  int head = 0;
  // Computed pairs / allowed pairs over the sampled blocks for the smallest selection reaching
  // `target`:
  double row = 0;     // per row, its smallest key set reaching target (row recall >= target)
  double column = 0;  // per query block, the smallest key-column set whose mass averaged over
                      // the block's rows reaches target (the block's mean recall = target)
  double block = 0;   // per query block, the smallest set of block x block tiles (same rule)
};

// The oracle densities of every head. INVALID_ARGUMENT for bad options or problems.
absl::StatusOr<std::vector<HeadOracle>> OracleDensities(const AttentionProblem& problem,
                                                        const OracleOptions& options);

}  // namespace spattn

#endif  // SPATTN_KERNELS_WORKLOAD_ATTENTION_STATS_H_
