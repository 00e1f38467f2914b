// What the GPU index builders need from CudaAttentionEngine, and the one per-method dispatch of
// the builders. Internal to kernels/cuda (CUDA types appear here).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_ENGINE_INTERNAL_H_
#define SPATTN_KERNELS_CUDA_ATTENTION_ENGINE_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {

// One build inside an engine call: the engine's stream and device, the uploaded problem (device
// cu_seqlens in `params`) and the workspace (a bump allocator emptied at the call's start; 256-
// byte aligned; RESOURCE_EXHAUSTED when full).
struct BuildScope {
  cudaStream_t stream = nullptr;
  int device = 0;
  const AttnParams* params = nullptr;
  std::function<absl::StatusOr<void*>(int64_t bytes, const char* what)> alloc;
  // Carves an array of the index being built where the engine keeps it after the build (the
  // resident region at the workspace's top, as `alloc` aligned and checked): what a builder
  // writes there, the engine's Keep neither copies nor moves. Unset: `alloc` serves.
  std::function<absl::StatusOr<void*>(int64_t bytes, const char* what)> keep;
  // Bytes the workspace has left for `alloc` and `keep` together (unset: unknown), so that a
  // builder's optional scratch (the row assembler's kept words) takes only part of it.
  std::function<int64_t()> available;
  // The built index's CSR totals {ranges, columns}, written by a builder that read them back
  // (its one host round trip), so that Keep needs no second one; -1 where not written.
  int64_t* maybe_totals = nullptr;
};

// The index block size of `config` with the caller's block_m (the method's block_size where it
// has one).
int GpuIndexBlockM(const MethodConfig& config, int block_m);

// Builds the index in the workspace (the view points into it) with the method's GPU builder:
// host entry (builders/method_builders.h, defined in builders/<method>_host.cc). Enqueues on
// scope.stream; may synchronize it (the builders' one host round trip: CSR totals).
// `sl_gammas`: GpuBuildOptions::sampled_lines_gammas.
absl::StatusOr<SparseIndexView> BuildIndexInWorkspace(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m,
                                                      const CudaLayerAssets* maybe_assets,
                                                      const std::vector<float>& sl_gammas = {});

// The engine side of build_index_gpu.h (implemented in attention_cuda.cc).
class EngineAccess {
 public:
  static absl::StatusOr<GpuSparseIndex> Build(CudaAttentionEngine& engine,
                                              const AttentionProblem& p, const MethodConfig& config,
                                              const std::vector<int>& heads,
                                              const GpuBuildOptions& options);
  static absl::Status Download(CudaAttentionEngine& engine, const GpuSparseIndex& index,
                               SparseIndex* out);
  static absl::StatusOr<std::vector<int64_t>> ComputedPairs(CudaAttentionEngine& engine,
                                                            const AttentionProblem& p,
                                                            const GpuSparseIndex& index);
  // MassRecallOnGpu (build_index_gpu.h): `maybe_device` is the index on the device, or null to
  // upload `index` (complete on the host) into the workspace first.
  static absl::StatusOr<std::vector<double>> MassRecall(
      CudaAttentionEngine& engine, const AttentionProblem& p, const SparseIndex& index,
      const SparseIndexView* maybe_device, const std::vector<std::pair<int, int>>& rows);
};

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_ENGINE_INTERNAL_H_
