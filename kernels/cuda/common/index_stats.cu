#include <algorithm>

#include "kernels/cuda/common/index_geometry.cuh"
#include "kernels/cuda/common/index_stats.h"

namespace spattn {
namespace cuda {
namespace {

constexpr int kStatsThreads = 256;
constexpr int kStatsWarps = kStatsThreads / 32;

// One warp per index row, its lanes striding over the row's ranges and columns (a thread per row
// left rows of thousands of columns to one thread each, a few hundred CTAs' worth of serial work
// on a GPU of 132 SMs); the same arithmetic as ComputedPairs in kernels/sparse_index.cc, summed
// in integers, so the total is the same.
__global__ void __launch_bounds__(kStatsThreads)
    ComputedPairsKernel(SparseIndexView idx, const int32_t* cu_q, const int32_t* cu_k, int batch,
                        bool causal, unsigned long long* per_slot) {
  const int64_t rows = static_cast<int64_t>(idx.num_heads) * idx.num_blocks;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kStatsWarps;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kStatsWarps) + (threadIdx.x >> 5); r < rows;
       r += warps) {
    const int slot = static_cast<int>(r / idx.num_blocks);
    const int blk = static_cast<int>(r - static_cast<int64_t>(slot) * idx.num_blocks);
    const geometry::BlockGeo g =
        geometry::Geometry(cu_q, cu_k, idx.block_offsets, batch, causal, idx.block_m, blk);
    const int64_t n = g.q_end - g.q_begin;
    int64_t total = 0;
    const int32_t r_end = idx.range_indptr[r + 1];
    for (int32_t i = idx.range_indptr[r] + lane; i < r_end; i += 32) {
      const int64_t st = idx.range_start[i], en = st + idx.range_len[i];
      const int64_t full_end = causal ? min(en, static_cast<int64_t>(g.first_pos) + 1) : en;
      if (full_end > st) total += (full_end - st) * n;
      const int64_t j0 = max(st, full_end) - g.first_pos;
      const int64_t j1 = min(en - g.first_pos, n);
      if (causal && j1 > j0) total += (j1 - j0) * n - (j0 + j1 - 1) * (j1 - j0) / 2;
    }
    const int32_t c_end = idx.col_indptr[r + 1];
    for (int32_t i = idx.col_indptr[r] + lane; i < c_end; i += 32) {
      if (!causal) {
        total += n;
      } else {
        const int64_t first_row =
            max(int64_t{0}, static_cast<int64_t>(idx.col_idx[i]) - g.first_pos);
        total += max(int64_t{0}, n - first_row);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (lane == 0 && total != 0) {
      atomicAdd(per_slot + slot, static_cast<unsigned long long>(total));
    }
  }
}

}  // namespace

cudaError_t LaunchComputedPairs(const SparseIndexView& idx, const int32_t* cu_q,
                                const int32_t* cu_k, int batch, bool causal,
                                unsigned long long* per_slot, cudaStream_t stream) {
  if (idx.num_heads <= 0) return cudaSuccess;
  cudaError_t err =
      cudaMemsetAsync(per_slot, 0, idx.num_heads * sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  const int64_t rows = static_cast<int64_t>(idx.num_heads) * idx.num_blocks;
  if (rows == 0) return cudaSuccess;
  const int grid =
      static_cast<int>(std::min<int64_t>((rows + kStatsWarps - 1) / kStatsWarps, 16384));
  ComputedPairsKernel<<<grid, kStatsThreads, 0, stream>>>(idx, cu_q, cu_k, batch, causal, per_slot);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
