// The host entry of every GPU index builder, one per method, each defined in
// builders/<method>_host.cc next to its kernels builders/<method>.cu and named like its CPU twin
// kernels/builders/<method>.cc. build_index_gpu.cc dispatches to them (BuildIndexInWorkspace);
// shared host steps are in builder_steps.h. Internal to kernels/cuda; CUDA types appear here.
//
// Every entry builds the index of q heads `heads` (checked to be q heads) of the device problem
// `p` into the build's workspace (the returned view points into it); scope.params holds the
// uploaded problem (device cu_seqlens). block_m is the index block of the methods without a
// block_size of their own (dense, a_shape, vertical_slash, saap). Enqueues on scope.stream and
// may synchronize it once (the CSR totals). Errors: FAILED_PRECONDITION when Q/K are not device
// memory or saap has no assets; INVALID_ARGUMENT for unsupported dtype / head_dim / strides or
// mismatched assets; UNIMPLEMENTED past a GPU limit (named in the message); RESOURCE_EXHAUSTED
// when the workspace or the int32 offsets do not suffice.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_METHOD_BUILDERS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_METHOD_BUILDERS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/attention/engine_internal.h"
#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// What CudaLayerAssets holds: one device buffer with every array of SaapAssetsDev, plus the
// host-side facts the builder checks requests against (saap_host.cc).
struct CudaLayerAssets::Rep {
  int device = 0;
  int head_dim = 0;
  int num_centroids = 0;
  std::vector<bool> has_centroids;   // per kv head
  std::vector<bool> has_classifier;  // per q head
  std::unique_ptr<CudaDeviceBuffer> buffer;
  cuda::SaapAssetsDev dev;
};

namespace cuda {

// dense and a_shape (simple_patterns_host.cc).
absl::StatusOr<SparseIndexView> BuildSimplePatternIndex(const BuildScope& scope,
                                                        const AttentionProblem& p,
                                                        const MethodConfig& config,
                                                        const std::vector<int>& heads, int block_m);
absl::StatusOr<SparseIndexView> BuildVerticalSlashIndex(const BuildScope& scope,
                                                        const AttentionProblem& p,
                                                        const MethodConfig& config,
                                                        const std::vector<int>& heads, int block_m);
absl::StatusOr<SparseIndexView> BuildBlockSparseIndex(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m);
absl::StatusOr<SparseIndexView> BuildFlexPrefillIndex(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m);
absl::StatusOr<SparseIndexView> BuildSampleAttentionIndex(const BuildScope& scope,
                                                          const AttentionProblem& p,
                                                          const MethodConfig& config,
                                                          const std::vector<int>& heads,
                                                          int block_m);
absl::StatusOr<SparseIndexView> BuildAnchorIndex(const BuildScope& scope, const AttentionProblem& p,
                                                 const MethodConfig& config,
                                                 const std::vector<int>& heads, int block_m);
absl::StatusOr<SparseIndexView> BuildSaapIndex(const BuildScope& scope, const AttentionProblem& p,
                                               const MethodConfig& config,
                                               const std::vector<int>& heads, int block_m,
                                               const CudaLayerAssets* maybe_assets);

// sampled_lines (sampled_lines_host.cc); `gammas`: GpuBuildOptions::sampled_lines_gammas.
absl::StatusOr<SparseIndexView> BuildSampledLinesIndex(const BuildScope& scope,
                                                       const AttentionProblem& p,
                                                       const MethodConfig& config,
                                                       const std::vector<int>& heads, int block_m,
                                                       const std::vector<float>& gammas);

// Validates `assets` for head_dim and copies them to `device` (saap_host.cc).
absl::StatusOr<std::unique_ptr<CudaLayerAssets::Rep>> UploadSaapAssets(const LayerAssets& assets,
                                                                       int head_dim, int device);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_METHOD_BUILDERS_H_
