// Where a query block of a SparseIndex sits, computed on the device from the uploaded
// cu_seqlens and the index's block_offsets (the device twin of GetBlockGeometry in
// kernels/sparse_index.h). Header-only device code.
#ifndef SPATTN_KERNELS_CUDA_COMMON_INDEX_GEOMETRY_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_INDEX_GEOMETRY_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace spattn {
namespace cuda {
namespace geometry {

__device__ __forceinline__ int CeilDiv(int a, int b) { return (a + b - 1) / b; }

struct BlockGeo {
  int q_begin, q_end;  // query rows of the block within its sequence
  int first_pos, last_pos, key_end;
};

// Block `blk` of the index whose block_offsets are `offsets` [batch + 1] (queries are the last
// q_len keys of each sequence: causal mask aligned bottom-right).
__device__ __forceinline__ BlockGeo Geometry(const int32_t* cu_q, const int32_t* cu_k,
                                             const int32_t* offsets, int batch, bool causal,
                                             int block_m, int blk) {
  int seq = 0;
  while (seq + 1 < batch && offsets[seq + 1] <= blk) ++seq;
  const int q_len = cu_q[seq + 1] - cu_q[seq];
  const int k_len = cu_k[seq + 1] - cu_k[seq];
  BlockGeo g;
  g.q_begin = (blk - offsets[seq]) * block_m;
  g.q_end = min(g.q_begin + block_m, q_len);
  g.first_pos = k_len - q_len + g.q_begin;
  g.last_pos = k_len - q_len + g.q_end - 1;
  g.key_end = causal ? g.last_pos + 1 : k_len;
  return g;
}

}  // namespace geometry
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_INDEX_GEOMETRY_CUH_
