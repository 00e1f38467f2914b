// Statistics of a device-resident SparseIndex computed where it lives, so that the worker copies
// one number per head slot to the host instead of the index.
#ifndef SPATTN_KERNELS_CUDA_COMMON_INDEX_STATS_H_
#define SPATTN_KERNELS_CUDA_COMMON_INDEX_STATS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {

// per_slot [idx.num_heads] (zeroed here) += the (query, key) pairs the kernel computes for each
// head slot: ComputedPairs (kernels/sparse_index.h) on the device. cu_q / cu_k: device
// cu_seqlens [batch + 1].
cudaError_t LaunchComputedPairs(const SparseIndexView& idx, const int32_t* cu_q,
                                const int32_t* cu_k, int batch, bool causal,
                                unsigned long long* per_slot, cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_INDEX_STATS_H_
