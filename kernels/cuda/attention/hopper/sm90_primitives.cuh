// Hopper (sm_90a) primitives of the warp-specialized attention kernels: mbarriers, TMA tile
// loads, named barriers and register reallocation. Every body is compiled only for the sm_90a
// image; the kernels that use them are empty elsewhere (the host dispatches them only on
// compute capability 9.0).
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_SM90_PRIMITIVES_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_SM90_PRIMITIVES_CUH_

#include <cuda.h>  // CUtensorMap (a plain struct; no driver library is linked)
#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPATTN_SM90A 1
#else
#define SPATTN_SM90A 0
#endif

namespace spattn {
namespace cuda {
namespace hopper {

__device__ __forceinline__ uint32_t Smem32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ----------------------------------------------------------------------------------

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
#if SPATTN_SM90A
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

// Makes the initialized barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void MbarInitFence() {
#if SPATTN_SM90A
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of transactions (TMA completions) for this phase.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
#if SPATTN_SM90A
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void MbarArrive(uint32_t bar) {
#if SPATTN_SM90A
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Waits until the phase of parity `parity` has completed. A fresh barrier counts the phase of
// parity 1 as complete (so producers wait with parity 1 on their first pass over the ring).
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
#if SPATTN_SM90A
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
#endif
}

// As MbarWait, with a suspend-time hint (PTX mbarrier.try_wait's suspendTimeHint, in ns): each
// try may suspend the thread until the phase completes, up to the hint, where MbarWait's tries
// return after a short system-dependent limit and loop, issuing the loop's instructions all the
// while (the sparse kernel's producer warps wait most of the time, on the schedulers of the
// issue-bound consumer warps: session 21's profile counted ~350 producer instructions per warp
// and tile step). 0x989680 (10 ms) as CUTLASS's ClusterBarrier::wait.
__device__ __forceinline__ void MbarWaitSleep(uint32_t bar, uint32_t parity) {
#if SPATTN_SM90A
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity), "r"(0x989680u)
        : "memory");
  } while (done == 0);
#endif
}

// ---- TMA ---------------------------------------------------------------------------------------

// Loads the box at coordinates (c0, c1, c2) (innermost first) of `map` into shared memory at
// `dst`, completing `bytes` transactions on `bar`. Out-of-bounds elements are zero.
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                          int c2, uint32_t bar) {
#if SPATTN_SM90A
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#endif
}

// Stores the box at (c0, c1, c2) of `map` from shared memory at `src` (TMA, the bulk-group
// form: the issuing thread commits it with BulkCommit and waits for its reads of `src` with
// BulkWaitRead). The writers of `src` fence it (FenceProxyAsync) before.
__device__ __forceinline__ void TmaStore3d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                           int c2) {
#if SPATTN_SM90A
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
__device__ __forceinline__ void BulkCommit() {
#if SPATTN_SM90A
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Waits until all but the newest kN bulk groups of this thread have read their shared memory.
template <int kN>
__device__ __forceinline__ void BulkWaitRead() {
#if SPATTN_SM90A
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kN) : "memory");
#endif
}
// Waits until all but the newest kN bulk groups of this thread are complete.
template <int kN>
__device__ __forceinline__ void BulkWait() {
#if SPATTN_SM90A
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kN) : "memory");
#endif
}

__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
#if SPATTN_SM90A
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// ---- named barriers, register reallocation ----------------------------------------------------

__device__ __forceinline__ void NamedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegs>
__device__ __forceinline__ void RegsIncrease() {
#if SPATTN_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void RegsDecrease() {
#if SPATTN_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Waits for all but the newest `kN` committed wgmma groups of this warp.
template <int kN>
__device__ __forceinline__ void WgmmaWait() {
#if SPATTN_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kN) : "memory");
#endif
}

}  // namespace hopper
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_SM90_PRIMITIVES_CUH_
