// Comparison knobs of the GPU Saap builder (saap.cu, saap_host.cc), read from the environment once
// per process (at first use): SPATTN_SAAP_CLS_WGMMA (=0: the query classifier's products by
// mma.sync, main's before session 29, instead of wgmma on a compute capability 9.0 device; the
// same logits, classes and index, build_index_gpu_test's
// BuildIndexOnGpuSaapTest.WgmmaClassifierIsTheMmaSyncClassifier); SPATTN_SAAP_CLS_PACKED (=1:
// the classifier's weights uploaded slab by slab, session 30, below); SPATTN_SAAP_CLS_ROPE_TABLE
// (=0: the sampled rows' RoPE once per q head, main's before session 36, below);
// SPATTN_SAAP_CLS_ROWS_MASS (0: main's RowsMass loop; 1, 2: rows_per_block templated, below);
// SPATTN_SAAP_KEYS_WGMMA (=0: the keys' products by mma.sync, main's before session 39, below);
// SPATTN_SAAP_CLS_TMA (1, 2: the wgmma classifier's weights pre-swizzled at the upload and
// streamed by bulk copies on mbarriers, two or four stages a warpgroup, below).
// Tests change them through the returned reference, between builds only (cls_packed: before the
// assets' upload, and kept for every build with them).
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_

#include <cstdint>
#include <vector>

namespace spattn {
namespace cuda {

struct SaapKnobsT {
  bool cls_wgmma = true;
  // The classifier's transposed weights in device memory as the kernel streams them: 256-row x
  // 64-k slabs, each 32 KB contiguous ([out / 256][in / 64][256][64] bf16), instead of row-major
  // [out][in] where a slab's 256 rows of 128 bytes lie K x 2 bytes apart (2 KB in layer 2; every
  // CTA reading the same head's slabs at once). Read at the upload (saap_host.cc) and at every
  // launch (saap.cu); the same values, products and index. Off by default until measured.
  bool cls_packed = false;
  // Sampled rows (classify_rows <= 64): each item's rows, validity and RoPE (cos, -sin) computed
  // once per item into a table after the logits scratch and read by every q head of the kv
  // group, instead of once per head (SPATTN_SAAP_CLS_ROPE_TABLE=0: main's path). The same
  // floats, classes and index by construction (RopeTablePerItemBuildsThePerHeadIndex); H200
  // classify -11 % at 32K and 128K (NOTES sessions 35 and 36). Session 35's illegal address was
  // not the table's: the keys kernel read assets whose upload had not landed (CopyFromHost now
  // waits for its DMA).
  // Read at the scratch carve (saap_host.cc) and at the launch.
  bool cls_rope_table = true;
  // Sampled rows with rows_per_block 1, 2, 4, 8 or 16: the per-block masses with rows_per_block a
  // template argument, each bucket's logits of a group of blocks loaded before the first Exp2
  // (SPATTN_SAAP_CLS_ROWS_MASS: 1 = 32 logits a group, 2 = 64, 0 = main's RowsMass loop). The
  // same operations per block, so the same scores and index
  // (RowsMassTemplatedBuildsTheSameIndex). H200, classify_rows 4: classify -18 % at 32K and
  // 128K (NOTES session 38, s38-saap). Read at each launch.
  int cls_rows_mass = 1;
  // The keys kernel's products (hi.hi, hi.lo, lo.hi per k step, the same order) by wgmma on a
  // compute capability 9.0 device instead of mma.sync: the same sums, buckets and index
  // (KeysWgmmaBuildsTheSameIndex). H200: keys 0.564 -> 0.408 ms at 32K, 2.131 -> 1.504 ms at
  // 128K (NOTES session 39, s39-saap). Read at each launch.
  bool keys_wgmma = true;
  // The wgmma classifier's weights uploaded pre-swizzled (the packed slab-by-slab layout above
  // with chunk c of slab row r at c ^ (r & 7): each 128-row half slab is the 16 KB image of the
  // 128-byte swizzle) and streamed per warpgroup by one thread's bulk copies on full mbarriers,
  // the slab loop without CTA barriers (ClsGemmWgTma, saap.cu); the same products in the same
  // order, so the same logits, classes and index (TmaWeightRingBuildsTheSameIndex). 1: two 16 KB
  // stages a warpgroup (its half of a slab each); 2: four 8 KB stages (a slab's 64-row n halves).
  // Non-zero at the upload (SaapClassifierUsesTma: also needs cls_wgmma and sm_90a then) lays the
  // weights out so; the launch follows the assets' layout (such assets with cls_wgmma off fail)
  // and reads 2 / else for the stages. 1 by default since session 41 (H200 classify 0.968 ->
  // 0.736 ms at 32K, 3.755 -> 2.853 at 128K).
  int cls_tma = 1;
  // Diagnostics (SPATTN_SAAP_DEBUG_SYNC=1): LaunchSaapSelect waits after each step (and before
  // the first) and names a failing step on stderr. Not for timing.
  bool debug_sync = false;
  // Tests: when set, each build copies the visited buckets of every (kv group, block) (top_l each,
  // the classifier's classes) here (a synchronizing download; not for timing).
  std::vector<int32_t>* capture_selected = nullptr;
  // Tests: when set, each build copies every key's bucket (the keys kernel's output, [kv head]
  // [sequence][key]) here (a synchronizing download; not for timing).
  std::vector<int32_t>* capture_key_buckets = nullptr;
};
SaapKnobsT& SaapKnobs();
// The classifier kernel runs its products by wgmma: SaapKnobs().cls_wgmma on a compute capability
// 9.0 device (whose sm_90a image has it) where its shared memory (smem_bytes: 1 KB more than the
// mma.sync kernel's, for the slab buffers' alignment) fits; elsewhere by mma.sync.
bool SaapClassifierUsesWgmma(int smem_bytes);
// The keys kernel runs by wgmma: SaapKnobs().keys_wgmma on a compute capability 9.0 device.
bool SaapKeysUseWgmma();
// The upload lays the classifier's weights out for the TMA kernels: SaapKnobs().cls_tma and the
// wgmma classifier (SaapClassifierUsesWgmma) for this classifier shape.
bool SaapClassifierUsesTma(int head_dim, int num_layers, int hidden_pad, int c_pad);
struct SaapArgs;
// The classify launch takes the per-item RoPE table (cls_rope_table and sampled rows <= 64).
bool SaapClassifierRopeTable(const SaapArgs& a);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_
