// Host side of the GPU index builders of SampleAttention, AnchorAttention and Saap
// (assembled_kernels.h): checks, host-side tables from the problem's sizes, workspace carving, and the
// count-then-fill assembly with its one host round trip (the two entry totals). Internal to
// kernels/cuda; CudaAttentionEngine dispatches here.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_BUILDERS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_BUILDERS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// What CudaLayerAssets holds: one device buffer with every array of SaapAssetsDev, plus the
// host-side facts the builder checks requests against.
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

// Where a build runs: the engine's stream and device, and its workspace (256-byte aligned
// carving; RESOURCE_EXHAUSTED when the pool is too small).
struct BuilderEnv {
  cudaStream_t stream = nullptr;
  int device = 0;
  std::function<absl::StatusOr<void*>(int64_t bytes, const char* what)> alloc;
};

// Whether `method` is one of this file's (sample_attention, anchor, saap).
bool IsAssembledBuilderMethod(Method method);

// Builds the index of q heads `heads` (already checked to be q heads) on the device. `a` is the
// uploaded problem (device cu_seqlens). block_m is read by saap only (the other two index by
// their block_size). The returned view points into the workspace. Errors: FAILED_PRECONDITION
// when Q/K are not device memory or saap has no assets; INVALID_ARGUMENT for unsupported
// dtype / head_dim / strides or mismatched assets; UNIMPLEMENTED past the GPU limits (saap
// top_l > 1024, more than 64 head slots of one kv head); RESOURCE_EXHAUSTED when the workspace
// or int32 offsets do not suffice.
absl::StatusOr<SparseIndexView> BuildAssembledIndex(const BuilderEnv& env,
                                                    const AttentionProblem& p, const AttnParams& a,
                                                    const MethodConfig& config,
                                                    const std::vector<int>& heads, int block_m,
                                                    const CudaLayerAssets* maybe_assets);

// Validates `assets` for head_dim and copies them to `device`.
absl::StatusOr<std::unique_ptr<CudaLayerAssets::Rep>> UploadSaapAssets(const LayerAssets& assets,
                                                                       int head_dim, int device);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_BUILDERS_H_
