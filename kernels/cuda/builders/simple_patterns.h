// GPU builders of the static patterns, dense (one range per query block) and a_shape (sink +
// local window, kernels/builders/simple_patterns.cc on the CPU): computed from the uploaded
// cu_seqlens alone, Q/K are not read. Launchers return cudaError_t and only enqueue.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SIMPLE_PATTERNS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SIMPLE_PATTERNS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spattn {
namespace cuda {

// The caller sizes the arrays: block_offsets [batch + 1], range_indptr / col_indptr
// [num_heads * num_blocks + 1], range_start / range_len [max_ranges_per_row * num_heads *
// num_blocks] (1 for dense, 2 for a_shape); no columns. Writes block_offsets too.
struct DeviceIndexArrays {
  int32_t* block_offsets = nullptr;
  int32_t* range_indptr = nullptr;
  int32_t* range_start = nullptr;
  int32_t* range_len = nullptr;
  int32_t* col_indptr = nullptr;
  int32_t* scratch = nullptr;  // [num_blocks + 1]
};

// kind 0 = dense, 1 = a_shape.
cudaError_t LaunchStaticIndexBuilder(int kind, int sink_tokens, int local_tokens,
                                     const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                     int batch, bool causal, int block_m, int num_heads,
                                     int num_blocks, const DeviceIndexArrays& out,
                                     cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SIMPLE_PATTERNS_H_
