// Host side of the GPU index builders of vertical_slash, block_sparse and flex_prefill: checks
// the inputs, sizes every buffer from host-known counts, carves it from the engine's workspace,
// enqueues the kernels of builders_{vs,block,flex}.cu and returns the SparseIndex in device
// memory. Internal to kernels/cuda (CudaAttentionEngine calls it); CUDA types appear here.
//
// One host round trip per build: after the count pass the two CSR totals are copied back so the
// entry arrays are carved at their real size (everything else is sized in advance, per unit or
// per row, never heads x S x budget). All heads go through the same few launches.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_MERGED_BUILDERS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_MERGED_BUILDERS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {
namespace merged {

// Device memory from the engine's workspace pool (a bump allocator; nothing is freed during a
// call). Implementations are not required to be thread-safe.
class WorkspaceCarver {
 public:
  virtual ~WorkspaceCarver() = default;
  // At least `bytes` (>= 1) bytes, 256-byte aligned; RESOURCE_EXHAUSTED when the pool is full.
  virtual absl::StatusOr<void*> Carve(int64_t bytes, const char* what) = 0;
};

// vertical_slash, block_sparse or flex_prefill.
bool IsMergedBuilderMethod(Method method);

// The index's block_m: block_sparse and flex_prefill use their block_size (as their CPU twins
// do); vertical_slash uses `block_m`.
int IndexBlockM(const MethodConfig& config, int block_m);

// Limits of the GPU path beyond MethodConfig::Validate (the message names the parameter).
absl::Status CheckMergedBuilder(const AttentionProblem& problem, const MethodConfig& config,
                                int block_m);

// Builds the index of `heads` (already uploaded: d_heads) for the device problem whose Q/K and
// uploaded cu_seqlens are in `a`. Enqueues on `stream` and synchronizes it once.
absl::StatusOr<SparseIndexView> BuildMergedIndex(const AttentionProblem& problem,
                                                 const AttnParams& a, const MethodConfig& config,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, int block_m,
                                                 WorkspaceCarver& workspace, cudaStream_t stream);

}  // namespace merged
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_MERGED_BUILDERS_H_
