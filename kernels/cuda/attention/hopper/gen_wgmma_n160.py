#!/usr/bin/env python3
"""Writes wgmma_n160.cuh: the m64n160k16 SS wrappers of the sparse kernel's 160-key range tiles
(persistent_fa3.cuh, PersistTraits kBN_ = 160), with common/gen_wgmma.py's body()."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "common"))
from gen_wgmma import body  # noqa: E402

HEADER = '''// m64n160k16 wgmma (SS, f32 accumulate, bf16 / f16): S = Q K^T of the sparse kernel's 160-key
// tiles (persistent_fa3.cuh, PersistTraits with kBN_ = 160), and detail::Wgmma<T, 160>.
// Written by gen_wgmma_n160.py; do not edit by hand.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_WGMMA_N160_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_WGMMA_N160_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention/attention_core.cuh"

namespace spattn {
namespace cuda {
namespace detail {
'''
FOOTER = '''template <>
struct Wgmma<__nv_bfloat16, 160> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N160_bf16(d, a, b, sd);
  }
};
template <>
struct Wgmma<__half, 160> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N160_f16(d, a, b, sd);
  }
};

}  // namespace detail
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_HOPPER_WGMMA_N160_CUH_
'''


def main():
    parts = [HEADER]
    for ty in ("bf16", "f16"):
        parts.append(body(160, ty, rs=False))
    parts.append(FOOTER)
    with open(os.path.join(HERE, "wgmma_n160.cuh"), "w") as f:
        f.write("\n".join(parts))


if __name__ == "__main__":
    main()
