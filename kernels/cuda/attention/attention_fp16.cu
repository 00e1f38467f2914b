// fp16 instances of the dense and sparse attention kernels.
#include <algorithm>

#include "kernels/cuda/attention/attention_instances.cuh"

namespace spattn {
namespace cuda {
namespace detail {

cudaError_t DenseFp16(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream) {
  return DenseTyped<__half>(p, max_q_len, v, stream);
}
cudaError_t SparseFp16(const AttnParams& p, const SparseIndexView& idx, const SparseSchedule& sched,
                       KernelVariant v, cudaStream_t stream) {
  return SparseTyped<__half>(p, idx, sched, v, stream);
}

}  // namespace detail
}  // namespace cuda
}  // namespace spattn
