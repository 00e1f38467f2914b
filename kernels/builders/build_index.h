// Index builders: one per method, each producing the one SparseIndex format. BuildSparseIndex
// dispatches on the method; the per-method entry points sit in their own headers.
#ifndef SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_
#define SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_

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

// Whether the CPU builder of `method` is implemented in this build.
bool CpuBuilderAvailable(Method method);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_BUILD_INDEX_H_
