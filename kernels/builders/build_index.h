// Index builders: one per method, each producing the one SparseIndex format. BuildSparseIndex
// dispatches on the method; the per-method entry points sit in their own headers.
#ifndef SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_
#define SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

struct BuildOptions {
  // Query rows per index block for methods without a block size of their own (dense, a_shape,
  // vertical_slash, saap). Default: 64.
  int block_m = 64;
  // Query rows per index block of sampled_lines; 0 takes block_m. Its defaults were tuned on
  // 128-row blocks, which the worker builds it on (spattn-worker --sampled_lines_block_m, default
  // 128); whoever models the worker (the calibration search, spattn-bench) sets the same.
  // Default: 0.
  int sampled_lines_block_m = 0;
  // Per-layer learned inputs (Saap). Default: none.
  const LayerAssets* maybe_assets = nullptr;
  // sampled_lines: per entry of `heads`, that head's gamma (each in (0, 1], as
  // SampledLinesParams::gamma, which it replaces), so that heads whose configs differ only in
  // gamma share one build (SameBuildGroup; the worker's planner and recall guard group them so:
  // one build costs about the same over 32 heads as over a few, issue 11 item 5). Every head's
  // index is the one a build of that head alone at its gamma gives. Empty = the config's gamma for
  // every head; other methods ignore it. Default: empty.
  std::vector<float> sampled_lines_gammas;

  // The query rows per index block of `method`'s index under these options.
  int BlockRowsFor(Method method) const {
    return method == Method::kSampledLines && sampled_lines_block_m > 0 ? sampled_lines_block_m
                                                                        : block_m;
  }
};

// Builds the index of q heads `heads` under `config` (validated first). Host memory only.
absl::Status BuildSparseIndex(const AttentionProblem& problem, const MethodConfig& config,
                              const std::vector<int>& heads, const BuildOptions& options,
                              SparseIndex* out);

// Whether heads running `a` and heads running `b` can share one build: the same method and the
// same parameters that split the planner's groups (SameGroupConfig), except those a builder takes
// per head (sampled_lines' gamma: BuildOptions::sampled_lines_gammas).
bool SameBuildGroup(const MethodConfig& a, const MethodConfig& b);

// A string equal for two configs when they are equal but for the per-head parameters (a map key
// of build groups; finer than SameBuildGroup, which ignores non-splitting parameters too).
std::string BuildGroupKey(const MethodConfig& config);

// `base` for one build over heads running `configs` (one per head, in the build's head order,
// SameBuildGroup with each other; the build takes configs[0]): the per-head parameters set where
// the configs differ in them (sampled_lines_gammas when their gammas differ; else left empty,
// configs[0] alone then describes the build).
BuildOptions BuildOptionsForHeads(const BuildOptions& base,
                                  const std::vector<MethodConfig>& configs);

// Whether the CPU builder of `method` is implemented in this build.
bool CpuBuilderAvailable(Method method);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_
