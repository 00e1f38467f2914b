// The per-method dispatch of the GPU index builders and the public entry points of
// build_index_gpu.h (the engine side is EngineAccess in attention_cuda.cc).
#include "kernels/cuda/builders/build_index_gpu.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/engine_internal.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace cuda {

int GpuIndexBlockM(const MethodConfig& config, int block_m) {
  switch (config.method) {
    case Method::kBlockSparse:
      return config.block_sparse.block_size;
    case Method::kFlexPrefill:
      return config.flex_prefill.block_size;
    case Method::kSampleAttention:
      return config.sample_attention.block_size;
    case Method::kAnchor:
      return config.anchor.block_size;
    default:
      return block_m;
  }
}

absl::StatusOr<SparseIndexView> BuildIndexInWorkspace(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m,
                                                      const CudaLayerAssets* maybe_assets,
                                                      const std::vector<float>& sl_gammas) {
  SPATTN_RETURN_IF_ERROR(config.Validate());
  if (!GpuBuilderAvailable(config.method)) {
    return absl::UnimplementedError(
        absl::StrCat("method ", MethodName(config.method), " has no GPU index builder"));
  }
  if (block_m <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_m must be > 0, got ", block_m));
  }
  for (int h : heads) {
    if (h < 0 || h >= p.num_q_heads) {
      return absl::InvalidArgumentError(absl::StrCat("heads: ", h, " is not a q head"));
    }
  }
  switch (config.method) {
    case Method::kDense:
    case Method::kAShape:
      return BuildSimplePatternIndex(scope, p, config, heads, block_m);
    case Method::kVerticalSlash:
      return BuildVerticalSlashIndex(scope, p, config, heads, block_m);
    case Method::kBlockSparse:
      return BuildBlockSparseIndex(scope, p, config, heads, block_m);
    case Method::kFlexPrefill:
      return BuildFlexPrefillIndex(scope, p, config, heads, block_m);
    case Method::kSampleAttention:
      return BuildSampleAttentionIndex(scope, p, config, heads, block_m);
    case Method::kAnchor:
      return BuildAnchorIndex(scope, p, config, heads, block_m);
    case Method::kSaap:
      return BuildSaapIndex(scope, p, config, heads, block_m, maybe_assets);
    case Method::kSampledLines:
      return BuildSampledLinesIndex(scope, p, config, heads, block_m, sl_gammas);
    default:
      break;
  }
  return absl::UnimplementedError(
      absl::StrCat("method ", MethodName(config.method), " has no GPU index builder"));
}

}  // namespace cuda

bool GpuBuilderAvailable(Method method) {
  switch (method) {
    case Method::kDense:
    case Method::kAShape:
    case Method::kVerticalSlash:
    case Method::kBlockSparse:
    case Method::kFlexPrefill:
    case Method::kSampleAttention:
    case Method::kAnchor:
    case Method::kSaap:
    case Method::kSampledLines:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<GpuSparseIndex> BuildIndexOnGpu(CudaAttentionEngine& engine,
                                               const AttentionProblem& problem,
                                               const MethodConfig& config,
                                               const std::vector<int>& heads,
                                               const GpuBuildOptions& options) {
  return cuda::EngineAccess::Build(engine, problem, config, heads, options);
}

absl::Status DownloadIndex(CudaAttentionEngine& engine, const GpuSparseIndex& index,
                           SparseIndex* out) {
  return cuda::EngineAccess::Download(engine, index, out);
}

absl::StatusOr<std::vector<int64_t>> ComputedPairsOnGpu(CudaAttentionEngine& engine,
                                                        const AttentionProblem& problem,
                                                        const GpuSparseIndex& index) {
  return cuda::EngineAccess::ComputedPairs(engine, problem, index);
}

absl::StatusOr<std::vector<double>> MassRecallOnGpu(CudaAttentionEngine& engine,
                                                    const AttentionProblem& problem,
                                                    const SparseIndex& index,
                                                    const SparseIndexView* maybe_device,
                                                    const std::vector<std::pair<int, int>>& rows) {
  return cuda::EngineAccess::MassRecall(engine, problem, index, maybe_device, rows);
}

}  // namespace spattn
