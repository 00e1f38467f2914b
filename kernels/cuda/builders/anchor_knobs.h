// Comparison knobs of the GPU AnchorAttention builder (anchor.cu, anchor_host.cc), read from the
// environment once per process (at first use): SPATTN_ANCHOR_WGMMA (=0: the anchor pass by
// mma.sync, main's before session 28, instead of wgmma on a compute capability 9.0 device; the
// same x_a and pooled queries bit for bit, build_index_gpu_test's
// BuildIndexOnGpuAnchorTest.WgmmaAnchorPassIsTheMmaSyncPass); SPATTN_ANCHOR_STRIPE_WG (=0: the
// stripe scan by mma.sync, main's before session 33, instead of wgmma on a compute capability 9.0
// device; the same index, BuildIndexOnGpuAnchorTest.WgmmaStripeScanIsMainsScan);
// SPATTN_ANCHOR_LEAN (session 40, default on; =0: main's launch sequence before it): the bitmap
// memset folded into the anchor pass, the kernels' shared memory limits set once per process,
// the host tables uploaded from pinned memory, and the assembly's two scans, two narrowings and
// two totals copies replaced by one scan launch writing the totals into mapped host words; the
// same index, BuildIndexOnGpuAnchorTest.LeanBuildIsMainsBuild; SPATTN_ANCHOR_EARLY (session 41,
// default off; with lean only): the host tables in per-thread vectors reused by the next build
// (no fresh ~128 KB tables a build at 128K), and the anchor pass launched before the stripe
// scan's tables are built, which are then uploaded (a pinned stage of their own) and the stripe
// scan launched; the same index, BuildIndexOnGpuAnchorTest.EarlyPassLaunchBuildsMainsIndex.
// Tests change them through the returned reference, between builds only.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ANCHOR_KNOBS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_ANCHOR_KNOBS_H_

#include <vector>

namespace spattn {
namespace cuda {

struct AnKnobs {
  bool wgmma = true;
  bool stripe_wg = true;  // with wgmma: AnStripeWgKernel instead of AnStripeKernel (mma.sync)
  bool lean = true;       // s40-anchor: the lean launch sequence (anchor_host.cc)
  bool early = true;      // s41-anchor: with lean, the pass launched before the stripe tables
  // Tests: when set, each build copies its pooled anchors x_a ([slot][block]) and pooled scaled
  // queries ([slot][block][head_dim]) here (a synchronizing download; not for timing).
  std::vector<float>* capture_xa = nullptr;
  std::vector<float>* capture_qbar = nullptr;
};
AnKnobs& AnchorKnobs();
// The anchor pass runs the wgmma kernel: AnchorKnobs().wgmma on a compute capability 9.0 device
// (whose sm_90a image has it); elsewhere the mma.sync kernel.
bool AnchorUsesWgmma();

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ANCHOR_KNOBS_H_
