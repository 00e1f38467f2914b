// Host entry points of the Hopper (sm_90a) warp-specialized attention kernels (kernel variant 5).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_HOPPER_LAUNCH_H_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_HOPPER_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "kernels/cuda/attention/attention_launch.h"

namespace spattn {
namespace cuda {
namespace hopper {

// The launch knobs (SPATTN_HOPPER_*, kernels/cuda/README.md) are read from the environment once
// per process, at the first launch; ReloadKnobs() reads them again (tests and cuda_bench's knob
// sets, which change the environment between launches; not while a launch is being prepared).
void ReloadKnobs();

// Whether the TMA dense kernel takes `p`: bf16/fp16, head_dim 64 or 128, total_k set, 16-byte
// aligned base pointers and token/head strides (TMA's rules). The caller checks that the device
// is compute capability 9.0.
bool DenseSupported(const AttnParams& p);

// Dense attention (causal or full, GQA, varlen, q a suffix of k) over every head: one CTA per
// (head, query block), or with `persistent` one per SM walking the blocks longest first.
cudaError_t LaunchDense(const AttnParams& p, int max_q_len, bool persistent, cudaStream_t stream);

// Workspace of LaunchDense's tail split for `p` (AttnParams::maybe_dense_workspace; 0: no
// split) and the bytes of it that must be zero.
int64_t DenseWorkspaceBytes(const AttnParams& p, int max_q_len, bool persistent,
                            int64_t* zero_bytes);

// The sparse kernel through the same mainloop (persistent grid over `schedule`): block_m 128
// (two consumer warpgroups) and 64 (one consumer warpgroup per CTA, two CTAs per SM; off with
// SPATTN_HOPPER_BM64=0); DenseSupported's rules too.
bool SparseSupported(const AttnParams& p, const SparseIndexView& index);
cudaError_t LaunchSparse(const AttnParams& p, const SparseIndexView& index,
                         const SparseSchedule& schedule, cudaStream_t stream);

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_HOPPER_LAUNCH_H_
