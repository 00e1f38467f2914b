// The bitmap form of row assembly (row_assembly.h) on the GPU: one CTA per row builds the row's
// "range" and "column" bitmaps in shared memory, 64K keys a segment, from a source that sets
// bits, and turns them into SparseIndex entries with row_assembly.h's word logic (count pass,
// then fill pass at the scanned offsets). Used by the sample_attention, anchor and saap builders.
#ifndef SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common/row_assembly.h"

namespace spattn {
namespace row_assembly {

constexpr int kAsmThreads = 256;
constexpr int kAsmSegWords = 2048;  // 64K keys per segment
constexpr int kAsmWordsPerThread = kAsmSegWords / kAsmThreads;
constexpr int kAsmArrayWords = kAsmSegWords + 2;  // plus one halo word on each side
constexpr int kAsmMaxSlots = 64;  // head slots that share one row (Saap: a kv group)
// Fill pass: a segment's entries of each stream are staged in shared memory (dynamic) and written
// out together, coalesced, when they fit: at most this many range starts, range ends, columns.
constexpr int kAsmStageRanges = 1024;
constexpr int kAsmStageCols = 10240;
constexpr int kAsmStageBytes = (2 * kAsmStageRanges + kAsmStageCols) * 4;

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
// For every unit (a row shared by ctx.num_slots head slots): count pass (kFill false) writes the
// number of ranges and columns of each slot row, fill pass writes the entries at off_* (then turns
// range ends into lengths). The fill pass places each segment's entries of a stream (range
// starts, ends, columns) in its shared-memory stage at their places relative to the segment's
// first, then every slot row copies the stage out in order (coalesced stores instead of each
// thread's own run of scattered ones); a stream with more entries in the segment than its stage
// holds goes straight to global memory as before. The entries and places are the same.
template <class Src, bool kFill>
__global__ void __launch_bounds__(kAsmThreads, 2)
    AssembleKernel(Src src, int num_units, AsmOut out) {
  constexpr bool fill = kFill;
  extern __shared__ int32_t stage[];  // fill: kAsmStageBytes (starts, ends, columns)
  int32_t* const stage_s = stage;
  int32_t* const stage_e = stage + kAsmStageRanges;
  int32_t* const stage_c = stage + 2 * kAsmStageRanges;
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
      // Array words past index last_i (key word num_words, past every key) hold no bits after the
      // mask below, so their final bits and events are 0: only words <= last_i are walked and only
      // [0, last_i + 2) (their neighbours) zeroed and masked. Bits a source sets further out are
      // never read.
      const int last_i = static_cast<int>(
          num_words - wbase < kAsmArrayWords - 2 ? num_words - wbase : kAsmArrayWords - 2);
      const int used = last_i + 2;
      for (int i = tid; i < used; i += kAsmThreads) {
        sR[i] = 0u;
        sC[i] = 0u;
      }
      __syncthreads();
      src.SetBits(ctx, sh, sR, sC, wbase);
      __syncthreads();
      for (int i = tid; i < used; i += kAsmThreads) {
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
        f[k] = cf[k] = 0u;
        if (i <= last_i) {
          FinalBits(sR[i - 1], sC[i - 1], sR[i], sC[i], sR[i + 1], sC[i + 1], &f[k], &cf[k]);
        }
        sF[i] = f[k];
      }
      if (tid == 0) sF[0] = carry_f;
      __syncthreads();
      // Fill: this thread's final column bits into its own words of sC (every FinalBits read of
      // sC is done), so that the output loops below re-read them and sF (for the range events)
      // instead of holding 3 x kAsmWordsPerThread words in registers across the scan (which
      // spilled).
      if (fill) {
#pragma unroll
        for (int k = 0; k < kAsmWordsPerThread; ++k) sC[first_i + k] = cf[k];
      }
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
      if (tid == kAsmThreads - 1) seg_total = total;
      __syncthreads();
      if (fill) {
        const unsigned long long st = seg_total;
        const int n_s = static_cast<int>(st & kField), n_e = static_cast<int>((st >> 21) & kField),
                  n_c = static_cast<int>((st >> 42) & kField);
        const bool in_s = n_s <= kAsmStageRanges, in_e = n_e <= kAsmStageRanges,
                   in_c = n_c <= kAsmStageCols;  // CTA-uniform
        // This thread's entries into the stages, at their places in the segment.
        int as = static_cast<int>(excl & kField), ae = static_cast<int>((excl >> 21) & kField),
            ac = static_cast<int>((excl >> 42) & kField);
        // Word k's range starts / ends (from sF) and final columns (sC), as computed above.
        auto events = [&](int k, uint32_t* st, uint32_t* en, uint32_t* c) {
          RangeEvents(sF[first_i + k - 1], sF[first_i + k], st, en);
          *c = sC[first_i + k];
        };
#pragma unroll 1
        for (int k = 0; k < kAsmWordsPerThread; ++k) {
          const int32_t key0 = static_cast<int32_t>((w0 + tid * kAsmWordsPerThread + k) * 32);
          uint32_t st, en, c;
          events(k, &st, &en, &c);
          if (in_s) {
            for (uint32_t b = st; b != 0u; b &= b - 1u) stage_s[as++] = key0 + __ffs(b) - 1;
          }
          if (in_e) {
            for (uint32_t b = en; b != 0u; b &= b - 1u) stage_e[ae++] = key0 + __ffs(b) - 1;
          }
          if (in_c) {
            for (uint32_t b = c; b != 0u; b &= b - 1u) stage_c[ac++] = key0 + __ffs(b) - 1;
          }
        }
        // Streams past their stage: straight to every slot row.
        if (!(in_s && in_e && in_c)) {
          const int64_t ks = base_s + static_cast<int64_t>(excl & kField);
          const int64_t ke = base_e + static_cast<int64_t>((excl >> 21) & kField);
          const int64_t kc = base_c + static_cast<int64_t>((excl >> 42) & kField);
          for (int si = 0; si < ctx.num_slots; ++si) {
            const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
            const int64_t ro = out.off_ranges[row], co = out.off_cols[row];
            int64_t ps = ro + ks, pe = ro + ke, pc = co + kc;
#pragma unroll 1
            for (int k = 0; k < kAsmWordsPerThread; ++k) {
              const int32_t key0 = static_cast<int32_t>((w0 + tid * kAsmWordsPerThread + k) * 32);
              uint32_t st, en, c;
              events(k, &st, &en, &c);
              if (!in_s) {
                for (uint32_t b = st; b != 0u; b &= b - 1u) {
                  out.range_start[ps++] = key0 + __ffs(b) - 1;
                }
              }
              if (!in_e) {
                for (uint32_t b = en; b != 0u; b &= b - 1u) {
                  out.range_len[pe++] = key0 + __ffs(b) - 1;  // the end; made a length below
                }
              }
              if (!in_c) {
                for (uint32_t b = c; b != 0u; b &= b - 1u) {
                  out.col_idx[pc++] = key0 + __ffs(b) - 1;
                }
              }
            }
          }
        }
        __syncthreads();  // the stages are full
        for (int si = 0; si < ctx.num_slots; ++si) {
          const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
          const int64_t ro = out.off_ranges[row], co = out.off_cols[row];
          if (in_s) {
            for (int i = tid; i < n_s; i += kAsmThreads)
              out.range_start[ro + base_s + i] = stage_s[i];
          }
          if (in_e) {
            for (int i = tid; i < n_e; i += kAsmThreads)
              out.range_len[ro + base_e + i] = stage_e[i];
          }
          if (in_c) {
            for (int i = tid; i < n_c; i += kAsmThreads) out.col_idx[co + base_c + i] = stage_c[i];
          }
        }
      }
      if (fill) __syncthreads();  // the stages and base_* are read
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
  if (!fill) {
    AssembleKernel<Src, false><<<grid, kAsmThreads, 0, stream>>>(src, num_units, out);
    return cudaGetLastError();
  }
  err = cudaFuncSetAttribute(AssembleKernel<Src, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kAsmStageBytes);
  if (err != cudaSuccess) return err;
  AssembleKernel<Src, true><<<grid, kAsmThreads, kAsmStageBytes, stream>>>(src, num_units, out);
  return cudaGetLastError();
}

}  // namespace row_assembly
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_
