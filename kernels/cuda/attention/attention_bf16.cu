// bf16 instances of the dense and sparse attention kernels.
#include <algorithm>

#include "kernels/cuda/attention/attention_instances.cuh"

namespace spattn {
namespace cuda {
namespace detail {

cudaError_t DenseBf16(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream) {
  return DenseTyped<__nv_bfloat16>(p, max_q_len, v, stream);
}
cudaError_t SparseBf16(const AttnParams& p, const SparseIndexView& idx, const SparseSchedule& sched,
                       KernelVariant v, cudaStream_t stream) {
  return SparseTyped<__nv_bfloat16>(p, idx, sched, v, stream);
}

}  // namespace detail
}  // namespace cuda
}  // namespace spattn
