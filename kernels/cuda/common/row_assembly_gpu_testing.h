// A test entry to the bitmap row assembler (row_assembly.cuh) with rows given as key bitmaps, so
// a test can reach paths no builder's rows reach on demand (the fill pass's segments with more
// range starts / ends or columns than its shared-memory stage holds). Only code under
// kernels/cuda includes this.
#ifndef SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_GPU_TESTING_H_
#define SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_GPU_TESTING_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace spattn {
namespace row_assembly {

// Row u holds key_end[u] keys; its "range" and "column" bitmaps are words [word_off[u],
// word_off[u + 1]) of range_words / col_words (32 keys a word, key k at bit k % 32 of word k /
// 32; bits at or past key_end are set on purpose by callers and must be ignored). Assembles
// every row for `num_slots` head slots (index row slot * rows + u, the same keys) with a count
// pass, a host scan and a fill pass, and returns the CSR arrays: off_* [slots * rows + 1],
// range_start / range_len, col_idx. Synchronous, on the current device. `records`: through the
// assembler's row records (AsmOut::rec; the path the sample_attention and anchor builders take).
// `keep`: with kept words (AsmOut::keep) for the first two thirds of the rows, at the second
// longest row's stride (rows longer than that, and the last third, take the bitmaps).
struct AssembledForTest {
  std::vector<int64_t> off_ranges, off_cols;
  std::vector<int32_t> range_start, range_len, col_idx;
};
cudaError_t AssembleBitmapRowsForTest(const std::vector<int>& key_end,
                                      const std::vector<int64_t>& word_off,
                                      const std::vector<uint32_t>& range_words,
                                      const std::vector<uint32_t>& col_words, int num_slots,
                                      AssembledForTest* out, bool records = false,
                                      bool keep = false);

// Rows given as key spans (the span rows of row_assembly.cuh): row u holds key_end[u] keys and
// the spans [span_off[u], span_off[u + 1]) of starts / ends (any order; they may reach before key
// 0 or past key_end, or be empty). Its range bits are their union (no columns). Assembled
// through the row records with AsmOut::span_cap = span_cap: rows with at most span_cap spans
// take the span kernel, the others the bitmap passes (their SetBits ORs the same spans; 0: every
// row on the bitmaps). `rest_word`: with AsmOut::span_rest (the bitmap launches return at once
// when no row is theirs). Same output form as above.
cudaError_t AssembleSpanRowsForTest(const std::vector<int>& key_end,
                                    const std::vector<int64_t>& span_off,
                                    const std::vector<int64_t>& starts,
                                    const std::vector<int64_t>& ends, int num_slots, int span_cap,
                                    bool rest_word, AssembledForTest* out);

}  // namespace row_assembly
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_GPU_TESTING_H_
