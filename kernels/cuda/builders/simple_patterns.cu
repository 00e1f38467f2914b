// GPU builders of dense and a_shape: per query block the ranges from the block's geometry
// (count pass, scan, fill pass); every head slot gets the same rows.
#include <algorithm>

#include "kernels/cuda/builders/simple_patterns.h"
#include "kernels/cuda/common/index_geometry.cuh"
#include "kernels/cuda/common/scan.h"

namespace spattn {
namespace cuda {
namespace {

int GridFor(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
}

// block_offsets from cu_seqlens_q (one thread: batches are short).
__global__ void BlockOffsetsKernel(const int32_t* cu_q, int batch, int block_m, int32_t* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t acc = 0;
  out[0] = 0;
  for (int b = 0; b < batch; ++b) {
    acc += geometry::CeilDiv(cu_q[b + 1] - cu_q[b], block_m);
    out[b + 1] = acc;
  }
}

// The ranges of one block: dense [0, key_end); a_shape sink + local window, clipped to key_end
// and merged when they touch (like RowKeys::Normalize).
__device__ int BlockRanges(int kind, int sink, int local, const geometry::BlockGeo& g, int* starts,
                           int* ends) {
  if (kind == 0) {
    starts[0] = 0;
    ends[0] = g.key_end;
    return 1;
  }
  int n = 0;
  const int s_end = min(sink, g.key_end);
  if (s_end > 0) {
    starts[n] = 0;
    ends[n] = s_end;
    ++n;
  }
  const int l_start = max(0, g.first_pos - local + 1);
  const int l_end = min(g.last_pos + 1, g.key_end);
  if (l_end > l_start) {
    if (n == 1 && l_start <= ends[0]) {
      ends[0] = max(ends[0], l_end);
    } else {
      starts[n] = l_start;
      ends[n] = l_end;
      ++n;
    }
  }
  return n;
}

__global__ void CountRangesKernel(int kind, int sink, int local, const int32_t* cu_q,
                                  const int32_t* cu_k, const int32_t* offsets, int batch,
                                  bool causal, int block_m, int num_blocks, int32_t* counts) {
  for (int blk = blockIdx.x * blockDim.x + threadIdx.x; blk < num_blocks;
       blk += gridDim.x * blockDim.x) {
    const geometry::BlockGeo g =
        geometry::Geometry(cu_q, cu_k, offsets, batch, causal, block_m, blk);
    int s[2], e[2];
    counts[blk] = BlockRanges(kind, sink, local, g, s, e);
  }
}

// prefix: exclusive prefix of per-block counts, prefix[num_blocks] = ranges per head slot.
__global__ void FillRangesKernel(int kind, int sink, int local, const int32_t* cu_q,
                                 const int32_t* cu_k, const int32_t* offsets, int batch,
                                 bool causal, int block_m, int num_heads, int num_blocks,
                                 const int32_t* prefix, DeviceIndexArrays out) {
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  const int32_t per_slot = prefix[num_blocks];
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int slot = static_cast<int>(r / num_blocks);
    const int blk = static_cast<int>(r - static_cast<int64_t>(slot) * num_blocks);
    const geometry::BlockGeo g =
        geometry::Geometry(cu_q, cu_k, offsets, batch, causal, block_m, blk);
    int s[2], e[2];
    const int n = BlockRanges(kind, sink, local, g, s, e);
    const int32_t o = slot * per_slot + prefix[blk];
    out.range_indptr[r] = o;
    out.col_indptr[r] = 0;
    for (int i = 0; i < n; ++i) {
      out.range_start[o + i] = s[i];
      out.range_len[o + i] = e[i] - s[i];
    }
    if (r == rows - 1) {
      out.range_indptr[rows] = num_heads * per_slot;
      out.col_indptr[rows] = 0;
    }
  }
}

}  // namespace

cudaError_t LaunchStaticIndexBuilder(int kind, int sink_tokens, int local_tokens,
                                     const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                     int batch, bool causal, int block_m, int num_heads,
                                     int num_blocks, const DeviceIndexArrays& out,
                                     cudaStream_t stream) {
  if (kind != 0 && kind != 1) return cudaErrorInvalidValue;
  BlockOffsetsKernel<<<1, 32, 0, stream>>>(cu_seqlens_q, batch, block_m, out.block_offsets);
  if (num_blocks == 0 || num_heads == 0) {
    cudaError_t err = cudaMemsetAsync(
        out.range_indptr, 0, (static_cast<int64_t>(num_heads) * num_blocks + 1) * 4, stream);
    if (err != cudaSuccess) return err;
    err = cudaMemsetAsync(out.col_indptr, 0, (static_cast<int64_t>(num_heads) * num_blocks + 1) * 4,
                          stream);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
  }
  CountRangesKernel<<<GridFor(num_blocks, 256), 256, 0, stream>>>(
      kind, sink_tokens, local_tokens, cu_seqlens_q, cu_seqlens_k, out.block_offsets, batch, causal,
      block_m, num_blocks, out.scratch);
  cudaError_t err = LaunchExclusiveScan32(out.scratch, num_blocks, stream);
  if (err != cudaSuccess) return err;
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  FillRangesKernel<<<GridFor(rows, 256), 256, 0, stream>>>(
      kind, sink_tokens, local_tokens, cu_seqlens_q, cu_seqlens_k, out.block_offsets, batch, causal,
      block_m, num_heads, num_blocks, out.scratch, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
