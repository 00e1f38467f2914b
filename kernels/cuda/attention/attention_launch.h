// Internal launch API of the CUDA attention kernels: plain params structs of device pointers,
// strides and sizes, and launchers returning cudaError_t. The public, CUDA-free API is
// attention_cuda.h; only code under kernels/cuda includes this header.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_LAUNCH_H_
#define SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {

// One attention launch. Every pointer is device memory.
struct AttnParams {
  const void* q = nullptr;     // [total_q, num_q_heads, head_dim], strides below (elements)
  const void* k = nullptr;     // [total_k, num_kv_heads, head_dim]
  const void* v = nullptr;     // [total_k, num_kv_heads, head_dim]
  void* o = nullptr;           // [total_q, num_q_heads, head_dim]
  float* maybe_lse = nullptr;  // [num_q_heads, total_q], natural log
  int64_t q_token_stride = 0, q_head_stride = 0;
  int64_t k_token_stride = 0, k_head_stride = 0;
  int64_t v_token_stride = 0, v_head_stride = 0;
  int64_t o_token_stride = 0, o_head_stride = 0;
  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1]
  const int32_t* cu_seqlens_k = nullptr;  // [batch + 1]
  int batch = 0;
  int num_q_heads = 0;
  int group = 1;  // num_q_heads / num_kv_heads
  int total_q = 0;
  int total_k = 0;  // cu_seqlens_k[batch] (sizes the TMA descriptors of variant 5)
  int head_dim = 0;
  float scale_log2 = 0.f;  // softmax_scale * log2(e)
  bool causal = true;
  DType dtype = DType::kBF16;
  // Dense kernel's workspace (DenseWorkspaceBytes bytes, its first zero_bytes zero), or null:
  // the Hopper kernel then runs without its tail split.
  void* maybe_dense_workspace = nullptr;
};

// Kernel shapes. kAuto picks the measured default for the head dim and block size.
enum class KernelVariant {
  kAuto = 0,
  kWarps8 = 1,     // block_m 128: 8 warps of 16 query rows
  kWarps4 = 2,     // block_m 128: 4 warps of 32 query rows (half the shared-memory reads per FLOP)
  kWgmma = 3,      // Hopper (sm_90) only: warpgroups of 64 rows with wgmma; elsewhere kWarps4
  kWgmmaDeep = 4,  // kWgmma with 3 (dense) / 4 (sparse, block_m 128) pipeline stages
  kHopper = 5,     // warp-specialized TMA + wgmma (attention/hopper/), block_m 128 and 64
  kHopperPersistent = 6,  // 5 with the dense kernel on the persistent grid too
};

// Dense attention (causal or full) over every head. `max_q_len` is the longest q_len of the
// batch (host value; sizes the grid).
cudaError_t LaunchDenseAttention(const AttnParams& p, int max_q_len, KernelVariant variant,
                                 cudaStream_t stream);

// Bytes of AttnParams::maybe_dense_workspace the dense launch of `p` can use (0: none); the
// first *zero_bytes of it must be zero at the launch (the kernel leaves them zero).
int64_t DenseWorkspaceBytes(const AttnParams& p, int max_q_len, KernelVariant variant,
                            int64_t* zero_bytes);

// Work list of the sparse kernel: rows (head slot * num_blocks + block) in the order they are
// handed out, costliest first, and the counter the persistent CTAs pull from.
struct SparseSchedule {
  const int32_t* order = nullptr;  // [num_items]
  int num_items = 0;
  int* counter = nullptr;  // one int, zeroed by LaunchSparseSchedule
  // Optional [num_items][8] (16-byte aligned): list position w's row as the Hopper kernel's
  // producer needs it, so its item lookup is one dependent read (two 16-byte loads) instead of
  // order[w], then the row's offsets and head: {r, range_indptr[r], ranges, col_indptr[r]},
  // {columns, heads[r / num_blocks], r % num_blocks, 1 if the row has keys (a key tile: the
  // producer then issues its Q before walking to that tile)}. Written by LaunchSparseSchedule.
  const int32_t* items = nullptr;
  // Optional {sum of the rows' costs (64-key tiles, the schedule's cost model), rows with keys}
  // (two words, in the schedule's scratch: SparseScheduleStats): the Hopper kernel's per-launch
  // K/V ring choice (dense_fa3.cu, SPATTN_HOPPER_SPARSE_RING). Written by LaunchSparseSchedule.
  const unsigned long long* stats = nullptr;
};

// Scratch for LaunchSparseSchedule: SparseScheduleScratchInts(num_rows, p) int32s (a cost
// histogram per L2 section, so it grows with the sections `p` needs).
int64_t SparseScheduleScratchInts(int64_t num_rows, const AttnParams& p);
// Orders the rows of `index` into `order` ([num_rows]) with a counting sort on the device, and
// zeroes `counter`: L2 sections first (SparseKvHeadsPerSection kv heads of `p` each, the rows of
// a section one after the other so the CTAs in flight share those heads' K/V in L2), then
// decreasing cost (key tiles of `tile_n` keys).
// `items` (optional, 8 * num_rows int32s, 16-byte aligned): SparseSchedule::items as well.
cudaError_t LaunchSparseSchedule(const SparseIndexView& index, const AttnParams& p, int tile_n,
                                 int32_t* scratch, int32_t* order, int* counter,
                                 cudaStream_t stream, int32_t* items = nullptr);
// SparseSchedule::stats within the scratch of LaunchSparseSchedule (`scratch`: the same pointer and
// `p`); zeroed and summed by it.
const unsigned long long* SparseScheduleStats(const int32_t* scratch, const AttnParams& p);
// Whether the engine writes SparseSchedule::items (SPATTN_HOPPER_ITEM_RECORDS, default 1; read
// at each call).
bool SparseItemRecords();
// KV heads per L2 section of the sparse schedule: as many as have K and V within
// SPATTN_HOPPER_L2_MB (default 32; 0: one section), a power of two, at most 16 sections.
int SparseKvHeadsPerSection(const AttnParams& p);

// The sparse kernel over a device SparseIndexView (block_m 64 or 128): a persistent grid pulls
// rows from `schedule`. Rows of heads not in the index are untouched.
cudaError_t LaunchSparseAttention(const AttnParams& p, const SparseIndexView& index,
                                  const SparseSchedule& schedule, KernelVariant variant,
                                  cudaStream_t stream);
// Key tile width the sparse kernel uses for (head_dim, block_m); the schedule's cost unit.
int SparseTileN(int head_dim, int block_m);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_LAUNCH_H_
