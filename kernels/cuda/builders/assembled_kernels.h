// Internal launch API of the GPU index builders of SampleAttention, AnchorAttention and Saap
// (the twins of kernels/builders/{sample_attention,anchor,saap}.cc): plain structs of device
// pointers and sizes, launchers returning cudaError_t. The host side is
// builders/<method>_host.cc (count-then-fill sizing: builder_steps.h's Assemble); only code under
// kernels/cuda includes this.
//
// Every builder ends in the bitmap row assembler (common/row_assembly.cuh): per index row, a bitmap
// of the row's keys [0, key_end) in shared memory (in segments of kAsmSegWords words), "range" bits
// and "column" bits, turned into the SparseIndex row exactly as RowKeys::Normalize would (ranges
// merged when they overlap or touch, columns inside ranges dropped, runs of >= 16 consecutive
// columns turned into ranges). A count pass writes the entries per row, a scan gives the CSR
// offsets, a fill pass writes the entries: the index is sized by its real counts.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_KERNELS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/common/row_assembly.h"
#include "kernels/cuda/common/scan.h"

namespace spattn {
namespace cuda {

// Geometry of one query block (GetBlockGeometry), computed on the host and uploaded.
struct BlockGeoDev {
  int seq;
  int q_begin, q_end;       // rows within the sequence
  int first_pos, last_pos;  // key positions of the first and last row
  int key_end;              // [0, key_end) allowed for some row of the block
};

// Where the row assembler writes (common/row_assembly.h).
using row_assembly::AsmOut;

// ---- Shared steps ------------------------------------------------------------------------------

// Scans and narrowing: common/scan.h.

// ---- SampleAttention ---------------------------------------------------------------------------

// One sampled chunk of one (head slot, sequence), in (slot, sequence, chunk) order.
struct SaUnit {
  int slot, seq;
  int row_begin, row_end;      // the chunk's query rows
  int s0, s1;                  // sampled rows [s0, s1), s1 - s0 <= 128
  int n_keys;                  // keys the sampled rows can see: [0, n_keys)
  int n_col, n_slash;          // column / slash blocks of the sequence
  int sb_min;                  // slash block of score entry 0
  int64_t score_off;           // col scores at score_off, slash scores at score_off + n_col
  int item_begin, item_count;  // its key spans in the item list
};
// A key span [key_begin, key_end) of one unit (multiple of kSaSpan keys but the last).
struct SaItem {
  int unit, key_begin, key_end;
};
constexpr int kSaSpan = 4096;
constexpr int kSaItemScores = kSaSpan / 16 + 16;  // column (or slash) blocks one span touches

struct SaArgs {
  AttnParams p;
  const int32_t* heads = nullptr;  // [slots] q head of each slot
  const SaUnit* units = nullptr;   // [num_units]
  int num_units = 0;
  const SaItem* items = nullptr;  // [num_items]
  int num_items = 0;
  int block_size = 0;             // 16, 32, 64 or 128
  float2* partial = nullptr;      // [num_items * 128] (max, sum) in the log2 domain
  float* lse2 = nullptr;          // [num_units * 128] row log2-sum-exp2 (NaN: the row has no vote)
  float* item_scores = nullptr;   // [num_items * 2 * kSaItemScores] per-span block sums
  float* scores = nullptr;        // [total] column then slash block scores per unit
  int32_t* selected = nullptr;    // [total] selected blocks per unit (same layout as scores)
  int32_t* selected_n = nullptr;  // [num_units * 2] selected column / slash blocks
  float alpha_c = 0, alpha_s = 0;
  // One pass (block_size >= 64; null: two passes): per item [op_entries][128] (max, sum) partials
  // of the row's column blocks (entries [0, op_ncol)) and slash blocks (op_ncol + slash block -
  // the span's first); op_ctas_y CTAs per unit for the scores (ceil(max entries / 64)).
  float2* op_partial = nullptr;
  int op_entries = 0, op_ncol = 0, op_ctas_y = 0;
  cudaEvent_t pass1_done = nullptr;  // optional: recorded after pass 1 (+ combine)
  cudaEvent_t pass2_done = nullptr;  // optional: recorded after pass 2 (+ reduce)
  // The row lse made by the one pass's combine (no SaCombineKernel launch); false: main's
  // launches (SPATTN_SA_LEAN=0, read once by the host: sample_attention_host.cc).
  bool lean = true;
};
// Sampled-row statistics, block-reduced scores (per span, then summed in span order: the same
// scores on every run), CRA selection.
cudaError_t LaunchSampleAttentionSelect(const SaArgs& a, cudaStream_t stream);

struct SaAsmArgs {
  const BlockGeoDev* geo = nullptr;  // [num_blocks]
  int num_blocks = 0;
  int num_slots = 0;
  int batch = 0;
  const SaUnit* units = nullptr;
  const int32_t* unit_first = nullptr;  // [num_slots * batch + 1] first unit of (slot, seq)
  const int32_t* selected = nullptr;
  const int32_t* selected_n = nullptr;
  int block_size = 0;
  int local_tokens = 0;
};
cudaError_t LaunchSampleAttentionAssemble(const SaAsmArgs& a, const AsmOut& out, bool fill,
                                          cudaStream_t stream);

// Both count arrays of `out` (n rows) scanned by one CTA in one launch: exclusive prefix sums in
// place (the fill pass's offsets), the same as int32 into range_indptr / col_indptr, entry n the
// total, and the two totals into totals[0, 2) (sample_attention's and anchor's lean assembly).
cudaError_t LaunchScanBothOffsets(const AsmOut& out, int64_t n, int32_t* range_indptr,
                                  int32_t* col_indptr, int64_t* totals, cudaStream_t stream);

// ---- AnchorAttention ---------------------------------------------------------------------------

// One group of `step` query blocks of one (slot, sequence): its stripe candidates and bitmap.
struct AnGroup {
  int slot, seq;
  int first_block, num_blocks;  // global query blocks [first_block, first_block + num_blocks)
  int gfp, glp;                 // positions of the group's first and last query
  int init_end;                 // min(init_tokens, k_len)
  int a1, b1, a2, b2;           // stripe candidates [a1, b1) and [a2, b2) (empty when a >= b)
  int r1, r2_end;               // anchor keys [0, r1) and [gfp, r2_end) (non-causal end)
  int k_len;
  int64_t bitmap_off;  // word offset of its kept-key bitmap over [0, k_len)
};
// Up to 8 m-tiles of 16 pooled query rows (same kv head and sequence) against keys
// [key_begin, key_end) of the stripe scan.
struct AnItem {
  int tile_begin, tile_count;
  int key_begin, key_end;
};
struct AnTile {
  int group;      // index into groups
  int row_begin;  // first block of the group covered (offset within the group)
  int rows;       // <= 16
};

struct AnArgs {
  AttnParams p;
  const int32_t* heads = nullptr;
  const BlockGeoDev* geo = nullptr;
  int num_blocks = 0;
  int num_slots = 0;
  // Groups in (slot, sequence, group) order; every slot has groups_per_slot of them, and block
  // b of slot s belongs to group s * groups_per_slot + group_of_block[b].
  const AnGroup* groups = nullptr;
  const int32_t* group_of_block = nullptr;  // [num_blocks]
  int groups_per_slot = 0;
  float softmax_scale = 0;
  float* xa = nullptr;    // [num_slots * num_blocks] pooled anchor
  float* qbar = nullptr;  // [num_slots * num_blocks * head_dim] pooled scaled queries
  const AnTile* tiles = nullptr;
  const AnItem* items = nullptr;
  int num_items = 0;
  uint32_t* bitmaps = nullptr;  // kept keys per group (zeroed)
  float theta = 0;
  cudaEvent_t anchor_done = nullptr;  // optional: recorded after the anchor pass
  // s40-anchor (AnKnobs::lean): > 0: the anchor pass zeroes bitmaps[0, clear_words) itself (16-byte
  // aligned) and the host issues no memset; 0: they come zeroed (main's memset).
  int64_t clear_words = 0;
};
// Anchor pass (pooled anchors and queries) and stripe scan (kept-key bitmaps).
cudaError_t LaunchAnchorSelect(const AnArgs& a, cudaStream_t stream);

struct AnAsmArgs {
  const BlockGeoDev* geo = nullptr;
  int num_blocks = 0;
  int num_slots = 0;
  const AnGroup* groups = nullptr;
  const int32_t* group_of_block = nullptr;
  int groups_per_slot = 0;
  const uint32_t* bitmaps = nullptr;
};
cudaError_t LaunchAnchorAssemble(const AnAsmArgs& a, const AsmOut& out, bool fill,
                                 cudaStream_t stream);

// ---- Saap --------------------------------------------------------------------------------------

constexpr int kSaapMaxCentroids = 4096;
constexpr int kSaapMaxHidden = 1024;
constexpr int kSaapMaxGroupSlots = 64;  // head slots of one kv group in one index

// Device copy of LayerAssets (uploaded once per layer).
struct SaapAssetsDev {
  int head_dim = 0;
  int num_centroids = 0;  // C
  int c_pad = 0;          // C rounded up to 256
  int hidden_pad = 0;     // hidden width rounded up to 256 (2 layers), 0 for 1 layer
  int num_layers = 0;     // 1 or 2
  bool relu0 = false, relu1 = false;
  bool interleaved = false;
  const double* inv_freq = nullptr;  // [head_dim / 2]
  const double* step_cs = nullptr;   // [64][head_dim / 2][2] cos / sin of k * inv_freq
  // Per kv head: [c_pad][head_dim] bf16 hi and lo parts of the unit centroids (null if absent).
  const void* const* centroid_hi = nullptr;
  const void* const* centroid_lo = nullptr;
  // Per q head (null if absent). 2 layers: w0t [hidden_pad][head_dim], b0 [hidden_pad],
  // w1t [c_pad][hidden_pad], b1 [c_pad]; 1 layer: w1t [c_pad][head_dim], b1 [c_pad].
  const void* const* w0t = nullptr;
  const float* const* b0 = nullptr;
  const void* const* w1t = nullptr;
  const float* const* b1 = nullptr;
  // w0t / w1t pre-swizzled for the classifier's TMA kernels (SaapKnobs().cls_tma, saap_knobs.h).
  bool w_swizzled = false;
};

// Keys of the used kv heads: 64-key tiles, de-roped and assigned to the nearest centroid.
struct SaapKeyTile {
  int kv_index;  // into kv_heads
  int seq;
  int first;  // first key (multiple of 64)
};

struct SaapArgs {
  AttnParams p;
  SaapAssetsDev assets;
  const int32_t* kv_heads = nullptr;  // [num_kv] used kv heads
  int num_kv = 0;
  const SaapKeyTile* key_tiles = nullptr;
  int num_key_tiles = 0;
  const int64_t* unit_key_off = nullptr;  // [num_kv * batch + 1] key offset of (kv, seq)
  int32_t* bucket_of = nullptr;           // [total keys over units]
  int32_t* bucket_off = nullptr;          // [num_kv * batch * C + 1] CSR offsets (zeroed)
  int32_t* bucket_cursor = nullptr;       // [num_kv * batch * C]
  int32_t* bucket_idx = nullptr;          // [total keys] members, grouped by bucket
  // Queries.
  const BlockGeoDev* geo = nullptr;
  int num_blocks = 0;
  int block_m = 0;
  const int32_t* group_head_off = nullptr;  // [num_kv + 1] into group_heads
  const int32_t* group_heads = nullptr;     // requested unique q heads per used kv head
  float* logits_scratch = nullptr;          // [grid][64][c_pad]
  // Sampled rows (SaapParams::classify_rows below block_m): rows classified per block, 0 = every
  // row; blocks per classifier item (64 / rows_per_block, 1 above 64 rows); per-block scores
  // [grid][blocks][c_pad]; the per-block top-l by one warp each (else the CTA, block after block;
  // <= 1024 buckets).
  int rows_per_block = 0;
  int blocks_per_item = 1;
  float* score_scratch = nullptr;
  bool warp_top_l = true;
  int classify_grid = 0;
  int top_l = 0;
  int32_t* selected = nullptr;      // [num_kv * num_blocks * top_l]
  cudaEvent_t keys_done = nullptr;  // optional: recorded after the bucket lists
};
// Shared memory the classifier kernel needs (0 when the shape is not supported).
int SaapClassifySmemBytes(int head_dim, int num_layers, int hidden_pad, int c_pad);
// Key assignment and bucket lists, query classification and top-l buckets.
cudaError_t LaunchSaapSelect(const SaapArgs& a, cudaStream_t stream);

struct SaapAsmArgs {
  const BlockGeoDev* geo = nullptr;
  int num_blocks = 0;
  int num_kv = 0;
  int batch = 0;
  int num_centroids = 0;
  int top_l = 0;
  const int32_t* selected = nullptr;
  const int32_t* bucket_off = nullptr;
  const int32_t* bucket_idx = nullptr;
  const int32_t* group_slot_off = nullptr;  // [num_kv + 1] into group_slots
  const int32_t* group_slots = nullptr;     // head slots per used kv head
  int sink_tokens = 0;
  int local_tokens = 0;
};
cudaError_t LaunchSaapAssemble(const SaapAsmArgs& a, const AsmOut& out, bool fill,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_KERNELS_H_
