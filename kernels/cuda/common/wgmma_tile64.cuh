// The wgmma the index builders run on 64-key tiles (sampled_lines' passes, vertical_slash's
// estimate, anchor's pass): m64n64k16, f32 accumulators in the mma.sync C layout ([n-tile][4]),
// tiles in shared memory in the 128-byte swizzle, K-major, 8-row core-matrix groups 1024 bytes
// apart. Device code for sm_90a images only: callers keep it behind their sm_90a guards
// (CurrentDeviceIsSm90, the host's check for those images, aside).
#ifndef SPATTN_KERNELS_CUDA_COMMON_WGMMA_TILE64_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_WGMMA_TILE64_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/common/wgmma_ops.cuh"

namespace spattn {
namespace cuda {

// Host: whether the current device is compute capability 9.0, whose sm_90a image holds the
// builders' wgmma instances (elsewhere they run their mma.sync instances).
inline bool CurrentDeviceIsSm90() {
  int dev = 0, major = 0, minor = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
         major == 9 && minor == 0;
}

// The matrix descriptor of a tile at shared address `addr` in that layout (the leading offset is
// unused for it).
__device__ __forceinline__ uint64_t Tile64SmemDesc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
}

// d = a * b (+ d where scale_d != 0). SS: A from shared memory by descriptor. RS: A from
// registers, the mma.sync A fragment layout. B is the key tile's descriptor.
template <typename T>
struct Tile64Wgmma;
template <>
struct Tile64Wgmma<__nv_bfloat16> {
  static __device__ __forceinline__ void SS(float (&d)[8][4], uint64_t a, uint64_t b, int scale_d) {
    detail::WgmmaSS_N64_bf16(&d[0][0], a, b, scale_d);
  }
  static __device__ __forceinline__ void RS(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    detail::WgmmaRSK_N64_bf16(&d[0][0], a, b, scale_d);
  }
};
template <>
struct Tile64Wgmma<__half> {
  static __device__ __forceinline__ void SS(float (&d)[8][4], uint64_t a, uint64_t b, int scale_d) {
    detail::WgmmaSS_N64_f16(&d[0][0], a, b, scale_d);
  }
  static __device__ __forceinline__ void RS(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    detail::WgmmaRSK_N64_f16(&d[0][0], a, b, scale_d);
  }
};

// Waits for every wgmma the warpgroup committed, then ties each accumulator to the wait (an empty
// asm that reads and writes it), so no read of acc moves above it.
__device__ __forceinline__ void Tile64Wait(float (&acc)[8][4]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[nt][e])::"memory");
  }
#else
  __trap();
#endif
}

// Byte offset of 16-byte chunk `ch` of key row `r` in a 64-key tile of that layout: [kD / 64
// sub-tiles][64 keys][128 bytes], the chunk index XOR key % 8.
__device__ __forceinline__ uint32_t Tile64KeyOff(int r, int ch) {
  return static_cast<uint32_t>((ch >> 3) * (64 * 128) + r * 128 + (((ch & 7) ^ (r & 7)) * 16));
}

// The products of a warpgroup's 64 rows (Q fragments `qf`, the mma.sync A layout) against the
// key tile at shared address `ks` (Tile64KeyOff layout, 1024-byte aligned): issue, commit, wait.
// Every thread of the warpgroup calls it. The first k step does not add the accumulators
// (scale-d 0; no zeroing instructions): mma.sync adds its first products to +0, so a sum of
// products that is -0 here is +0 there (each caller says why its index cannot tell them apart).
// The descriptor of k step kk is the tile's plus the step's byte offset / 16 (in the address
// field: tile + offset stays below 2^18).
template <typename T, int kD>
__device__ __forceinline__ void Tile64ProductsRs(const uint32_t (&qf)[kD / 16][4], uint32_t ks,
                                                 float (&acc)[8][4]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint64_t desc0 = Tile64SmemDesc(ks);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    Tile64Wgmma<T>::RS(acc, qf[kk], desc0 + (((kk >> 2) * (64 * 128) + (kk & 3) * 32) >> 4),
                       kk > 0 ? 1 : 0);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  Tile64Wait(acc);
#else
  __trap();
#endif
}

// Saap's classifier (session 29): m64n128k16 with A from registers (the mma.sync A fragment
// layout) and B a 128-row K-major tile in the layout above (16 groups of 8 rows, 1024 bytes
// apart) read by descriptor; the 64 accumulators as two n64 halves, d[h][nt][e] = column
// 64 h + 8 nt + 2 (lane % 4) + (e & 1), each half in the mma.sync C layout.
template <typename T>
struct Tile64WgmmaN128;
template <>
struct Tile64WgmmaN128<__nv_bfloat16> {
  static __device__ __forceinline__ void RS(float (&d)[2][8][4], const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    detail::WgmmaRSK_N128_bf16(&d[0][0][0], a, b, scale_d);
  }
};
template <>
struct Tile64WgmmaN128<__half> {
  static __device__ __forceinline__ void RS(float (&d)[2][8][4], const uint32_t (&a)[4], uint64_t b,
                                            int scale_d) {
    detail::WgmmaRSK_N128_f16(&d[0][0][0], a, b, scale_d);
  }
};

// Tile64Wait for Tile64WgmmaN128's accumulators.
__device__ __forceinline__ void Tile64Wait(float (&acc)[2][8][4]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[h][nt][e])::"memory");
    }
  }
#else
  __trap();
#endif
}

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_WGMMA_TILE64_CUH_
