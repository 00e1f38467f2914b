#include "kernels/builders/simple_patterns.h"

namespace spattn {
namespace {

// Builds every row with `fill(geometry, row)`; the pattern is the same for all heads, so one
// head's rows are built and their CSR arrays repeated for the other slots (long contexts have
// tens of thousands of rows per request).
template <typename Fill>
absl::Status BuildStatic(const AttentionProblem& problem, const std::vector<int>& heads,
                         int block_m, Fill fill, SparseIndex* out) {
  InitSparseIndex(problem, heads, block_m, out);
  const int nblocks = out->num_blocks();
  std::vector<RowKeys> rows(nblocks);
  for (int b = 0; b < nblocks; ++b) {
    const BlockGeometry g = GetBlockGeometry(problem, *out, b);
    fill(g, &rows[b]);
    rows[b].Normalize(g.key_end);
  }
  SparseIndex one;
  CompactRows(&rows, &one);
  const int nslots = out->num_heads();
  const int32_t ranges = one.range_indptr[nblocks], cols = one.col_indptr[nblocks];
  out->range_indptr.assign(static_cast<size_t>(nslots) * nblocks + 1, 0);
  out->col_indptr.assign(static_cast<size_t>(nslots) * nblocks + 1, 0);
  out->range_start.reserve(static_cast<size_t>(nslots) * ranges);
  out->range_len.reserve(static_cast<size_t>(nslots) * ranges);
  out->col_idx.reserve(static_cast<size_t>(nslots) * cols);
  for (int s = 0; s < nslots; ++s) {
    for (int b = 0; b < nblocks; ++b) {
      out->range_indptr[out->row(s, b) + 1] = s * ranges + one.range_indptr[b + 1];
      out->col_indptr[out->row(s, b) + 1] = s * cols + one.col_indptr[b + 1];
    }
    out->range_start.insert(out->range_start.end(), one.range_start.begin(), one.range_start.end());
    out->range_len.insert(out->range_len.end(), one.range_len.begin(), one.range_len.end());
    out->col_idx.insert(out->col_idx.end(), one.col_idx.begin(), one.col_idx.end());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildDenseIndex(const AttentionProblem& problem, const std::vector<int>& heads,
                             int block_m, SparseIndex* out) {
  return BuildStatic(
      problem, heads, block_m,
      [](const BlockGeometry& g, RowKeys* row) { row->AddRange(0, g.key_end); }, out);
}

absl::Status BuildAShapeIndex(const AttentionProblem& problem, const AShapeParams& params,
                              const std::vector<int>& heads, int block_m, SparseIndex* out) {
  return BuildStatic(
      problem, heads, block_m,
      [&](const BlockGeometry& g, RowKeys* row) {
        row->AddRange(0, params.sink_tokens);
        row->AddRange(int64_t{g.first_pos} - params.local_tokens + 1, g.last_pos + 1);
      },
      out);
}

}  // namespace spattn
