// The attention-mass recall of a device-resident SparseIndex on probe query rows, computed where
// Q, K and the index are (issue 11): the worker's recall guard and `estimate_recall` copy only
// per-(row, key chunk) sums to the host, never Q, K or the index.
//
// For a probe row (query position p, key limit L = p + 1 when causal) of head slot s, the recall
// is sum over the keys the index selects for the row's query block, clipped to [0, L), of
// softmax(q.k * scale) — the same quantity as AttentionMassRecall in kernels/fidelity.h, in fp32
// (exp2 domain) instead of double.
#ifndef SPATTN_KERNELS_CUDA_RECALL_MASS_RECALL_H_
#define SPATTN_KERNELS_CUDA_RECALL_MASS_RECALL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {

// Slots per work item: the q heads of one kv head share its key loads.
constexpr int kRecallSlotsPerItem = 4;
// Keys per CTA (scores of one chunk stay in shared memory).
constexpr int kRecallChunkKeys = 2048;

// One probe row and up to kRecallSlotsPerItem head slots sharing one kv head.
struct RecallItem {
  int32_t q_token = 0;  // global query token (row of Q)
  int32_t k_base = 0;   // global token of the sequence's key 0
  int32_t limit = 0;    // keys [0, limit) of the sequence are allowed
  int32_t kv_head = 0;
  int32_t num_slots = 0;
  int32_t head[kRecallSlotsPerItem] = {0, 0, 0, 0};       // q head of each slot
  int32_t index_row[kRecallSlotsPerItem] = {0, 0, 0, 0};  // slot * num_blocks + block
  int32_t out[kRecallSlotsPerItem] = {0, 0, 0, 0};        // output row of the partials
};

// Q/K in device memory, element strides.
struct RecallTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  int64_t k_token_stride = 0, k_head_stride = 0;
  int head_dim = 0;        // 64 or 128
  float scale_log2 = 0.f;  // softmax_scale * log2(e)
  DType dtype = DType::kBF16;
};

// partials[(out * chunks + c) * 3 + {0, 1, 2}] = for key chunk c of the output row: the max score
// (exp2 domain; -inf when the chunk holds no allowed key), the sum of exp2(score - max) over the
// allowed keys and that sum over the keys the index selects. `items` are device memory;
// chunks = ceil(max limit / kRecallChunkKeys). Grid: num_items x chunks.
cudaError_t LaunchMassRecall(const RecallTensors& t, const SparseIndexView& idx,
                             const RecallItem* items, int num_items, int chunks, float* partials,
                             cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_RECALL_MASS_RECALL_H_
