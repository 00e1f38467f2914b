// Turns runtime (head_dim, block_m, variant) into kernel shapes for one element type; included
// once per dtype (attention_bf16.cu, attention_fp16.cu) so the two compile in parallel.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_INSTANCES_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_INSTANCES_CUH_

#include "kernels/cuda/attention/attention_core.cuh"

namespace spattn {
namespace cuda {
namespace detail {

// Key tile width of every shape.
constexpr int kTileN = 64;

template <typename T, int kD>
using Block128W8 = Traits<T, kD, 128, kTileN, 8, 2>;
template <typename T, int kD>
using Block128W4 = Traits<T, kD, 128, kTileN, 4, 2>;
template <typename T, int kD>
using Block64W4 = Traits<T, kD, 64, kTileN, 4, 2>;
// Hopper wgmma shapes: two warpgroups (block_m 128) or one (block_m 64); the dense kernel takes
// 128-key tiles, the sparse one 64 (less waste on short ranges and column groups).
template <typename T, int kD>
using DenseWgmma = Traits<T, kD, 128, 128, 8, 2, true>;
template <typename T, int kD>
using Block128Wgmma = Traits<T, kD, 128, kTileN, 8, 2, true>;
template <typename T, int kD>
using Block64Wgmma = Traits<T, kD, 64, kTileN, 4, 2, true>;
// Deeper pipelines for the wgmma shapes (one CTA per SM is resident anyway, by registers): more
// tiles in flight hide the latency of gathered loads. Shared memory: 227 KB (dense), 161 KB.
template <typename T, int kD>
using DenseWgmmaDeep = Traits<T, kD, 128, 128, 8, 3, true>;
template <typename T, int kD>
using Block128WgmmaDeep = Traits<T, kD, 128, kTileN, 8, 4, true>;

// Raises the kernel's dynamic shared-memory limit once (cheap after the first call).
template <typename Kernel>
cudaError_t AllowSmem(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <class Tr>
cudaError_t LaunchDenseShape(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  const int blocks = (max_q_len + Tr::kBM - 1) / Tr::kBM;
  if (blocks == 0 || p.batch == 0) return cudaSuccess;
  auto kernel = DenseKernel<Tr>;
  cudaError_t err = AllowSmem(kernel, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.num_q_heads, blocks, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, blocks);
  return cudaGetLastError();
}

template <class Tr>
cudaError_t LaunchSparseShape(const AttnParams& p, const SparseIndexView& idx,
                              const SparseSchedule& sched, cudaStream_t stream) {
  if (sched.num_items == 0) return cudaSuccess;
  auto kernel = SparseKernel<Tr>;
  cudaError_t err = AllowSmem(kernel, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  int device = 0, sms = 0, per_sm = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) {
    return err;
  }
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads,
                                                           Tr::kSmemBytes)) != cudaSuccess) {
    return err;
  }
  const int grid = std::max(1, std::min(sched.num_items, sms * std::max(1, per_sm)));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, idx, sched, p.batch);
  return cudaGetLastError();
}

template <typename T, int kD>
cudaError_t DenseForDim(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream) {
  if (v == KernelVariant::kWgmma) return LaunchDenseShape<DenseWgmma<T, kD>>(p, max_q_len, stream);
  if (v == KernelVariant::kWgmmaDeep) {
    return LaunchDenseShape<DenseWgmmaDeep<T, kD>>(p, max_q_len, stream);
  }
  if (v == KernelVariant::kWarps8) return LaunchDenseShape<Block128W8<T, kD>>(p, max_q_len, stream);
  return LaunchDenseShape<Block128W4<T, kD>>(p, max_q_len, stream);
}

template <typename T, int kD>
cudaError_t SparseForDim(const AttnParams& p, const SparseIndexView& idx,
                         const SparseSchedule& sched, KernelVariant v, cudaStream_t stream) {
  if (v == KernelVariant::kWgmma || v == KernelVariant::kWgmmaDeep) {
    if (idx.block_m == 64) return LaunchSparseShape<Block64Wgmma<T, kD>>(p, idx, sched, stream);
    if (v == KernelVariant::kWgmmaDeep) {
      return LaunchSparseShape<Block128WgmmaDeep<T, kD>>(p, idx, sched, stream);
    }
    return LaunchSparseShape<Block128Wgmma<T, kD>>(p, idx, sched, stream);
  }
  if (idx.block_m == 64) return LaunchSparseShape<Block64W4<T, kD>>(p, idx, sched, stream);
  if (v == KernelVariant::kWarps8) {
    return LaunchSparseShape<Block128W8<T, kD>>(p, idx, sched, stream);
  }
  return LaunchSparseShape<Block128W4<T, kD>>(p, idx, sched, stream);
}

// Entry points per element type (defined in attention_bf16.cu / attention_fp16.cu).
template <typename T>
cudaError_t DenseTyped(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream) {
  if (p.head_dim == 64) return DenseForDim<T, 64>(p, max_q_len, v, stream);
  if (p.head_dim == 128) return DenseForDim<T, 128>(p, max_q_len, v, stream);
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t SparseTyped(const AttnParams& p, const SparseIndexView& idx,
                        const SparseSchedule& sched, KernelVariant v, cudaStream_t stream) {
  if (idx.block_m != 64 && idx.block_m != 128) return cudaErrorInvalidValue;
  if (p.head_dim == 64) return SparseForDim<T, 64>(p, idx, sched, v, stream);
  if (p.head_dim == 128) return SparseForDim<T, 128>(p, idx, sched, v, stream);
  return cudaErrorInvalidValue;
}

}  // namespace detail
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_INSTANCES_CUH_
