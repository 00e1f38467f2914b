// The bitmap form of row assembly (row_assembly.h) on the GPU: one CTA per row builds the row's
// "range" and "column" bitmaps in shared memory, 64K keys a segment, from a source that sets
// bits, and turns them into SparseIndex entries with row_assembly.h's word logic (count pass,
// then fill pass at the scanned offsets). Used by the sample_attention, anchor and saap builders.
#ifndef SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cub/block/block_scan.cuh>
#include <type_traits>

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

// A row's record (the records path, AsmOut::rec): what Src::Begin fills, made for every unit
// by one thread each before the count pass (AssembleRecordsKernel) and copied into shared memory
// by both passes, the next row's words loaded while the current row is assembled.
template <class Src>
struct AsmRec {
  typename Src::Shared sh;
  RowCtx ctx;
};
// A source takes the records path when it declares `static constexpr bool kAsmRecords = true;`
// (its AsmRec must fit kAsmRecWords); LaunchAssemble ignores AsmOut::rec for the others.
template <class Src, class = void>
struct AsmUsesRecords : std::false_type {};
template <class Src>
struct AsmUsesRecords<Src, std::void_t<decltype(Src::kAsmRecords)>>
    : std::integral_constant<bool, Src::kAsmRecords> {};

// A source gives its rows as spans too when it declares `static constexpr bool kAsmSpans = true;`
// (records path only) and
//   __device__ int NumSpans(const RowCtx&, const Shared&) const;
//   __device__ void SpanAt(const RowCtx&, const Shared&, int i, int64_t* start, int64_t* end) const;
// with spans i in [0, NumSpans) whose keys, clipped to [0, key_end), are exactly the range bits
// its SetBits sets below key_end, and SetBits setting no column bits: then a row is the union of
// its spans, its ranges that union's maximal runs, and it has no columns.
template <class Src, class = void>
struct AsmUsesSpans : std::false_type {};
template <class Src>
struct AsmUsesSpans<Src, std::void_t<decltype(Src::kAsmSpans)>>
    : std::integral_constant<bool, Src::kAsmSpans && AsmUsesRecords<Src>::value> {};
// Whether a unit's row is a span row (the same test in the span kernel and both bitmap passes).
template <class Src>
__device__ __forceinline__ bool AsmSpanRow(const Src& src, const RowCtx& ctx,
                                           const typename Src::Shared& sh, const AsmOut& out) {
  if constexpr (AsmUsesSpans<Src>::value) {
    return out.span_cap > 0 && src.NumSpans(ctx, sh) <= out.span_cap;
  } else {
    return false;
  }
}

// Words of a row record the passes copy (0: no records).
template <class Src, bool kRec>
constexpr int AsmRecCopyWords() {
  if constexpr (!kRec) {
    return 0;
  } else {
    static_assert(sizeof(AsmRec<Src>) <= 4 * kAsmRecWords, "a row record passes kAsmRecWords");
    static_assert(sizeof(AsmRec<Src>) % 4 == 0, "a row record is whole words");
    static_assert(alignof(AsmRec<Src>) <= 8, "row records are 8-byte aligned in global memory");
    return static_cast<int>(sizeof(AsmRec<Src>) / 4);
  }
}

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

// FinalBits of this thread's words [first_i, first_i + kAsmWordsPerThread) of a segment's arrays,
// each word read through its key_end mask (WordMask: no bits at or past key_end, none before key
// 0); words past last_i get 0. Reads array words first_i - 1 .. first_i + kAsmWordsPerThread
// once each.
__device__ __forceinline__ void MaskedFinalBits(const uint32_t* sR, const uint32_t* sC, int first_i,
                                                int last_i, int64_t wbase, int key_end, uint32_t* f,
                                                uint32_t* cf) {
  uint32_t r[kAsmWordsPerThread + 2], c[kAsmWordsPerThread + 2];
#pragma unroll
  for (int k = 0; k < kAsmWordsPerThread + 2; ++k) {
    const int i = first_i - 1 + k;
    const uint32_t m = WordMask(wbase + i, key_end);
    r[k] = sR[i] & m;
    c[k] = sC[i] & m;
  }
#pragma unroll
  for (int k = 0; k < kAsmWordsPerThread; ++k) {
    f[k] = cf[k] = 0u;
    if (first_i + k <= last_i)
      FinalBits(r[k], c[k], r[k + 1], c[k + 1], r[k + 2], c[k + 2], &f[k], &cf[k]);
  }
}

// Kept words (AsmOut::keep): whether this unit's row takes them (CTA-uniform; the same in both
// passes), the count pass's store of a thread's final words of a segment (only chunks with a set
// bit, and every warp's flag word of the row's chunks), and the fill pass's load of them (words
// past last_i are 0, as MaskedFinalBits gives them).
__device__ __forceinline__ bool KeepRow(const AsmOut& out, int unit, int64_t num_words) {
  return out.keep != nullptr && unit < out.keep_units && num_words < out.keep_stride;
}
__device__ __forceinline__ uint32_t* KeepUnit(const AsmOut& out, int unit) {
  return out.keep + static_cast<int64_t>(unit) * AsmKeepUnitWords(out.keep_stride);
}
static_assert(kAsmWordsPerThread == 8, "kept words: a thread's words are one 8-word chunk");
__device__ __forceinline__ void KeepStore(const AsmOut& out, int unit, int64_t w0, int first_i,
                                          int last_i, const uint32_t* f, const uint32_t* cf) {
  const bool mine = first_i <= last_i;  // chunk w0 + tid * 8 <= num_words < keep_stride
  uint32_t any = 0u;
#pragma unroll
  for (int k = 0; k < kAsmWordsPerThread; ++k) any |= f[k] | cf[k];
  const bool nz = mine && any != 0u;
  const uint32_t flags = __ballot_sync(0xffffffffu, nz);
  uint32_t* ku = KeepUnit(out, unit);
  const int64_t cw = w0 + static_cast<int64_t>(threadIdx.x) * kAsmWordsPerThread;
  if (nz) {
    uint4* pf = reinterpret_cast<uint4*>(ku + cw);
    uint4* pc = reinterpret_cast<uint4*>(ku + out.keep_stride + cw);
    pf[0] = make_uint4(f[0], f[1], f[2], f[3]);
    pf[1] = make_uint4(f[4], f[5], f[6], f[7]);
    pc[0] = make_uint4(cf[0], cf[1], cf[2], cf[3]);
    pc[1] = make_uint4(cf[4], cf[5], cf[6], cf[7]);
  }
  // Lane 0's chunk is its warp's first: its flag word is (w0 + warp * 256) / 256.
  if ((threadIdx.x & 31) == 0 && mine) ku[2 * out.keep_stride + (cw >> 8)] = flags;
}
__device__ __forceinline__ void KeepLoad(const AsmOut& out, int unit, int64_t w0, int first_i,
                                         int last_i, uint32_t* f, uint32_t* cf) {
#pragma unroll
  for (int k = 0; k < kAsmWordsPerThread; ++k) f[k] = cf[k] = 0u;
  if (first_i > last_i) return;
  const uint32_t* ku = KeepUnit(out, unit);
  const int64_t cw = w0 + static_cast<int64_t>(threadIdx.x) * kAsmWordsPerThread;
  const uint32_t flags = ku[2 * out.keep_stride + (cw >> 8)];
  if (((flags >> (threadIdx.x & 31)) & 1u) == 0u) return;
  const uint4* pf = reinterpret_cast<const uint4*>(ku + cw);
  const uint4* pc = reinterpret_cast<const uint4*>(ku + out.keep_stride + cw);
  const uint4 a = pf[0], b = pf[1], c = pc[0], d = pc[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  cf[0] = c.x, cf[1] = c.y, cf[2] = c.z, cf[3] = c.w, cf[4] = d.x, cf[5] = d.y, cf[6] = d.z,
  cf[7] = d.w;
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
//
// Both passes read the arrays through the key_end mask (MaskedFinalBits) instead of masking them
// in place (one barrier and one sweep less per segment). The fill pass keeps the row's entry
// counts before each segment in every thread (each has the scan's segment total), so a segment
// ends at its stage copy without the two barriers around a thread-0 update. The count pass needs
// only each row's totals: every thread sums its words' range starts and columns over the segments
// and the CTA adds them once per row (no scan, no per-segment total); a thread finds the final bits
// of the word before its own itself (thread 0: the previous segment's last word, passed on by the
// last thread), and the bit arrays are double-buffered (each segment zeroes the other pair while it
// reads its own), so a segment costs two barriers (after the bits are set; after the words are
// read) and a row two more (its Begin; the totals).
//
// kRec (AsmOut::rec set): the rows' records were made by AssembleRecordsKernel; each row's record
// is copied from the registers that loaded it during the previous row (threads below
// AsmRecCopyWords, one word each) into one of two shared records by row parity (the other may
// still be read by the previous row's last steps), so a row starts without Begin's dependent
// loads on thread 0.
template <class Src, bool kRec>
__device__ __forceinline__ void AssembleCount(const Src& src, int num_units, const AsmOut& out) {
  __shared__ uint32_t sR[2][kAsmArrayWords];
  __shared__ uint32_t sC[2][kAsmArrayWords];
  __shared__ typename Src::Shared sh_b;  // per-row Begin (no records)
  __shared__ RowCtx ctx_b;
  __shared__ AsmRec<Src> rec_s[2];  // records (each path's unused ones are dropped)
  __shared__ uint32_t carry_f[2];
  __shared__ unsigned long long warp_sum[kAsmThreads / 32];
  const int tid = threadIdx.x;
  const int first_i = 1 + tid * kAsmWordsPerThread;
  for (int i = tid; i < kAsmArrayWords; i += kAsmThreads) {
    sR[0][i] = 0u;
    sC[0][i] = 0u;
  }
  int p = 0;  // the zeroed pair
  constexpr int kRecWords = AsmRecCopyWords<Src, kRec>();
  uint32_t next_rec = 0u;
  if (kRec && tid < kRecWords && blockIdx.x < num_units) {
    next_rec = out.rec[static_cast<int64_t>(blockIdx.x) * kAsmRecWords + tid];
  }
  int rb = 0;
  for (int unit = blockIdx.x; unit < num_units; unit += gridDim.x) {
    const RowCtx* ctx_p;
    const typename Src::Shared* sh_p;
    if constexpr (kRec) {
      AsmRec<Src>& rec = rec_s[rb];
      if (tid < kRecWords) reinterpret_cast<uint32_t*>(&rec)[tid] = next_rec;
      rb ^= 1;
      ctx_p = &rec.ctx;
      sh_p = &rec.sh;
    } else {
      if (tid == 0) src.Begin(unit, sh_b, ctx_b);
      ctx_p = &ctx_b;
      sh_p = &sh_b;
    }
    __syncthreads();
    if constexpr (kRec) {
      const int nu = unit + gridDim.x;
      if (tid < kRecWords && nu < num_units) {
        next_rec = out.rec[static_cast<int64_t>(nu) * kAsmRecWords + tid];
      }
    }
    const RowCtx& ctx = *ctx_p;
    const typename Src::Shared& sh = *sh_p;
    // A span row is the span kernel's (CTA-uniform; its record stays untouched until two row
    // starts on, each behind a barrier).
    if (AsmSpanRow(src, ctx, sh, out)) continue;
    const int key_end = ctx.key_end;
    const int64_t num_words = (static_cast<int64_t>(key_end) + 31) / 32;
    const bool keep_row = KeepRow(out, unit, num_words);
    // This thread's range starts (low half) and columns (high half) over the row's segments.
    unsigned long long acc = 0;
    int seg = 0;
    for (int64_t w0 = 0; w0 <= num_words; w0 += kAsmSegWords, ++seg) {
      const int64_t wbase = w0 - 1;
      const int last_i = static_cast<int>(
          num_words - wbase < kAsmArrayWords - 2 ? num_words - wbase : kAsmArrayWords - 2);
      src.SetBits(ctx, sh, sR[p], sC[p], wbase);
      __syncthreads();
      // The other pair was last read by the previous segment's words, all done by the barrier.
      for (int i = tid; i < kAsmArrayWords; i += kAsmThreads) {
        sR[p ^ 1][i] = 0u;
        sC[p ^ 1][i] = 0u;
      }
      // Words first_i - 2 .. first_i + kAsmWordsPerThread through the mask, streamed: the final
      // bits of word first_i - 1 (f_prev; thread 0: the previous segment's last word), then each
      // of this thread's words and its range starts against the word before.
      const uint32_t* R = sR[p];
      const uint32_t* C = sC[p];
      auto word = [&](int i, uint32_t* r, uint32_t* c) {
        const uint32_t m = WordMask(wbase + i, key_end);
        *r = R[i] & m;
        *c = C[i] & m;
      };
      uint32_t r0 = 0u, c0 = 0u, r1, c1, r2, c2;
      if (tid > 0) word(first_i - 2, &r0, &c0);
      word(first_i - 1, &r1, &c1);
      word(first_i, &r2, &c2);
      uint32_t f_prev = 0u, unused;
      if (tid == 0) {
        f_prev = seg == 0 ? 0u : carry_f[seg & 1];
      } else if (first_i - 1 <= last_i) {
        FinalBits(r0, c0, r1, c1, r2, c2, &f_prev, &unused);
      }
      uint32_t kf[kAsmWordsPerThread], kcf[kAsmWordsPerThread];  // kept words
#pragma unroll
      for (int k = 0; k < kAsmWordsPerThread; ++k) {
        r0 = r1, c0 = c1, r1 = r2, c1 = c2;
        word(first_i + k + 1, &r2, &c2);
        uint32_t f = 0u, cf = 0u, st, en;
        if (first_i + k <= last_i) FinalBits(r0, c0, r1, c1, r2, c2, &f, &cf);
        RangeEvents(f_prev, f, &st, &en);
        acc += static_cast<unsigned long long>(__popc(st)) |
               (static_cast<unsigned long long>(__popc(cf)) << 32);
        f_prev = f;
        kf[k] = f;
        kcf[k] = cf;
      }
      if (keep_row) KeepStore(out, unit, w0, first_i, last_i, kf, kcf);
      if (tid == kAsmThreads - 1) carry_f[(seg + 1) & 1] = f_prev;
      p ^= 1;
      // The next segment sets bits in the pair zeroed above and reads carry_f.
      if (w0 + kAsmSegWords <= num_words) __syncthreads();
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if ((tid & 31) == 0) warp_sum[tid >> 5] = acc;
    __syncthreads();  // also: every word of the row is read before the next Begin
    if (tid == 0) {
      unsigned long long t = 0;
      for (int w = 0; w < kAsmThreads / 32; ++w) t += warp_sum[w];
      for (int si = 0; si < ctx.num_slots; ++si) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        out.count_ranges[row] = static_cast<int64_t>(t & 0xffffffffull);
        out.count_cols[row] = static_cast<int64_t>(t >> 32);
      }
    }
  }
}

// kRec: records as in AssembleCount, and a row of one segment whose range starts and ends both
// fit their stages (so they pair up in the stages: every range of the row starts and ends in it)
// writes each range's length as stage_e[i] - stage_s[i] at once; the other rows turn their ends
// into lengths after the row as before (a barrier and a re-read of the row's entries). The row's
// last barrier goes too: the next row writes the other record, and its first barrier follows
// every read of this row's stages and record.
template <class Src, bool kRec>
__device__ __forceinline__ void AssembleFill(const Src& src, int num_units, const AsmOut& out) {
  constexpr bool fill = true;
  extern __shared__ int32_t stage[];  // fill: kAsmStageBytes (starts, ends, columns)
  int32_t* const stage_s = stage;
  int32_t* const stage_e = stage + kAsmStageRanges;
  int32_t* const stage_c = stage + 2 * kAsmStageRanges;
  __shared__ uint32_t sR[kAsmArrayWords];
  __shared__ uint32_t sC[kAsmArrayWords];
  __shared__ uint32_t sF[kAsmArrayWords];
  __shared__ typename Src::Shared sh_b;  // per-row Begin (no records)
  __shared__ RowCtx ctx_b;
  __shared__ AsmRec<Src> rec_s[2];  // records (each path's unused ones are dropped)
  using Scan = cub::BlockScan<unsigned long long, kAsmThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ uint32_t carry_f[2];
  const int tid = threadIdx.x;
  constexpr unsigned long long kField = (1ull << 21) - 1;

  constexpr int kRecWords = AsmRecCopyWords<Src, kRec>();
  uint32_t next_rec = 0u;
  if (kRec && tid < kRecWords && blockIdx.x < num_units) {
    next_rec = out.rec[static_cast<int64_t>(blockIdx.x) * kAsmRecWords + tid];
  }
  int rb = 0;
  for (int unit = blockIdx.x; unit < num_units; unit += gridDim.x) {
    const RowCtx* ctx_p;
    const typename Src::Shared* sh_p;
    if constexpr (kRec) {
      AsmRec<Src>& rec = rec_s[rb];
      if (tid < kRecWords) reinterpret_cast<uint32_t*>(&rec)[tid] = next_rec;
      rb ^= 1;
      ctx_p = &rec.ctx;
      sh_p = &rec.sh;
    } else {
      if (tid == 0) src.Begin(unit, sh_b, ctx_b);
      ctx_p = &ctx_b;
      sh_p = &sh_b;
    }
    __syncthreads();
    if constexpr (kRec) {
      const int nu = unit + gridDim.x;
      if (tid < kRecWords && nu < num_units) {
        next_rec = out.rec[static_cast<int64_t>(nu) * kAsmRecWords + tid];
      }
    }
    const RowCtx& ctx = *ctx_p;
    const typename Src::Shared& sh = *sh_p;
    if (AsmSpanRow(src, ctx, sh, out)) continue;  // the span kernel's (as in AssembleCount)
    const int key_end = ctx.key_end;
    const int64_t num_words = (static_cast<int64_t>(key_end) + 31) / 32;
    // kRec: the row is one segment (the loop below runs once) and its lengths are written from
    // the stages (set in that segment).
    const bool one_seg = kRec && num_words < kAsmSegWords;
    const bool keep_row = KeepRow(out, unit, num_words);
    bool direct_len = false;
    // The row's range starts, ends and columns before this segment (every thread keeps them: each
    // has the scan's segment total).
    long long base_s = 0, base_e = 0, base_c = 0;
    int seg = 0;
    // Words [0, num_words] (one past the last, where a run ending at key_end ends).
    for (int64_t w0 = 0; w0 <= num_words; w0 += kAsmSegWords, ++seg) {
      const int64_t wbase = w0 - 1;
      // Array words past index last_i (key word num_words, past every key) read as 0 through the
      // key_end mask, so their final bits and events are 0: only words <= last_i are walked and
      // only [0, last_i + 2) (their neighbours) zeroed. Bits a source sets further out are never
      // read.
      const int last_i = static_cast<int>(
          num_words - wbase < kAsmArrayWords - 2 ? num_words - wbase : kAsmArrayWords - 2);
      // This thread's words: array indices [first_i, first_i + kAsmWordsPerThread).
      const int first_i = 1 + tid * kAsmWordsPerThread;
      uint32_t f[kAsmWordsPerThread], cf[kAsmWordsPerThread];
      if (keep_row) {
        // The count pass's final words (the same values MaskedFinalBits gives below). The barrier:
        // the previous segment's reads of sF and the stages are done before they are written.
        __syncthreads();
        KeepLoad(out, unit, w0, first_i, last_i, f, cf);
      } else {
        const int used = last_i + 2;
        for (int i = tid; i < used; i += kAsmThreads) {
          sR[i] = 0u;
          sC[i] = 0u;
        }
        __syncthreads();
        src.SetBits(ctx, sh, sR, sC, wbase);
        __syncthreads();
        MaskedFinalBits(sR, sC, first_i, last_i, wbase, key_end, f, cf);
      }
#pragma unroll
      for (int k = 0; k < kAsmWordsPerThread; ++k) sF[first_i + k] = f[k];
      // Array word 0 is the previous segment's last (kAsmSegWords), passed on by the last thread
      // in two slots by segment parity (thread 0 reads this segment's while it writes the next's).
      if (tid == kAsmThreads - 1) carry_f[(seg + 1) & 1] = f[kAsmWordsPerThread - 1];
      if (tid == 0) sF[0] = seg == 0 ? 0u : carry_f[seg & 1];
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
      // `total` (the segment's) is every thread's; the next use of scan_tmp is two barriers on.
      unsigned long long excl = 0, total = 0;
      Scan(scan_tmp).ExclusiveSum(packed, excl, total);
      if (fill) {
        const unsigned long long st = total;
        const int n_s = static_cast<int>(st & kField), n_e = static_cast<int>((st >> 21) & kField),
                  n_c = static_cast<int>((st >> 42) & kField);
        const bool in_s = n_s <= kAsmStageRanges, in_e = n_e <= kAsmStageRanges,
                   in_c = n_c <= kAsmStageCols;  // CTA-uniform
        direct_len = one_seg && in_s && in_e;    // then n_s == n_e, base_s == base_e == 0
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
          if (direct_len) {
            for (int i = tid; i < n_e; i += kAsmThreads)
              out.range_len[ro + i] = stage_e[i] - stage_s[i];
          } else if (in_e) {
            for (int i = tid; i < n_e; i += kAsmThreads)
              out.range_len[ro + base_e + i] = stage_e[i];
          }
          if (in_c) {
            for (int i = tid; i < n_c; i += kAsmThreads) out.col_idx[co + base_c + i] = stage_c[i];
          }
        }
      }
      // No barrier before the next segment: it zeroes sR / sC (sC is read on here only by the
      // thread that owns the word) and writes sF and the stages only after two more barriers.
      base_s += static_cast<long long>(total & kField);
      base_e += static_cast<long long>((total >> 21) & kField);
      base_c += static_cast<long long>((total >> 42) & kField);
    }
    if (!direct_len) {
      __syncthreads();  // every range start and end of the row is written
      const int64_t n = base_s;
      for (int si = 0; si < ctx.num_slots; ++si) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        const int64_t ro = out.off_ranges[row];
        for (int64_t k = tid; k < n; k += kAsmThreads) {
          out.range_len[ro + k] -= out.range_start[ro + k];
        }
      }
    }
    if (!kRec) __syncthreads();
  }
}

template <class Src, bool kFill, bool kRec = false>
__global__ void __launch_bounds__(kAsmThreads, 2)
    AssembleKernel(Src src, int num_units, AsmOut out) {
  if constexpr (AsmUsesSpans<Src>::value) {
    // Every row was a span row (AsmOut::span_rest, counted by the count launch's span kernel).
    if (out.span_cap > 0 && out.span_rest != nullptr && *out.span_rest == 0u) return;
  }
  if constexpr (kFill) {
    AssembleFill<Src, kRec>(src, num_units, out);
  } else {
    AssembleCount<Src, kRec>(src, num_units, out);
  }
}

// Every unit's record (AsmRec) by one thread each: Src::Begin into registers / local memory.
template <class Src>
__global__ void __launch_bounds__(128)
    AssembleRecordsKernel(Src src, int num_units, uint32_t* recs) {
  const int unit = blockIdx.x * blockDim.x + threadIdx.x;
  if (unit >= num_units) return;
  AsmRec<Src> r;
  src.Begin(unit, r.sh, r.ctx);
  // Only the used slots: the header, then ctx.num_slots of them.
  const int words =
      static_cast<int>(
          (reinterpret_cast<const char*>(r.ctx.slots) - reinterpret_cast<const char*>(&r)) / 4) +
      r.ctx.num_slots;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
  uint32_t* dst = recs + static_cast<int64_t>(unit) * kAsmRecWords;
  for (int i = 0; i < words; ++i) dst[i] = w[i];
}

// ---- Span rows ------------------------------------------------------------------------------
//
// One warp per unit whose row is a span row (AsmSpanRow; the others are left to the bitmap
// kernel): the unit's record into the warp's shared slice, its spans clipped to [0, key_end)
// (empty ones dropped) as 64-bit (start << 32 | end) keys into the warp's buffer, padded with
// ~0 to a power of two >= 32 and bitonic-sorted ascending (by start, then end). Walking them in
// order with the running maximum end m of the spans before (-1 at first), a span starts a new
// range iff its start > m (a span that starts at m touches the range before: one run of keys),
// and then the range before ends at m; the last range ends at the maximum of all ends. These
// are the maximal runs of the union, i.e. what the bitmap passes find for the same range bits
// without column bits. Count pass: the ranges of each slot row (no columns). Fill pass: the
// ranges' (start, end) pairs into the buffer at their ranks (a rank never passes the index of
// the span being read, so every slot written was read before the warp's barrier), then every
// slot row's starts and lengths, coalesced.
// The steps of AssembleSpansKernel below, also called by a builder's own span kernel
// (sample_attention.cu's SaSpanCountKernel and its register sort). AsmSpanKey: span i of n as
// its sort key, (start << 32 | end) clipped to [0, key_end) (the row's ctx.key_end), or ~0
// (sorts last) past n or when the clipped span is empty. AsmSortSpans: the row's keys, sorted,
// in the warp's buffer `buf` (kAsmSpanCap keys), padded with ~0 to a power of two >= 32;
// returns that length. AsmWalkSpans: the walk over them, returning the number of ranges and the
// last range's end (*run_end); with `pairs` (else null) each range's (start, end) at
// [2r, 2r + 1]. kSyncRead: `pairs` may alias `buf` (every lane reads its chunk's key before any
// pair is written).
template <class Src>
__device__ __forceinline__ unsigned long long AsmSpanKey(const Src& src, const RowCtx& ctx,
                                                         const typename Src::Shared& sh, int i,
                                                         int n, int64_t key_end) {
  unsigned long long v = ~0ull;
  if (i < n) {
    int64_t s, e;
    src.SpanAt(ctx, sh, i, &s, &e);
    if (s < 0) s = 0;
    if (e > key_end) e = key_end;
    if (e > s) v = (static_cast<unsigned long long>(s) << 32) | static_cast<unsigned long long>(e);
  }
  return v;
}

template <class Src>
__device__ __forceinline__ int AsmSortSpans(const Src& src, const RowCtx& ctx,
                                            const typename Src::Shared& sh,
                                            unsigned long long* buf, int lane) {
  const int n = src.NumSpans(ctx, sh);
  const int64_t key_end = ctx.key_end;
  int np = 32;
  while (np < n) np <<= 1;
  for (int i = lane; i < np; i += 32) buf[i] = AsmSpanKey(src, ctx, sh, i, n, key_end);
  __syncwarp();
  for (int k = 2; k <= np; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = lane; i < np; i += 32) {
        const int l = i ^ j;
        if (l > i) {
          const unsigned long long x = buf[i], y = buf[l];
          if ((x > y) == ((i & k) == 0)) {
            buf[i] = y;
            buf[l] = x;
          }
        }
      }
      __syncwarp();
    }
  }
  return np;
}

template <bool kSyncRead>
__device__ __forceinline__ int AsmWalkSpans(const unsigned long long* buf, int np, int lane,
                                            int32_t* pairs, int* run_end_out) {
  int ranges = 0;    // ranges started before this chunk
  int run_end = -1;  // the largest end before this chunk
  for (int c0 = 0; c0 < np; c0 += 32) {
    const unsigned long long v = buf[c0 + lane];
    if (kSyncRead) __syncwarp();  // every lane has read its span before pairs are written
    const bool valid = v != ~0ull;
    const int s = static_cast<int>(v >> 32);
    const int e = valid ? static_cast<int>(v & 0xffffffffull) : -1;
    int m = e;  // inclusive prefix maximum of the ends in the chunk
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, m, d);
      if (lane >= d && o > m) m = o;
    }
    int prev = __shfl_up_sync(0xffffffffu, m, 1);  // the maximum end before this span
    if (lane == 0 || prev < run_end) prev = run_end;
    const bool starts = valid && s > prev;
    const unsigned starts_mask = __ballot_sync(0xffffffffu, starts);
    if ((kSyncRead || pairs != nullptr) && starts) {
      const int r = ranges + __popc(starts_mask & ((1u << lane) - 1u));
      pairs[2 * r] = s;
      if (r > 0) pairs[2 * r - 1] = prev;  // the range before ends at the running maximum
    }
    ranges += __popc(starts_mask);
    const int chunk_max = __shfl_sync(0xffffffffu, m, 31);
    if (chunk_max > run_end) run_end = chunk_max;
    if (__shfl_sync(0xffffffffu, v, 31) == ~0ull) break;  // the rest is padding
  }
  *run_end_out = run_end;
  return ranges;
}

constexpr int kAsmSpanWarps = 8;
template <class Src, bool kFill>
__global__ void __launch_bounds__(kAsmSpanWarps * 32)
    AssembleSpansKernel(Src src, int num_units, AsmOut out) {
  __shared__ AsmRec<Src> rec_s[kAsmSpanWarps];
  __shared__ unsigned long long buf_s[kAsmSpanWarps][kAsmSpanCap];
  constexpr int kRecWords = AsmRecCopyWords<Src, true>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned long long* const buf = buf_s[warp];
  int32_t* const pairs = reinterpret_cast<int32_t*>(buf);  // fill: range r at [2r, 2r + 1]
  uint32_t* const rw = reinterpret_cast<uint32_t*>(&rec_s[warp]);
  const int stride = gridDim.x * kAsmSpanWarps;
  for (int unit = blockIdx.x * kAsmSpanWarps + warp; unit < num_units; unit += stride) {
    __syncwarp();  // the previous row's reads of the record and the buffer are done
    for (int i = lane; i < kRecWords; i += 32) {
      rw[i] = out.rec[static_cast<int64_t>(unit) * kAsmRecWords + i];
    }
    __syncwarp();
    const RowCtx& ctx = rec_s[warp].ctx;
    const typename Src::Shared& sh = rec_s[warp].sh;
    if (!AsmSpanRow(src, ctx, sh, out)) {
      if (!kFill && lane == 0 && out.span_rest != nullptr) atomicAdd(out.span_rest, 1u);
      continue;
    }
    const int np = AsmSortSpans(src, ctx, sh, buf, lane);
    int run_end;
    const int ranges = AsmWalkSpans<kFill>(buf, np, lane, kFill ? pairs : nullptr, &run_end);
    if (!kFill) {
      if (lane < ctx.num_slots) {
        const int64_t row = static_cast<int64_t>(ctx.slots[lane]) * out.num_blocks + ctx.block;
        out.count_ranges[row] = ranges;
        out.count_cols[row] = 0;
      }
      for (int si = 32 + lane; si < ctx.num_slots; si += 32) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        out.count_ranges[row] = ranges;
        out.count_cols[row] = 0;
      }
    } else {
      if (lane == 0 && ranges > 0) pairs[2 * ranges - 1] = run_end;
      __syncwarp();
      for (int si = 0; si < ctx.num_slots; ++si) {
        const int64_t row = static_cast<int64_t>(ctx.slots[si]) * out.num_blocks + ctx.block;
        const int64_t ro = out.off_ranges[row];
        for (int r = lane; r < ranges; r += 32) {
          const int st = pairs[2 * r], en = pairs[2 * r + 1];
          out.range_start[ro + r] = st;
          out.range_len[ro + r] = en - st;
        }
      }
    }
  }
}

// The launches' span cap: `cap` (AsmOut::span_cap) lowered to SPATTN_ASM_SPAN_CAP where that is
// set (fewer span rows; 0: none, the bitmap passes only). Host; LaunchAssemble's and any
// builder's own span launches (sample_attention.cu) read it here, so both agree.
inline int AsmSpanCapFromEnv(int cap) {
  if (const char* e = std::getenv("SPATTN_ASM_SPAN_CAP"); e != nullptr && *e != '\0') {
    const int c = std::atoi(e);
    return c < 0 ? 0 : (c < cap ? c : cap);
  }
  return cap;
}
// The current device's SM count (the launches' grid sizes).
inline cudaError_t AsmSmCount(int* sms) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

template <class Src>
cudaError_t LaunchAssemble(const Src& src, int num_units, const AsmOut& out, bool fill,
                           cudaStream_t stream) {
  if (num_units <= 0) return cudaSuccess;
  int sms = 0;
  cudaError_t err = AsmSmCount(&sms);
  if (err != cudaSuccess) return err;
  const int grid = num_units < sms * 8 ? num_units : sms * 8;
  if constexpr (AsmUsesRecords<Src>::value) {
    if (out.rec == nullptr) return cudaErrorInvalidValue;
    AsmOut o = out;
    if constexpr (AsmUsesSpans<Src>::value) {
      o.span_cap = AsmSpanCapFromEnv(o.span_cap);
    } else {
      o.span_cap = 0;
    }
    const int span_grid = (num_units + kAsmSpanWarps - 1) / kAsmSpanWarps < sms * 16
                              ? (num_units + kAsmSpanWarps - 1) / kAsmSpanWarps
                              : sms * 16;
    if (!fill) {
      AssembleRecordsKernel<Src>
          <<<(num_units + 127) / 128, 128, 0, stream>>>(src, num_units, o.rec);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
      if constexpr (AsmUsesSpans<Src>::value) {
        if (o.span_cap > 0) {
          if (o.span_rest != nullptr &&
              (err = cudaMemsetAsync(o.span_rest, 0, sizeof(uint32_t), stream)) != cudaSuccess) {
            return err;
          }
          AssembleSpansKernel<Src, false>
              <<<span_grid, kAsmSpanWarps * 32, 0, stream>>>(src, num_units, o);
          if ((err = cudaGetLastError()) != cudaSuccess) return err;
        }
      }
      AssembleKernel<Src, false, true><<<grid, kAsmThreads, 0, stream>>>(src, num_units, o);
      return cudaGetLastError();
    }
    if constexpr (AsmUsesSpans<Src>::value) {
      if (o.span_cap > 0) {
        AssembleSpansKernel<Src, true>
            <<<span_grid, kAsmSpanWarps * 32, 0, stream>>>(src, num_units, o);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
      }
    }
    err = cudaFuncSetAttribute(AssembleKernel<Src, true, true>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kAsmStageBytes);
    if (err != cudaSuccess) return err;
    AssembleKernel<Src, true, true>
        <<<grid, kAsmThreads, kAsmStageBytes, stream>>>(src, num_units, o);
    return cudaGetLastError();
  } else {
    if (!fill) {
      AssembleKernel<Src, false><<<grid, kAsmThreads, 0, stream>>>(src, num_units, out);
      return cudaGetLastError();
    }
    err = cudaFuncSetAttribute(AssembleKernel<Src, true>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kAsmStageBytes);
    if (err != cudaSuccess) return err;
    AssembleKernel<Src, true><<<grid, kAsmThreads, kAsmStageBytes, stream>>>(src, num_units, out);
    return cudaGetLastError();
  }
}

}  // namespace row_assembly
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_CUH_
