#include "kernels/builders/block_sparse.h"

#include <algorithm>
#include <limits>

#include "kernels/builders/estimate.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {

absl::Status BuildBlockSparseIndex(const AttentionProblem& problem, const BlockSparseParams& params,
                                   const std::vector<int>& heads, SparseIndex* out) {
  MethodConfig config;
  config.method = Method::kBlockSparse;
  config.block_sparse = params;
  SPATTN_RETURN_IF_ERROR(config.Validate());
  const int bs = params.block_size;
  SPATTN_RETURN_IF_ERROR(CheckBuilderInputs(problem, heads, "block_sparse.block_size", bs));
  InitSparseIndex(problem, heads, bs, out);
  const int batch = problem.batch();
  const int d = problem.head_dim;
  const PooledKeys pooled_k(problem, bs);
  std::vector<RowKeys> rows(out->num_rows());
  ParallelFor(static_cast<int64_t>(heads.size()) * batch, [&](int64_t u) {
    const int slot = static_cast<int>(u / batch), seq = static_cast<int>(u % batch);
    const int ql = problem.q_len(seq);
    if (ql == 0) return;
    const int q_head = heads[slot];
    std::vector<float> pooled_q;
    MeanPool(problem, problem.q, q_head, problem.cu_seqlens_q[seq], ql, bs, &pooled_q);
    for (float& x : pooled_q) x *= problem.softmax_scale;
    const float* kt = pooled_k.at(seq, problem.kv_head_of(q_head));
    const int nk = pooled_k.num_blocks(seq);
    std::vector<float> logits(nk);
    std::vector<double> scores(nk);
    for (int blk = out->block_offsets[seq]; blk < out->block_offsets[seq + 1]; ++blk) {
      const BlockGeometry g = GetBlockGeometry(problem, *out, blk);
      const int visible = problem.causal ? std::min(nk, g.last_pos / bs + 1) : nk;
      const float* q = &pooled_q[static_cast<size_t>(blk - out->block_offsets[seq]) * d];
      ColumnDots(q, d, kt, pooled_k.stride(seq), visible, logits.data());
      for (int j = 0; j < visible; ++j) scores[j] = logits[j];
      // Diagonal blocks first: they hold the block's own positions.
      const int diag_first = g.first_pos / bs, diag_last = std::min(visible - 1, g.last_pos / bs);
      for (int j = diag_first; j <= diag_last; ++j) {
        scores[j] = std::numeric_limits<double>::infinity();
      }
      const int forced = std::max(0, diag_last - diag_first + 1);
      RowKeys& row = rows[out->row(slot, blk)];
      for (int32_t j : TopK(scores.data(), visible, std::max(params.top_k, forced))) {
        row.AddRange(int64_t{j} * bs, (int64_t{j} + 1) * bs);
      }
      row.Normalize(g.key_end);
    }
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
