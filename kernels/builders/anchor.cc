#include "kernels/builders/anchor.h"

#include <algorithm>
#include <cmath>

#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int kKeyTile = 256;  // stripe candidates scored per step

// Builds the rows of the query blocks of group `group` of (slot, seq).
void BuildGroup(const AttentionProblem& p, const AnchorParams& params, const SparseIndex& index,
                int slot, int seq, int group, std::vector<RowKeys>* rows) {
  const int bm = params.block_size, d = p.head_dim;
  const int q_head = index.heads[slot], kvh = p.kv_head_of(q_head);
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  const int64_t qtok0 = p.cu_seqlens_q[seq], ktok0 = p.cu_seqlens_k[seq];
  const float scale = p.softmax_scale;
  const int nqb = (ql + bm - 1) / bm;
  const int qb0 = static_cast<int>(int64_t{group} * params.step);
  const int qb1 = static_cast<int>(std::min<int64_t>(nqb, int64_t{group + 1} * params.step));
  const int row0 = qb0 * bm, row_end = std::min(ql, qb1 * bm);
  const int gfp = p.query_pos(seq, row0), glp = p.query_pos(seq, row_end - 1);
  const int init_end = std::min(params.init_tokens, kl);

  // Anchor keys: R1 = [0, min(init_end, gfp)) then R2 = [gfp, r2_end): the init keys and the
  // local window without overlap. Causal rows never see past glp.
  const int r1 = std::min(init_end, gfp);
  const int r2_end = p.causal ? glp + 1 : std::min(kl, std::max(init_end, glp + 1));
  const int n_anchor = r1 + (r2_end - gfp);
  std::vector<float> kt(static_cast<size_t>(d) * n_anchor), scratch;
  LoadRowsTransposed(p, p.k, ktok0, kvh, 0, r1, kt.data(), n_anchor, &scratch);
  LoadRowsTransposed(p, p.k, ktok0, kvh, gfp, r2_end - gfp, kt.data() + r1, n_anchor, &scratch);

  const int nq = qb1 - qb0;
  std::vector<float> qbar(static_cast<size_t>(nq) * d, 0.f);  // pooled, scaled queries
  std::vector<float> xa_bar(nq);                              // pooled anchors
  std::vector<float> q(static_cast<size_t>(bm) * d), sc;
  for (int qb = qb0; qb < qb1; ++qb) {
    const int b0 = qb * bm, m = std::min(ql, b0 + bm) - b0;
    LoadRows(p, p.q, qtok0, q_head, b0, m, q.data());
    float* qmean = &qbar[static_cast<size_t>(qb - qb0) * d];
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < d; ++c) {
        q[static_cast<size_t>(i) * d + c] *= scale;
        qmean[c] += q[static_cast<size_t>(i) * d + c];
      }
    }
    for (int c = 0; c < d; ++c) qmean[c] /= m;
    // Causal: the block's rows see R2 only up to its last position.
    const int last = p.query_pos(seq, b0 + m - 1);
    const int n = p.causal ? r1 + (last + 1 - gfp) : n_anchor;
    sc.resize(static_cast<size_t>(m) * n);
    Sgemm(m, n, d, q.data(), d, kt.data(), n_anchor, false, sc.data(), n);
    double sum = 0;
    for (int i = 0; i < m; ++i) {
      const int visible = p.causal ? r1 + (p.query_pos(seq, b0 + i) + 1 - gfp) : n;
      const float* s = &sc[static_cast<size_t>(i) * n];
      float mx = -INFINITY;
      for (int j = 0; j < visible; ++j) mx = s[j] > mx ? s[j] : mx;
      sum += mx;
    }
    xa_bar[qb - qb0] = static_cast<float>(sum / m);
  }

  // Stripe candidates: between the init keys and the local window (and, without causality,
  // after the local window). A key is kept for the group when any pooled query is within theta
  // of its pooled anchor.
  std::vector<int32_t> cols;
  std::vector<float> kt2(static_cast<size_t>(d) * kKeyTile), s2;
  auto scan = [&](int begin, int end) {
    for (int j0 = begin; j0 < end; j0 += kKeyTile) {
      const int n = std::min(kKeyTile, end - j0);
      LoadRowsTransposed(p, p.k, ktok0, kvh, j0, n, kt2.data(), n, &scratch);
      s2.resize(static_cast<size_t>(nq) * n);
      Sgemm(nq, n, d, qbar.data(), d, kt2.data(), n, false, s2.data(), n);
      for (int j = 0; j < n; ++j) {
        for (int b = 0; b < nq; ++b) {
          if (xa_bar[b] - s2[static_cast<size_t>(b) * n + j] <= params.theta) {
            cols.push_back(j0 + j);
            break;
          }
        }
      }
    }
  };
  scan(init_end, gfp);
  if (!p.causal) scan(std::max(init_end, r2_end), kl);

  for (int qb = qb0; qb < qb1; ++qb) {
    const int block = index.block_offsets[seq] + qb;
    const BlockGeometry g = GetBlockGeometry(p, index, block);
    RowKeys& row = (*rows)[index.row(slot, block)];
    row.AddRange(0, init_end);
    row.AddRange(gfp, glp + 1);
    row.cols = cols;
    row.Normalize(g.key_end);
  }
}

}  // namespace

absl::Status BuildAnchorIndex(const AttentionProblem& problem, const AnchorParams& params,
                              const std::vector<int>& heads, SparseIndex* out) {
  SPATTN_RETURN_IF_ERROR(problem.Validate());
  InitSparseIndex(problem, heads, params.block_size, out);
  struct Unit {
    int slot, seq, group;
  };
  std::vector<Unit> units;
  const int64_t span = int64_t{params.block_size} * params.step;  // query rows per group
  for (int s = 0; s < out->num_heads(); ++s) {
    for (int b = 0; b < problem.batch(); ++b) {
      const int groups = static_cast<int>((problem.q_len(b) + span - 1) / span);
      for (int g = 0; g < groups; ++g) units.push_back({s, b, g});
    }
  }
  std::vector<RowKeys> rows(out->num_rows());
  ParallelFor(static_cast<int64_t>(units.size()), [&](int64_t u) {
    BuildGroup(problem, params, *out, units[u].slot, units[u].seq, units[u].group, &rows);
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
