// Host side of the Hopper dense kernel: TMA descriptors (cuTensorMapEncodeTiled through the
// runtime's driver entry point, so no -lcuda) and the launch.
#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/cuda/attention/hopper/dense_fa3.cuh"
#include "kernels/cuda/attention/hopper/hopper_launch.h"

namespace spattn {
namespace cuda {
namespace hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// [tokens, heads, head_dim] with element strides; boxes of 64 elements (128 bytes, one swizzle
// row) x 1 head x `box_rows` tokens.
bool EncodeTokens(CUtensorMap* map, DType dtype, const void* base, int64_t tokens, int heads,
                  int head_dim, int64_t token_stride, int64_t head_stride, int box_rows) {
  auto encode = Encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * 2,
                                 static_cast<cuuint64_t>(token_stride) * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, 3, const_cast<void*>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

template <class Tr>
cudaError_t LaunchShape(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  const int blocks = (max_q_len + Tr::kBM - 1) / Tr::kBM;
  if (blocks == 0 || p.batch == 0) return cudaSuccess;
  const int kv_heads = p.num_q_heads / p.group;
  CUtensorMap tq, tk, tv;
  if (!EncodeTokens(&tq, p.dtype, p.q, p.total_q, p.num_q_heads, p.head_dim, p.q_token_stride,
                    p.q_head_stride, Tr::kBM) ||
      !EncodeTokens(&tk, p.dtype, p.k, p.total_k, kv_heads, p.head_dim, p.k_token_stride,
                    p.k_head_stride, Tr::kBN) ||
      !EncodeTokens(&tv, p.dtype, p.v, p.total_k, kv_heads, p.head_dim, p.v_token_stride,
                    p.v_head_stride, Tr::kBN)) {
    return cudaErrorInvalidValue;
  }
  auto kernel = DenseFa3Kernel<Tr>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.num_q_heads, blocks, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, tq, tk, tv, blocks);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTyped(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  if (p.head_dim == 128) return LaunchShape<Fa3Traits<T, 128, 2>>(p, max_q_len, stream);
  return LaunchShape<Fa3Traits<T, 64, 4>>(p, max_q_len, stream);
}

}  // namespace

bool DenseSupported(const AttnParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return false;
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (p.total_k <= 0 || p.total_q <= 0 || p.group <= 0) return false;
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v)) return false;
  for (int64_t stride : {p.q_token_stride, p.q_head_stride, p.k_token_stride, p.k_head_stride,
                         p.v_token_stride, p.v_head_stride}) {
    if (stride <= 0 || stride % 8 != 0) return false;
  }
  return Encoder() != nullptr;
}

cudaError_t LaunchDense(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  if (p.dtype == DType::kBF16) return LaunchTyped<__nv_bfloat16>(p, max_q_len, stream);
  return LaunchTyped<__half>(p, max_q_len, stream);
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn
