#include "kernels/builders/simple_patterns.h"

namespace spattn {
namespace {

// Builds every row with `fill(geometry, row)`; the pattern is the same for all heads.
template <typename Fill>
absl::Status BuildStatic(const AttentionProblem& problem, const std::vector<int>& heads,
                         int block_m, Fill fill, SparseIndex* out) {
  InitSparseIndex(problem, heads, block_m, out);
  const int nblocks = out->num_blocks();
  std::vector<RowKeys> rows(out->num_rows());
  for (int b = 0; b < nblocks; ++b) {
    const BlockGeometry g = GetBlockGeometry(problem, *out, b);
    RowKeys row;
    fill(g, &row);
    row.Normalize(g.key_end);
    for (int s = 0; s < out->num_heads(); ++s) rows[out->row(s, b)] = row;
  }
  CompactRows(&rows, out);
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
