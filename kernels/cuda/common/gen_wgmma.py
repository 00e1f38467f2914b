#!/usr/bin/env python3
"""Writes wgmma_ops.cuh: the wgmma wrappers with their long register lists."""
import os

HEADER = '''// Hopper wgmma wrappers (sm_90a): m64nNk16, f32 accumulate, bf16/f16 operands.
// SS: A and B from shared memory (K-major descriptors). RS: A from registers (the mma.sync A
// fragment layout), B from shared memory N-major (imm-trans-b = 1). RSK (N = 64, 128): as RS with
// B K-major (imm-trans-b = 0), the index builders' key tiles (N = 64) and Saap's classifier weight
// slabs (N = 128). On targets without sm_90a features the bodies trap (the host never dispatches
// there).
// Written by kernels/cuda/gen_wgmma.py; do not edit by hand.
#ifndef SPATTN_KERNELS_CUDA_COMMON_WGMMA_OPS_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_WGMMA_OPS_CUH_

#include <cstdint>

namespace spattn {
namespace cuda {
namespace detail {
'''
FOOTER = '''}  // namespace detail
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_WGMMA_OPS_CUH_
'''


def body(n, ty, rs, b_kmajor=False):
    nreg = n // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    if rs:
        name = "RSK" if b_kmajor else "RS"
        sig = f"Wgmma{name}_N{n}_{ty}(float* d, const uint32_t* a, uint64_t desc_b, int scale_d)"
        trans_b = 0 if b_kmajor else 1
        operands = (f"{{%{nreg}, %{nreg + 1}, %{nreg + 2}, %{nreg + 3}}}, %{nreg + 4}, p, 1, 1, "
                    f"{trans_b}")
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)'
        pred = nreg + 5
    else:
        sig = f"WgmmaSS_N{n}_{ty}(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d)"
        operands = f"%{nreg}, %{nreg + 1}, p, 1, 1, 0, 0"
        ins = '"l"(desc_a), "l"(desc_b), "r"(scale_d)'
        pred = nreg + 2
    return f'''__device__ __forceinline__ void {sig} {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{regs}}}, {operands};\\n}}\\n"
      : {outs}
      : {ins});
#else
  __trap();
#endif
}}
'''


def main():
    parts = [HEADER]
    for ty in ("bf16", "f16"):
        for n in (64, 128, 176):
            parts.append(body(n, ty, rs=False))
            parts.append(body(n, ty, rs=True))
        parts.append(body(64, ty, rs=True, b_kmajor=True))
        parts.append(body(128, ty, rs=True, b_kmajor=True))
    parts.append(FOOTER)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wgmma_ops.cuh")
    with open(path, "w") as f:
        f.write("\n".join(parts))


if __name__ == "__main__":
    main()
