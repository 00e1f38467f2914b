// Device pieces shared by the SampleAttention, AnchorAttention and Saap GPU builders: tensor-core
// tile products (common/mma.cuh's mma.sync m16n8k16 through ldmatrix, the smem conventions of
// attention_core.cuh),
// bf16 hi/lo splitting of float operands, block reductions; rows are assembled by
// common/row_assembly.cuh.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_
#define SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/row_assembly.cuh"

namespace spattn {
namespace cuda {
namespace assembled {

using detail::CpAsync16;
using detail::CpAsyncCommit;
using detail::CpAsyncWait;
using detail::Exp2;
using detail::kNegInf;
using detail::LdMatrixX4;
using detail::Mma;
using detail::SmemAddr;
using row_assembly::AsmOut;
using row_assembly::kAsmArrayWords;
using row_assembly::LaunchAssemble;
using row_assembly::OrSpan;
using row_assembly::OrSpanBlock;
using row_assembly::RowCtx;
static_assert(kSaapMaxGroupSlots <= row_assembly::kAsmMaxSlots,
              "a Saap kv group's head slots share one assembled row");

__device__ __forceinline__ int CeilDivD(int a, int b) { return (a + b - 1) / b; }
__device__ __forceinline__ int FloorDivD(int a, int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// ---- Element conversion -------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float ToF(T x);
template <>
__device__ __forceinline__ float ToF<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float ToF<__half>(__half x) {
  return __half2float(x);
}

// Two floats as a packed pair of T (low half first), and the residual pair (x - T(x)): a float
// operand split into hi + lo keeps ~16 mantissa bits through a bf16 tensor-core product.
template <typename T>
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = Mma<T>::Pack(x0, x1);
  float h0, h1;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&hi);
    h0 = __low2float(v);
    h1 = __high2float(v);
  } else {
    const __half2 v = *reinterpret_cast<const __half2*>(&hi);
    h0 = __low2float(v);
    h1 = __high2float(v);
  }
  lo = Mma<T>::Pack(x0 - h0, x1 - h1);
}

// ---- Swizzled shared tiles ----------------------------------------------------------------------

// Byte offset of 16-byte chunk `ch` of row `row` in a tile of `chunks` chunks per row (a multiple
// of 8): chunk index XOR (row & 7), so that ldmatrix phases hit 8 different bank groups.
__device__ __forceinline__ uint32_t TileOff(int row, int ch, int chunks) {
  return static_cast<uint32_t>((row * chunks + (ch ^ (row & 7))) * 16);
}
// Byte offset of element `col` (2-byte elements) of row `row`.
__device__ __forceinline__ uint32_t TileElemOff(int row, int col, int chunks) {
  return TileOff(row, col >> 3, chunks) + (col & 7) * 2;
}

// cp.async of rows [0, rows) of a row-major global matrix (row stride `stride` elements, 2-byte
// elements, `chunks` 16-byte chunks per row) into a swizzled tile of `tile_rows` rows; rows past
// `valid_rows` are zero-filled. `row_ptr(r)` gives the global address of row r.
template <class RowPtr>
__device__ __forceinline__ void LoadTileAsync(uint32_t dst, int tile_rows, int valid_rows,
                                              int chunks, RowPtr row_ptr, int tid, int nthreads) {
  for (int i = tid; i < tile_rows * chunks; i += nthreads) {
    const int r = i / chunks, ch = i - r * chunks;
    const bool valid = r < valid_rows;
    const char* src = valid ? reinterpret_cast<const char*>(row_ptr(r)) + ch * 16
                            : reinterpret_cast<const char*>(row_ptr(0));
    CpAsync16(dst + TileOff(r, ch, chunks), src, valid);
  }
}

// Top of a double-buffered cp.async tile loop (one commit group per tile, tile 0 issued before
// the loop): issues tile t + 1 when there is one, then waits until tile t has landed, for the
// whole CTA. The caller's readers of tile t - 1 (the buffer tile t + 1 lands in) are done by then.
template <class Issue>
__device__ __forceinline__ void AwaitTile(int t, int ntiles, Issue issue) {
  if (t + 1 < ntiles) issue(t + 1);
  CpAsyncCommit();
  CpAsyncWait<1>();
  __syncthreads();
}

// A fragments (16 rows starting at row0, a multiple of 16) of k-step ks from a swizzled tile.
__device__ __forceinline__ void LoadA(uint32_t tile, int row0, int ks, int chunks, int lane,
                                      uint32_t (&a)[4]) {
  const uint32_t addr =
      tile + (row0 + (lane & 15)) * chunks * 16 + (((2 * ks + (lane >> 4)) ^ (lane & 7)) * 16);
  LdMatrixX4(addr, a[0], a[1], a[2], a[3]);
}
// B fragments of two n8 tiles (16 rows of the [n][k] tile starting at n0, a multiple of 16) at
// k-step ks: (b[0], b[1]) for rows n0..n0+7, (b[2], b[3]) for n0+8..n0+15.
__device__ __forceinline__ void LoadB2(uint32_t tile, int n0, int ks, int chunks, int lane,
                                       uint32_t (&b)[4]) {
  const uint32_t addr = tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * chunks * 16 +
                        (((2 * ks + ((lane >> 3) & 1)) ^ (lane & 7)) * 16);
  LdMatrixX4(addr, b[0], b[1], b[2], b[3]);
}

// ---- Warp reductions ----------------------------------------------------------------------------

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Over the 4 lanes of a quad (the lanes holding one mma row).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
// l * 2^(m_old - m_new) with l = 0 whenever m_old is -inf (empty so far).
__device__ __forceinline__ float Rescale2(float l, float m_old, float m_new) {
  return m_old == kNegInf ? 0.f : l * Exp2(m_old - m_new);
}

// ---- Block-wide selection helpers ---------------------------------------------------------------

// Bits of a non-negative float as an order-preserving key.
__device__ __forceinline__ uint32_t FloatKey(float x) { return __float_as_uint(x); }

}  // namespace assembled
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_
