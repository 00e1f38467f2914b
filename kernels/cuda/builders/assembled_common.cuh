// Device pieces shared by the SampleAttention, AnchorAttention and Saap GPU builders: tensor-core
// tile products (common/mma.cuh's mma.sync m16n8k16 through ldmatrix, the smem conventions of
// attention_core.cuh),
// bf16 hi/lo splitting of float operands, block reductions, and the row assembler (bitmap of a
// row's keys -> SparseIndex row, as RowKeys::Normalize).
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_
#define SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/row_bits.h"

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

// ---- Row assembler ------------------------------------------------------------------------------

constexpr int kAsmThreads = 256;
constexpr int kAsmSegWords = 2048;  // 64K keys per segment
constexpr int kAsmWordsPerThread = kAsmSegWords / kAsmThreads;
constexpr int kAsmArrayWords = kAsmSegWords + 2;  // plus one halo word on each side
constexpr int kAsmMaxSlots = kSaapMaxGroupSlots;

// What a source tells the assembler about one row (filled by Src::Begin on thread 0).
struct RowCtx {
  int key_end;
  int block;
  int num_slots;
  int slots[kAsmMaxSlots];
};

// Sets bits [start, end) of a segment array (array word i is key word wbase + i), clipped to the
// array. One thread; for short spans.
__device__ __forceinline__ void OrSpan(uint32_t* arr, int64_t wbase, int64_t start, int64_t end) {
  const int64_t lo_key = (wbase < 0 ? 0 : wbase) * 32;
  const int64_t hi_key = (wbase + kAsmArrayWords) * 32;
  if (start < lo_key) start = lo_key;
  if (end > hi_key) end = hi_key;
  if (start >= end) return;
  for (int64_t w = start >> 5; w <= (end - 1) >> 5; ++w) {
    atomicOr(arr + (w - wbase), SpanBits(w, start, end));
  }
}
// Same, all threads of the CTA together (each takes whole words): for long spans.
__device__ __forceinline__ void OrSpanBlock(uint32_t* arr, int64_t wbase, int64_t start,
                                            int64_t end) {
  const int64_t lo_key = (wbase < 0 ? 0 : wbase) * 32;
  const int64_t hi_key = (wbase + kAsmArrayWords) * 32;
  if (start < lo_key) start = lo_key;
  if (end > hi_key) end = hi_key;
  if (start >= end) return;
  const int64_t w_first = start >> 5, w_last = (end - 1) >> 5;
  for (int64_t w = w_first + threadIdx.x; w <= w_last; w += blockDim.x) {
    atomicOr(arr + (w - wbase), SpanBits(w, start, end));
  }
}

// The assembler kernel. Src provides:
//   struct Shared;                                   (per-row state in shared memory)
//   __device__ void Begin(int unit, Shared&, RowCtx&) const;   (thread 0)
//   __device__ void SetBits(const RowCtx&, const Shared&, uint32_t* ranges, uint32_t* cols,
//                           int64_t wbase) const;    (all threads; atomicOr / plain stores to
//                                                     `cols` words nobody else writes)
// For every unit (a row shared by ctx.num_slots head slots): count pass writes the number of
// ranges and columns of each slot row, fill pass writes the entries at off_* (then turns range
// ends into lengths).
template <class Src>
__global__ void __launch_bounds__(kAsmThreads, 2)
    AssembleKernel(Src src, int num_units, AsmOut out, bool fill) {
  __shared__ uint32_t sR[kAsmArrayWords];
  __shared__ uint32_t sC[kAsmArrayWords];
  __shared__ uint32_t sF[kAsmArrayWords];
  __shared__ typename Src::Shared sh;
  __shared__ RowCtx ctx;
  using Scan = cub::BlockScan<unsigned long long, kAsmThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ unsigned long long seg_total;
  __shared__ uint32_t carry_f;
  __shared__ long long base_s, base_e, base_c;
  const int tid = threadIdx.x;
  constexpr unsigned long long kField = (1ull << 21) - 1;

  for (int unit = blockIdx.x; unit < num_units; unit += gridDim.x) {
    if (tid == 0) {
      src.Begin(unit, sh, ctx);
      carry_f = 0;
      base_s = base_e = base_c = 0;
    }
    __syncthreads();
    const int key_end = ctx.key_end;
    const int64_t num_words = (static_cast<int64_t>(key_end) + 31) / 32;
    // Words [0, num_words] (one past the last, where a run ending at key_end ends).
    for (int64_t w0 = 0; w0 <= num_words; w0 += kAsmSegWords) {
      const int64_t wbase = w0 - 1;
      for (int i = tid; i < kAsmArrayWords; i += kAsmThreads) {
        sR[i] = 0u;
        sC[i] = 0u;
      }
      __syncthreads();
      src.SetBits(ctx, sh, sR, sC, wbase);
      __syncthreads();
      for (int i = tid; i < kAsmArrayWords; i += kAsmThreads) {
        const uint32_t m = WordMask(wbase + i, key_end);
        sR[i] &= m;
        sC[i] &= m;
      }
      __syncthreads();
      // This thread's words: array indices [first_i, first_i + kAsmWordsPerThread).
      const int first_i = 1 + tid * kAsmWordsPerThread;
      uint32_t f[kAsmWordsPerThread], cf[kAsmWordsPerThread];
#pragma unroll
      for (int k = 0; k < kAsmWordsPerThread; ++k) {
        const int i = first_i + k;
        FinalBits(sR[i - 1], sC[i - 1], sR[i], sC[i], sR[i + 1], sC[i + 1], &f[k], &cf[k]);
        sF[i] = f[k];
      }
      if (tid == 0) sF[0] = carry_f;
      __syncthreads();
      unsigned long long packed = 0;
      uint32_t starts[kAsmWordsPerThread], ends[kAsmWordsPerThread];
#pragma unroll
      for (int k = 0; k < kAsmWordsPerThread; ++k) {
        RangeEvents(sF[first_i + k - 1], f[k], &starts[k], &ends[k]);
        packed += static_cast<unsigned long long>(__popc(starts[k])) |
                  (static_cast<unsigned long long>(__popc(ends[k])) << 21) |
                  (static_cast<unsigned long long>(__popc(cf[k])) << 42);
      }
      unsigned long long excl = 0, total = 0;
      Scan(scan_tmp).ExclusiveSum(packed, excl, total);
      if (fill) {
        const int64_t ks = base_s + static_cast<int64_t>(excl & kField);
        const int64_t ke = base_e + static_cast<int64_t>((excl >> 21) & kField);
        const int64_t kc = base_c + static_cast<int64_t>((excl >> 42) & kField);
        for (int si = 0; si < ctx.num_slots; ++si) {
          const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
          const int64_t ro = out.off_ranges[row], co = out.off_cols[row];
          int64_t ps = ro + ks, pe = ro + ke, pc = co + kc;
#pragma unroll
          for (int k = 0; k < kAsmWordsPerThread; ++k) {
            const int32_t key0 = static_cast<int32_t>((w0 + tid * kAsmWordsPerThread + k) * 32);
            for (uint32_t b = starts[k]; b != 0u; b &= b - 1u) {
              out.range_start[ps++] = key0 + __ffs(b) - 1;
            }
            for (uint32_t b = ends[k]; b != 0u; b &= b - 1u) {
              out.range_len[pe++] = key0 + __ffs(b) - 1;  // the end; made a length below
            }
            for (uint32_t b = cf[k]; b != 0u; b &= b - 1u) {
              out.col_idx[pc++] = key0 + __ffs(b) - 1;
            }
          }
        }
      }
      if (tid == kAsmThreads - 1) seg_total = total;
      __syncthreads();
      if (tid == 0) {
        carry_f = sF[kAsmSegWords];
        base_s += static_cast<long long>(seg_total & kField);
        base_e += static_cast<long long>((seg_total >> 21) & kField);
        base_c += static_cast<long long>((seg_total >> 42) & kField);
      }
      __syncthreads();
    }
    if (fill) {
      const int64_t n = base_s;
      for (int si = 0; si < ctx.num_slots; ++si) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        const int64_t ro = out.off_ranges[row];
        for (int64_t k = tid; k < n; k += kAsmThreads) {
          out.range_len[ro + k] -= out.range_start[ro + k];
        }
      }
    } else if (tid == 0) {
      for (int si = 0; si < ctx.num_slots; ++si) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        out.count_ranges[row] = base_s;
        out.count_cols[row] = base_c;
      }
    }
    __syncthreads();
  }
}

template <class Src>
cudaError_t LaunchAssemble(const Src& src, int num_units, const AsmOut& out, bool fill,
                           cudaStream_t stream) {
  if (num_units <= 0) return cudaSuccess;
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const int grid = num_units < sms * 8 ? num_units : sms * 8;
  AssembleKernel<Src><<<grid, kAsmThreads, 0, stream>>>(src, num_units, out, fill);
  return cudaGetLastError();
}

// ---- Block-wide selection helpers ---------------------------------------------------------------

// Bits of a non-negative float as an order-preserving key.
__device__ __forceinline__ uint32_t FloatKey(float x) { return __float_as_uint(x); }

}  // namespace assembled
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_ASSEMBLED_COMMON_CUH_
