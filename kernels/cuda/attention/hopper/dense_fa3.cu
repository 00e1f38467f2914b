// Host side of the Hopper dense kernel: TMA descriptors (cuTensorMapEncodeTiled through the
// runtime's driver entry point, so no -lcuda) and the launch.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/attention/hopper/dense_fa3.cuh"
#include "kernels/cuda/attention/hopper/hopper_launch.h"
#include "kernels/cuda/attention/hopper/persistent_fa3.cuh"

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

bool EncodeAll(const AttnParams& p, int box_q, int box_k, CUtensorMap* tq, CUtensorMap* tk,
               CUtensorMap* tv) {
  const int kv_heads = p.num_q_heads / p.group;
  return EncodeTokens(tq, p.dtype, p.q, p.total_q, p.num_q_heads, p.head_dim, p.q_token_stride,
                      p.q_head_stride, box_q) &&
         EncodeTokens(tk, p.dtype, p.k, p.total_k, kv_heads, p.head_dim, p.k_token_stride,
                      p.k_head_stride, box_k) &&
         EncodeTokens(tv, p.dtype, p.v, p.total_k, kv_heads, p.head_dim, p.v_token_stride,
                      p.v_head_stride, box_k);
}

// Benchmark knobs (kernels/cuda/README.md): an integer environment variable, `def` when unset.
int Knob(const char* name, int def) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? def : std::atoi(v);
}

// Heads per L2 section of the dense grid (DenseFa3Kernel's SectionTile): as many GQA groups as
// have their K and V (mean sequence length) within `SPATTN_HOPPER_L2_MB` (default 32 MB, as
// FlashAttention-3; the H100/H200 L2 is 50 MB), rounded down to a power of two, at least one group.
// 0 gives the plain order (heads fastest).
int SectionHeads(const AttnParams& p) {
  const int total_hb = p.num_q_heads * std::max(p.batch, 1);
  const int mb = Knob("SPATTN_HOPPER_L2_MB", 32);
  if (mb <= 0) return p.num_q_heads;
  const double kv_bytes =
      static_cast<double>(p.total_k) / std::max(p.batch, 1) * p.head_dim * 2.0 * 2.0;
  const double fit = mb * 1048576.0 / std::max(kv_bytes, 1.0);
  int64_t groups = 1;
  while (static_cast<double>(groups * 2) <= fit && groups * 2 * p.group <= total_hb) groups *= 2;
  return static_cast<int>(std::min<int64_t>(groups * p.group, total_hb));
}

template <class Tr>
cudaError_t LaunchShape(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  const int blocks = (max_q_len + Tr::kBM - 1) / Tr::kBM;
  if (blocks == 0 || p.batch == 0) return cudaSuccess;
  CUtensorMap tq, tk, tv;
  if (!EncodeAll(p, Tr::kBM, Tr::kBN, &tq, &tk, &tv)) return cudaErrorInvalidValue;
  auto kernel = DenseFa3Kernel<Tr>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int64_t ctas = static_cast<int64_t>(p.num_q_heads) * blocks * p.batch;
  kernel<<<static_cast<unsigned>(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(
      p, tq, tk, tv, blocks, SectionHeads(p));
  return cudaGetLastError();
}

int NumSms() {
  static int sms = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return n;
  }();
  return sms;
}

template <class Tr, bool kSparse>
cudaError_t LaunchPersistent(const AttnParams& p, const SparseIndexView& idx,
                             const SparseSchedule& sched, int num_items, int num_m_blocks,
                             cudaStream_t stream) {
  if (num_items <= 0 || p.batch == 0) return cudaSuccess;
  CUtensorMap tq, tk, tv;
  if (!EncodeAll(p, Tr::kBM, Tr::kBN, &tq, &tk, &tv)) return cudaErrorInvalidValue;
  auto kernel = PersistentFa3Kernel<Tr, kSparse>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int grid = std::min(num_items, NumSms() * Tr::kMinBlocks);
  const int flags = 0;
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, idx, sched, num_items, num_m_blocks,
                                                         flags, tq, tk, tv);
  return cudaGetLastError();
}

template <typename T, int kD, bool kSparse>
cudaError_t PersistentDim(const AttnParams& p, const SparseIndexView& idx,
                          const SparseSchedule& sched, int num_items, int num_m_blocks,
                          cudaStream_t stream) {
  if constexpr (kSparse) {
    // block_m 64: one consumer warpgroup per CTA, two CTAs per SM, 64-key tiles (2 ring slots
    // at d = 128, 4 at d = 64).
    // SPATTN_HOPPER_ITEMS (d = 128; PersistTraits::kItems, default 2): 1 = item and tile
    // descriptors without the cross-item stream, 0 = neither (the session-16 kernel), for A/B.
    const int items = kD == 128 ? Knob("SPATTN_HOPPER_ITEMS", 2) : 2;
    if (idx.block_m == 64) {
      if (items == 0) {
        return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64, 0>, true>(
            p, idx, sched, num_items, num_m_blocks, stream);
      }
      if (items == 1) {
        return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64, 1>, true>(
            p, idx, sched, num_items, num_m_blocks, stream);
      }
      return LaunchPersistent<PersistTraits<T, kD, kD == 128 ? 2 : 4, 2, 4, 64>, true>(
          p, idx, sched, num_items, num_m_blocks, stream);
    }
    if (kD == 128 && items == 0) {
      return LaunchPersistent<PersistTraits<T, kD, 2, 2, 4, 128, 0>, true>(p, idx, sched, num_items,
                                                                           num_m_blocks, stream);
    }
    if (kD == 128 && items == 1) {
      return LaunchPersistent<PersistTraits<T, kD, 2, 2, 4, 128, 1>, true>(p, idx, sched, num_items,
                                                                           num_m_blocks, stream);
    }
  }
  if constexpr (kSparse && kD == 128) {
    // d = 128: 3 ring slots with one Q buffer, or 2 slots with two (SPATTN_HOPPER_SPARSE_STAGES).
    if (Knob("SPATTN_HOPPER_SPARSE_STAGES", 2) == 3) {
      return LaunchPersistent<PersistTraits<T, 128, 3, 1>, true>(p, idx, sched, num_items,
                                                                 num_m_blocks, stream);
    }
    // Lanes per gathered key row (PersistTraits::kLanes, default 4; SPATTN_HOPPER_COLUMN_LANES
    // = 1, 2, 16 for the A/B of NOTES.md, session 16).
    switch (Knob("SPATTN_HOPPER_COLUMN_LANES", 4)) {
      case 1:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 1>, true>(p, idx, sched, num_items,
                                                                      num_m_blocks, stream);
      case 2:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 2>, true>(p, idx, sched, num_items,
                                                                      num_m_blocks, stream);
      case 16:
        return LaunchPersistent<PersistTraits<T, 128, 2, 2, 16>, true>(p, idx, sched, num_items,
                                                                       num_m_blocks, stream);
      default:
        break;
    }
  }
  using Tr = PersistTraits<T, kD, kD == 128 ? 2 : 4>;
  return LaunchPersistent<Tr, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
}

template <bool kSparse>
cudaError_t PersistentTyped(const AttnParams& p, const SparseIndexView& idx,
                            const SparseSchedule& sched, int num_items, int num_m_blocks,
                            cudaStream_t stream) {
  if (p.dtype == DType::kBF16) {
    if (p.head_dim == 128) {
      return PersistentDim<__nv_bfloat16, 128, kSparse>(p, idx, sched, num_items, num_m_blocks,
                                                        stream);
    }
    return PersistentDim<__nv_bfloat16, 64, kSparse>(p, idx, sched, num_items, num_m_blocks,
                                                     stream);
  }
  if (p.head_dim == 128) {
    return PersistentDim<__half, 128, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
  }
  return PersistentDim<__half, 64, kSparse>(p, idx, sched, num_items, num_m_blocks, stream);
}

template <typename T>
cudaError_t LaunchTyped(const AttnParams& p, int max_q_len, cudaStream_t stream) {
  if (p.head_dim == 128) {
    // Non-causal: 176-key tiles unless SPATTN_HOPPER_FULL_BN=128.
    if (!p.causal && Knob("SPATTN_HOPPER_FULL_BN", 176) == 176) {
      return LaunchShape<Fa3Traits<T, 128, 2, 2, 176>>(p, max_q_len, stream);
    }
    // 128-key tiles: a 2-slot K/V ring unless SPATTN_HOPPER_D128_STAGES=3.
    if (Knob("SPATTN_HOPPER_D128_STAGES", 2) == 3) {
      return LaunchShape<Fa3Traits<T, 128, 3>>(p, max_q_len, stream);
    }
    return LaunchShape<Fa3Traits<T, 128, 2>>(p, max_q_len, stream);
  }
  // d = 64: 3 consumer warpgroups (192-row blocks) unless SPATTN_HOPPER_D64_WGS=2.
  if (Knob("SPATTN_HOPPER_D64_WGS", 3) == 2) {
    return LaunchShape<Fa3Traits<T, 64, 4, 2>>(p, max_q_len, stream);
  }
  return LaunchShape<Fa3Traits<T, 64, 4, 3>>(p, max_q_len, stream);
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

cudaError_t LaunchDense(const AttnParams& p, int max_q_len, bool persistent, cudaStream_t stream) {
  if (persistent) {
    const int blocks = (max_q_len + 127) / 128;
    return PersistentTyped<false>(p, SparseIndexView(), SparseSchedule(),
                                  blocks * p.num_q_heads * p.batch, blocks, stream);
  }
  if (p.dtype == DType::kBF16) return LaunchTyped<__nv_bfloat16>(p, max_q_len, stream);
  return LaunchTyped<__half>(p, max_q_len, stream);
}

bool SparseSupported(const AttnParams& p, const SparseIndexView& index) {
  // block_m 64 on this path unless SPATTN_HOPPER_BM64=0 (then the deep wgmma kernel, variant 4).
  const bool bm_ok = index.block_m == 128 || (index.block_m == 64 && Knob("SPATTN_HOPPER_BM64", 1));
  return bm_ok && DenseSupported(p);
}

cudaError_t LaunchSparse(const AttnParams& p, const SparseIndexView& index,
                         const SparseSchedule& schedule, cudaStream_t stream) {
  return PersistentTyped<true>(p, index, schedule, schedule.num_items, 0, stream);
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn
