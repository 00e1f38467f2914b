// Comparison knobs of the GPU Saap builder (saap.cu, saap_host.cc), read from the environment once
// per process (at first use): SPATTN_SAAP_CLS_WGMMA (=0: the query classifier's products by
// mma.sync, main's before session 29, instead of wgmma on a compute capability 9.0 device; the
// same logits, classes and index, build_index_gpu_test's
// BuildIndexOnGpuSaapTest.WgmmaClassifierIsTheMmaSyncClassifier). Tests change them through the
// returned reference, between builds only.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_

#include <cstdint>
#include <vector>

namespace spattn {
namespace cuda {

struct SaapKnobsT {
  bool cls_wgmma = true;
  // Tests: when set, each build copies the visited buckets of every (kv group, block) (top_l each,
  // the classifier's classes) here (a synchronizing download; not for timing).
  std::vector<int32_t>* capture_selected = nullptr;
};
SaapKnobsT& SaapKnobs();
// The classifier kernel runs its products by wgmma: SaapKnobs().cls_wgmma on a compute capability
// 9.0 device (whose sm_90a image has it) where its shared memory (smem_bytes: 1 KB more than the
// mma.sync kernel's, for the slab buffers' alignment) fits; elsewhere by mma.sync.
bool SaapClassifierUsesWgmma(int smem_bytes);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_SAAP_KNOBS_H_
