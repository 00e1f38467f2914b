#include "kernels/builders/sample_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int kRowTile = 32;   // sampled rows scored together
constexpr int kKeyTile = 256;  // keys converted per step

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One chunk of one (head slot, sequence): its rows and the blocks its sample selected.
struct ChunkSelection {
  int row_begin = 0;  // query rows [row_begin, row_end) of the sequence
  int row_end = 0;
  std::vector<int32_t> col_blocks;    // key blocks j / blk
  std::vector<int32_t> slash_blocks;  // signed diagonal blocks floor((pos - j) / blk)
};

// The smallest set of entries whose sum reaches `alpha` of the total: entries sorted by score,
// descending, ties to the lower index (find_k + arg_topk of Algorithm 1). Returns indices.
std::vector<int32_t> CraSelect(const std::vector<double>& scores, double alpha) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  });
  double total = 0;
  for (int32_t i : order) total += scores[i];
  std::vector<int32_t> chosen;
  if (!(total > 0)) return chosen;
  const double target = alpha * total;
  double cum = 0;
  for (int32_t i : order) {
    if (scores[i] <= 0) break;
    cum += scores[i];
    chosen.push_back(i);
    if (cum >= target) break;
  }
  return chosen;
}

// Stage 1 + 2 for one chunk: exact softmax of the chunk's sampled rows, block-reduced along
// columns and slashes, then CRA-filtered.
void SelectChunk(const AttentionProblem& p, const SampleAttentionParams& params, int q_head,
                 int seq, ChunkSelection* chunk) {
  const int blk = params.block_size;
  const int d = p.head_dim;
  const int kl = p.k_len(seq);
  const int kvh = p.kv_head_of(q_head);
  const int64_t qtok0 = p.cu_seqlens_q[seq], ktok0 = p.cu_seqlens_k[seq];
  const int s1 = chunk->row_end;
  const int s0 = std::max(0, s1 - blk);

  const int64_t n_col = (kl + blk - 1) / blk;
  const int64_t sb_min = p.causal ? 0 : FloorDiv(-(kl - 1), blk);
  const int64_t n_slash = FloorDiv(kl - 1, blk) - sb_min + 1;
  std::vector<double> col(n_col, 0.0), slash(n_slash, 0.0);

  std::vector<float> q(static_cast<size_t>(kRowTile) * d), kt(static_cast<size_t>(d) * kKeyTile);
  std::vector<float> scratch, buf;
  const float scale = p.softmax_scale;
  for (int r0 = s0; r0 < s1; r0 += kRowTile) {
    const int rt = std::min(kRowTile, s1 - r0);
    const int n_keys = p.causal ? p.query_pos(seq, r0 + rt - 1) + 1 : kl;
    LoadRows(p, p.q, qtok0, q_head, r0, rt, q.data());
    for (int i = 0; i < rt * d; ++i) q[i] *= scale;
    buf.resize(static_cast<size_t>(rt) * n_keys);
    for (int j0 = 0; j0 < n_keys; j0 += kKeyTile) {
      const int n = std::min(kKeyTile, n_keys - j0);
      LoadRowsTransposed(p, p.k, ktok0, kvh, j0, n, kt.data(), n, &scratch);
      Sgemm(rt, n, d, q.data(), d, kt.data(), n, false, buf.data() + j0, n_keys);
    }
    for (int r = 0; r < rt; ++r) {
      const int64_t pos = p.query_pos(seq, r0 + r);
      const int limit = p.causal ? static_cast<int>(pos) + 1 : kl;
      float* s = buf.data() + static_cast<size_t>(r) * n_keys;
      float mx = -INFINITY;
      for (int j = 0; j < limit; ++j) mx = s[j] > mx ? s[j] : mx;
      if (!std::isfinite(mx)) continue;  // NaN/Inf input: this row says nothing.
      for (int j = 0; j < limit; ++j) s[j] = ExpApprox(s[j] - mx);
      auto range_sum = [&](int64_t a, int64_t b) {
        double acc = 0;
        for (int64_t j = a; j < b; ++j) acc += s[j];
        return acc;
      };
      const double total = range_sum(0, limit);
      if (!std::isfinite(total) || !(total > 0)) continue;
      const double inv = 1.0 / total;
      for (int64_t cb = 0; cb * blk < limit; ++cb) {
        col[cb] += range_sum(cb * blk, std::min<int64_t>(limit, (cb + 1) * blk)) * inv;
      }
      // Diagonal offsets t = pos - j over j in [0, limit): blocks floor(t / blk).
      const int64_t sb_lo = FloorDiv(pos - (limit - 1), blk), sb_hi = FloorDiv(pos, blk);
      for (int64_t sb = sb_lo; sb <= sb_hi; ++sb) {
        const int64_t a = std::max<int64_t>(0, pos - (sb + 1) * blk + 1);
        const int64_t b = std::min<int64_t>(limit, pos - sb * blk + 1);
        if (a < b) slash[sb - sb_min] += range_sum(a, b) * inv;
      }
    }
  }
  chunk->col_blocks = CraSelect(col, params.alpha_c);
  chunk->slash_blocks = CraSelect(slash, params.alpha_s);
  for (int32_t& sb : chunk->slash_blocks) sb = static_cast<int32_t>(sb + sb_min);
}

}  // namespace

absl::Status BuildSampleAttentionIndex(const AttentionProblem& problem,
                                       const SampleAttentionParams& params,
                                       const std::vector<int>& heads, SparseIndex* out) {
  SPATTN_RETURN_IF_ERROR(problem.Validate());
  const int blk = params.block_size;
  InitSparseIndex(problem, heads, blk, out);
  const int nb = problem.batch();
  const int nslots = out->num_heads();

  // Chunks of every (slot, sequence): chunk c of sequence b owns rows
  // [floor(c q_len / n), floor((c+1) q_len / n)) with n = chunk_n capped at the sequence's
  // number of query blocks (shorter chunks would only re-sample overlapping rows).
  std::vector<std::vector<ChunkSelection>> chunks(static_cast<size_t>(nslots) * nb);
  struct Unit {
    int slot, seq, chunk;
  };
  std::vector<Unit> units;
  for (int s = 0; s < nslots; ++s) {
    for (int b = 0; b < nb; ++b) {
      const int ql = problem.q_len(b);
      auto& list = chunks[static_cast<size_t>(s) * nb + b];
      const int n = std::min(params.chunk_n, (ql + blk - 1) / blk);
      int begin = 0;
      for (int c = 1; c <= n; ++c) {
        const int end = static_cast<int>(static_cast<int64_t>(c) * ql / n);
        if (end > begin) {
          ChunkSelection sel;
          sel.row_begin = begin;
          sel.row_end = end;
          list.push_back(std::move(sel));
          begin = end;
        }
      }
      for (int c = 0; c < static_cast<int>(list.size()); ++c) units.push_back({s, b, c});
    }
  }
  ParallelFor(static_cast<int64_t>(units.size()), [&](int64_t u) {
    const Unit& unit = units[u];
    SelectChunk(problem, params, out->heads[unit.slot], unit.seq,
                &chunks[static_cast<size_t>(unit.slot) * nb + unit.seq][unit.chunk]);
  });

  // Merge: each query block takes the selections of the chunks its rows belong to.
  const int nblocks = out->num_blocks();
  std::vector<RowKeys> rows(out->num_rows());
  ParallelFor(static_cast<int64_t>(nslots) * nblocks, [&](int64_t r) {
    const int s = static_cast<int>(r / nblocks), b = static_cast<int>(r % nblocks);
    const BlockGeometry g = GetBlockGeometry(problem, *out, b);
    RowKeys& row = rows[out->row(s, b)];
    for (const ChunkSelection& c : chunks[static_cast<size_t>(s) * nb + g.seq]) {
      if (c.row_end <= g.q_begin || c.row_begin >= g.q_end) continue;
      for (int32_t cb : c.col_blocks) row.AddRange(int64_t{cb} * blk, int64_t{cb + 1} * blk);
      for (int32_t sb : c.slash_blocks) {
        row.AddRange(int64_t{g.first_pos} - int64_t{sb + 1} * blk + 1,
                     int64_t{g.last_pos} - int64_t{sb} * blk + 1);
      }
    }
    if (params.local_tokens > 0) {
      row.AddRange(int64_t{g.first_pos} - params.local_tokens + 1, int64_t{g.last_pos} + 1);
    }
    row.Normalize(g.key_end);
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
