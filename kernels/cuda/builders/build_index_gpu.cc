// The per-method dispatch of the GPU index builders and the public entry points of
// build_index_gpu.h (the engine side is EngineAccess in attention_cuda.cc).
#include "kernels/cuda/builders/build_index_gpu.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/engine_internal.h"
#include "kernels/cuda/builders/a_shape.h"
#include "kernels/cuda/builders/assembled_builders.h"
#include "kernels/cuda/builders/merged_builders.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace cuda {
namespace {

// The workspace as the merged builders' carver.
class ScopeCarver : public merged::WorkspaceCarver {
 public:
  explicit ScopeCarver(const BuildScope& scope) : scope_(scope) {}
  absl::StatusOr<void*> Carve(int64_t bytes, const char* what) override {
    return scope_.alloc(bytes, what);
  }

 private:
  const BuildScope& scope_;
};

template <typename T>
absl::StatusOr<T*> Alloc(const BuildScope& scope, int64_t count, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(void* p,
                          scope.alloc(std::max<int64_t>(count, 1) * int64_t{sizeof(T)}, what));
  return static_cast<T*>(p);
}

int NumBlocks(const AttentionProblem& p, int block_m) {
  int n = 0;
  for (int b = 0; b < p.batch(); ++b) n += (p.q_len(b) + block_m - 1) / block_m;
  return n;
}

// dense and a_shape (builders/a_shape.cu): ranges from the sizes alone.
absl::StatusOr<SparseIndexView> BuildStaticPattern(const BuildScope& scope,
                                                   const AttentionProblem& p,
                                                   const MethodConfig& config,
                                                   const int32_t* d_heads, int num_heads,
                                                   int block_m) {
  const int kind = config.method == Method::kDense ? 0 : 1;
  const int num_blocks = NumBlocks(p, block_m);
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  const int64_t max_ranges = rows * (kind == 0 ? 1 : 2);
  SparseIndexView v;
  v.block_m = block_m;
  v.num_heads = num_heads;
  v.num_blocks = num_blocks;
  v.heads = d_heads;
  DeviceIndexArrays out;
  SPATTN_ASSIGN_OR_RETURN(out.block_offsets, Alloc<int32_t>(scope, p.batch() + 1, "block_offsets"));
  SPATTN_ASSIGN_OR_RETURN(out.range_indptr, Alloc<int32_t>(scope, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(out.range_start, Alloc<int32_t>(scope, max_ranges, "range_start"));
  SPATTN_ASSIGN_OR_RETURN(out.range_len, Alloc<int32_t>(scope, max_ranges, "range_len"));
  SPATTN_ASSIGN_OR_RETURN(out.col_indptr, Alloc<int32_t>(scope, rows + 1, "col_indptr"));
  SPATTN_ASSIGN_OR_RETURN(out.scratch, Alloc<int32_t>(scope, num_blocks + 1, "builder scratch"));
  const AttnParams& a = *scope.params;
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchStaticIndexBuilder(kind, config.a_shape.sink_tokens, config.a_shape.local_tokens,
                               a.cu_seqlens_q, a.cu_seqlens_k, a.batch, p.causal, block_m,
                               num_heads, num_blocks, out, scope.stream),
      "index builder");
  v.block_offsets = out.block_offsets;
  v.range_indptr = out.range_indptr;
  v.range_start = out.range_start;
  v.range_len = out.range_len;
  v.col_indptr = out.col_indptr;
  v.col_idx = out.range_start;  // no columns; any valid pointer
  return v;
}

}  // namespace

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
                                                      const CudaLayerAssets* maybe_assets) {
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
    case Method::kSampleAttention:
    case Method::kAnchor:
    case Method::kSaap: {
      BuilderEnv env;
      env.stream = scope.stream;
      env.device = scope.device;
      env.alloc = scope.alloc;
      return BuildAssembledIndex(env, p, *scope.params, config, heads, block_m, maybe_assets);
    }
    default:
      break;
  }
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  SPATTN_ASSIGN_OR_RETURN(
      int32_t * d_heads,
      Alloc<int32_t>(scope, static_cast<int64_t>(heads32.size()), "index.heads"));
  if (!heads32.empty()) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_heads, heads32.data(), heads32.size() * 4,
                                                cudaMemcpyHostToDevice, scope.stream),
                                "index.heads");
  }
  switch (config.method) {
    case Method::kDense:
    case Method::kAShape:
      return BuildStaticPattern(scope, p, config, d_heads, static_cast<int>(heads.size()), block_m);
    case Method::kVerticalSlash:
    case Method::kBlockSparse:
    case Method::kFlexPrefill: {
      ScopeCarver carver(scope);
      return merged::BuildMergedIndex(p, *scope.params, config, heads, d_heads, block_m, carver,
                                      scope.stream);
    }
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
