// The one set of tensor-core and async-copy wrappers of the CUDA kernels (sm_80+): cp.async,
// ldmatrix (plain and transposed), mma.sync m16n8k16 with fp32 accumulators (bf16 / fp16 in),
// ex2. The attention core and every GPU index builder use these; the Hopper wgmma wrappers are in
// wgmma_ops.cuh. Header-only device code.
#ifndef SPATTN_KERNELS_CUDA_COMMON_MMA_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spattn {
namespace cuda {
namespace detail {

constexpr float kNegInf = -__builtin_huge_valf();

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global → shared; copies zeros when !valid (src is not read then).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices from shared memory (`addr`: a shared-space address per lane).
__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                           uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// The same from a generic pointer into shared memory.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  LdMatrixX4(SmemAddr(smem), r[0], r[1], r[2], r[3]);
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                                uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// mma.sync m16n8k16 (row.col) per input type: Run (c += a * b), Pack (two floats into one b16x2
// register, round to nearest), ToFloat.
template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void Run(float* c, const uint32_t* a, uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ void Run(float* c, const uint32_t* a, uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
};

// The m16n8 accumulator (C) fragment of Mma::Run: a lane's element e (0..3) of n-tile nt sits in
// row lane / 4 + 8 * (e / 2) of the warp's 16 and in column AccCol(nt, e, lane) of the tile.
__device__ __forceinline__ int AccCol(int nt, int e, int lane) {
  return nt * 8 + (lane & 3) * 2 + (e & 1);
}

}  // namespace detail
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_MMA_CUH_
