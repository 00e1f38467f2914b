// Word-level bit logic of the GPU builders' row assembler (assembled_common.cuh), shared by the
// kernel and its CPU test: a row's keys are a bitmap of 32-key words; "range" bits and "column"
// bits become the SparseIndex row RowKeys::Normalize would make. Plain functions, no state.
#ifndef SPATTN_KERNELS_CUDA_COMMON_ROW_BITS_H_
#define SPATTN_KERNELS_CUDA_COMMON_ROW_BITS_H_

#include <cstdint>

#ifdef __CUDACC__
#define SPATTN_BITS_FN __host__ __device__ __forceinline__
#else
#define SPATTN_BITS_FN inline
#endif

namespace spattn {
namespace cuda {

// Bits of key word `word` (keys 32 word .. 32 word + 31) below key_end; 0 for words before 0 or
// past the end.
SPATTN_BITS_FN uint32_t WordMask(int64_t word, int key_end) {
  if (word < 0) return 0u;
  const int64_t lo = word * 32;
  if (lo >= key_end) return 0u;
  if (lo + 32 <= key_end) return 0xffffffffu;
  return (1u << static_cast<int>(key_end - lo)) - 1u;
}

// Bits of word `word` inside the key span [start, end) (0 when they do not meet).
SPATTN_BITS_FN uint32_t SpanBits(int64_t word, int64_t start, int64_t end) {
  const int64_t a = start > word * 32 ? start - word * 32 : 0;
  const int64_t b = end < word * 32 + 32 ? end - word * 32 : 32;
  if (a >= b) return 0u;
  return (b == 32 ? 0xffffffffu : ((1u << b) - 1u)) & ~((1u << a) - 1u);
}

// Bits of `cur` that lie in a run of >= 16 consecutive set bits of the bit stream prev|cur|next
// (prev holds the 32 keys before cur, next the 32 after): RowKeys::Normalize's min_run of 16.
SPATTN_BITS_FN uint32_t LongRuns16(uint32_t prev, uint32_t cur, uint32_t next) {
  // v = stream bits [16, 80): prev's high half, cur, next's low half.
  const uint64_t v = static_cast<uint64_t>(prev >> 16) | (static_cast<uint64_t>(cur) << 16) |
                     (static_cast<uint64_t>(next & 0xffffu) << 48);
  uint64_t e = v & (v >> 1);  // bit p: v[p .. p+15] all set (valid for p <= 48)
  e &= e >> 2;
  e &= e >> 4;
  e &= e >> 8;
  uint64_t d = e | (e << 1);  // bit q: some run of 16 starts in [q - 15, q]
  d |= d << 2;
  d |= d << 4;
  d |= d << 8;
  return static_cast<uint32_t>(d >> 16);
}

// The final bits of one word from its range bits r and column bits c and those of its two
// neighbours: f = keys in ranges (the given ranges and long column runs), cols = gathered keys.
SPATTN_BITS_FN void FinalBits(uint32_t r_prev, uint32_t c_prev, uint32_t r, uint32_t c,
                              uint32_t r_next, uint32_t c_next, uint32_t* f, uint32_t* cols) {
  const uint32_t kp = c_prev & ~r_prev, kc = c & ~r, kn = c_next & ~r_next;
  const uint32_t l = LongRuns16(kp, kc, kn);
  *f = r | l;
  *cols = kc & ~l;
}

// Range starts (bit b: a range starts at key b) and ends (bit b: a range ends at key b,
// exclusive) of word f given the previous word of the stream.
SPATTN_BITS_FN void RangeEvents(uint32_t f_prev, uint32_t f, uint32_t* starts, uint32_t* ends) {
  const uint32_t shifted = (f << 1) | (f_prev >> 31);  // bit b: key b - 1 is in a range
  *starts = f & ~shifted;
  *ends = ~f & shifted;
}

}  // namespace cuda
}  // namespace spattn

#undef SPATTN_BITS_FN

#endif  // SPATTN_KERNELS_CUDA_COMMON_ROW_BITS_H_
