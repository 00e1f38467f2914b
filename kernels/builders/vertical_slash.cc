#include "kernels/builders/vertical_slash.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "kernels/builders/estimate.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {

absl::Status SelectVerticalSlashLines(const AttentionProblem& problem,
                                      const VerticalSlashParams& params, int q_head, int seq,
                                      VerticalSlashLines* out) {
  out->columns.clear();
  out->offsets.clear();
  const int ql = problem.q_len(seq), kl = problem.k_len(seq);
  if (ql <= 0 || kl <= 0) return absl::OkStatus();
  // Alg. 2: A = softmax(Q[-last_q:] K^T / sqrt(d) + causal mask) over this sequence only.
  const int n = std::min(params.last_q, ql);
  const int row_begin = ql - n;
  std::vector<float> probs;
  RowAttention(problem, seq, q_head, row_begin, ql, &probs);
  std::vector<double> vertical = SumColumns(probs.data(), n, kl);
  DiagonalSums slash = SumDiagonals(problem, seq, row_begin, ql, probs.data());
  probs = std::vector<float>();

  // Forced lines rank first: an infinite score keeps them inside the top-k (so they count
  // towards vertical_size / slash_size, and are kept even when those are smaller).
  constexpr double kForced = std::numeric_limits<double>::infinity();
  const int forced_cols = std::min(params.forced_columns, kl);
  for (int j = 0; j < forced_cols; ++j) vertical[j] = kForced;
  // The forced_diagonals offsets nearest the main diagonal: 0, 1, 2, ... (and, without the
  // causal mask, the ones above it: -1, -2, ...), by |offset| with ties to the lower one.
  int forced_diags = 0;
  auto force = [&](int o) {
    if (forced_diags < params.forced_diagonals && o >= slash.min_offset &&
        o <= slash.max_offset()) {
      slash.sums[o - slash.min_offset] = kForced;
      ++forced_diags;
    }
  };
  const int reach = std::max(slash.max_offset(), -slash.min_offset);
  for (int dist = 0; dist <= reach && forced_diags < params.forced_diagonals; ++dist) {
    force(dist);
    if (dist > 0) force(-dist);
  }

  out->columns = TopK(vertical.data(), kl, std::max(params.vertical_size, forced_cols));
  std::sort(out->columns.begin(), out->columns.end());
  const std::vector<int32_t> top_s =
      TopK(slash.sums.data(), slash.num_offsets(), std::max(params.slash_size, forced_diags));
  out->offsets.reserve(top_s.size());
  for (int32_t i : top_s) out->offsets.push_back(i + slash.min_offset);
  std::sort(out->offsets.begin(), out->offsets.end(), std::greater<int32_t>());
  return absl::OkStatus();
}

absl::Status BuildVerticalSlashIndex(const AttentionProblem& problem,
                                     const VerticalSlashParams& params,
                                     const std::vector<int>& heads, int block_m, SparseIndex* out) {
  MethodConfig config;
  config.method = Method::kVerticalSlash;
  config.vertical_slash = params;
  SPATTN_RETURN_IF_ERROR(config.Validate());
  SPATTN_RETURN_IF_ERROR(CheckBuilderInputs(problem, heads, "block_m", block_m));
  InitSparseIndex(problem, heads, block_m, out);
  const int batch = problem.batch();
  // Per (head slot, sequence): the selected lines. k_v + k_s integers each.
  std::vector<VerticalSlashLines> lines(heads.size() * static_cast<size_t>(batch));
  ParallelFor(static_cast<int64_t>(lines.size()), [&](int64_t u) {
    const int slot = static_cast<int>(u / batch), seq = static_cast<int>(u % batch);
    // Cannot fail: inputs were checked above.
    SelectVerticalSlashLines(problem, params, heads[slot], seq, &lines[u]).IgnoreError();
  });
  // Alg. 4 per (head slot, query block): slash lines -> ranges, vertical lines -> columns.
  std::vector<RowKeys> rows(out->num_rows());
  const int nblocks = out->num_blocks();
  ParallelFor(out->num_rows(), [&](int64_t r) {
    const int slot = static_cast<int>(r / nblocks), blk = static_cast<int>(r % nblocks);
    const BlockGeometry g = GetBlockGeometry(problem, *out, blk);
    const VerticalSlashLines& l = lines[static_cast<size_t>(slot) * batch + g.seq];
    AddVerticalSlash(g, l.offsets, l.columns, &rows[r]);
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
