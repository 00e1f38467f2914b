#include "kernels/builders/sampled_lines.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/builders/estimate.h"
#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int kKeyTile = 256;  // keys converted per step

// Exact causal softmax of query rows `rows` (within sequence `seq`) of q head `q_head`: probs
// [rows.size(), k_len], 0 beyond each row's visible keys; fp32 logits, double normalization.
// A row with no finite logit is all zero (it says nothing).
void SampledRowProbs(const AttentionProblem& p, int seq, int q_head, const std::vector<int>& rows,
                     std::vector<float>* probs) {
  const int n = static_cast<int>(rows.size());
  const int kl = p.k_len(seq), d = p.head_dim;
  probs->assign(static_cast<size_t>(n) * kl, 0.f);
  if (n == 0 || kl == 0) return;
  const int64_t qtok0 = p.cu_seqlens_q[seq], ktok0 = p.cu_seqlens_k[seq];
  std::vector<float> q(static_cast<size_t>(n) * d), kt(static_cast<size_t>(d) * kKeyTile), scratch;
  for (int i = 0; i < n; ++i) {
    LoadRows(p, p.q, qtok0, q_head, rows[i], 1, q.data() + static_cast<size_t>(i) * d);
  }
  for (float& x : q) x *= p.softmax_scale;
  int key_end = kl;
  if (p.causal) key_end = p.query_pos(seq, *std::max_element(rows.begin(), rows.end())) + 1;
  const int kvh = p.kv_head_of(q_head);
  for (int j0 = 0; j0 < key_end; j0 += kKeyTile) {
    const int m = std::min(kKeyTile, key_end - j0);
    LoadRowsTransposed(p, p.k, ktok0, kvh, j0, m, kt.data(), m, &scratch);
    Sgemm(n, m, d, q.data(), d, kt.data(), m, false, probs->data() + j0, kl);
  }
  for (int i = 0; i < n; ++i) {
    float* row = probs->data() + static_cast<size_t>(i) * kl;
    const int visible = p.causal ? p.query_pos(seq, rows[i]) + 1 : kl;
    float mx = -INFINITY;
    for (int j = 0; j < visible; ++j) {
      float x = row[j];
      if (std::isnan(x)) x = -INFINITY;
      if (x == INFINITY) x = std::numeric_limits<float>::max();
      row[j] = x;
      mx = std::max(mx, x);
    }
    std::fill(row + visible, row + kl, 0.f);
    if (mx == -INFINITY) {
      std::fill(row, row + visible, 0.f);
      continue;
    }
    double sum = 0;
    for (int j = 0; j < visible; ++j) {
      row[j] = ExpApprox(row[j] - mx);
      sum += row[j];
    }
    const double inv = 1.0 / sum;
    for (int j = 0; j < visible; ++j) row[j] = static_cast<float>(row[j] * inv);
  }
}

// Line evidence of one (head slot, sequence) from its last rows: step 2.
struct LineEvidence {
  int min_offset = 0;       // offset of diag[0]
  std::vector<float> col;   // [k_len] V(j)
  std::vector<float> diag;  // [num offsets] D(o)
};

LineEvidence EstimateLines(const AttentionProblem& p, int seq, int q_head, int last_q) {
  LineEvidence ev;
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  const int n = std::min(last_q, ql);
  if (n <= 0 || kl <= 0) return ev;
  std::vector<float> probs;
  RowAttention(p, seq, q_head, ql - n, ql, &probs);
  const std::vector<double> col = SumColumns(probs.data(), n, kl);
  const DiagonalSums diag = SumDiagonals(p, seq, ql - n, ql, probs.data());
  const int fp = p.query_pos(seq, ql - n), lp = p.query_pos(seq, ql - 1);
  ev.min_offset = diag.min_offset;
  ev.col.resize(kl);
  for (int j = 0; j < kl; ++j) {
    const int cnt = SampledLinesColumnRows(fp, lp, kl, p.causal, j);
    ev.col[j] = cnt > 0 ? static_cast<float>(col[j] / cnt) : 0.f;
  }
  ev.diag.resize(diag.num_offsets());
  for (int i = 0; i < diag.num_offsets(); ++i) {
    const int o = diag.min_offset + i;
    const int cnt = SampledLinesDiagonalRows(fp, lp, kl, p.causal, o);
    const float d = cnt > 0 ? static_cast<float>(diag.sums[i] / cnt) : 0.f;
    ev.diag[i] = SampledLinesColumnLeak(d, cnt, ev.col.data(), fp, lp, kl, o) ? 0.f : d;
  }
  return ev;
}

}  // namespace

int SampledLinesBin(float mass) {
  uint32_t bits;
  std::memcpy(&bits, &mass, sizeof(bits));
  const int key = static_cast<int>(bits >> 20) - kSampledLinesBinFloor;
  return key < 0 ? 0 : (key >= kSampledLinesBins ? kSampledLinesBins - 1 : key);
}

double SampledLinesGammaFor(double target, double margin) {
  const double slope = kSampledLinesGammaSlope * std::max(0.0, target - 0.95);
  return std::min(0.999, target + std::max(margin, slope));
}

bool SampledLinesColumnLeak(float d, int rows, const float* col, int first_pos, int last_pos,
                            int k_len, int offset) {
  const int lo = std::max(0, first_pos - offset);
  const int hi = std::min(k_len - 1, last_pos - offset);
  float vmax = 0.f;
  for (int j = lo; j <= hi; ++j) vmax = std::max(vmax, col[j]);
  const float c = std::min(kSampledLinesColumnLeak, 0.25f * static_cast<float>(rows));
  return !(d * static_cast<float>(rows) > c * vmax);
}

int SampledLinesColumnRows(int first_pos, int last_pos, int k_len, bool causal, int key) {
  if (!causal) return last_pos - first_pos + 1;
  return std::max(0, last_pos - std::max(key, first_pos) + 1);
}

int SampledLinesDiagonalRows(int first_pos, int last_pos, int k_len, bool causal, int offset) {
  const int hi = causal ? last_pos : std::min(last_pos, offset + k_len - 1);
  return std::max(0, hi - std::max(offset, first_pos) + 1);
}

std::vector<int> SampledLinesRows(int q_begin, int q_end, int rows_per_block, bool edge_rows) {
  std::vector<int> rows;
  const int n = q_end - q_begin;
  if (n <= 0) return rows;
  const int s = std::min(rows_per_block, n);
  for (int i = 0; i < s; ++i) {
    const int r = q_begin + SampledLinesRowAt(i, n, s, edge_rows);
    if (rows.empty() || rows.back() != r) rows.push_back(r);
  }
  return rows;
}

absl::Status CheckSampledLinesGammas(const std::vector<float>& gammas, size_t heads) {
  if (gammas.empty()) return absl::OkStatus();
  if (gammas.size() != heads) {
    return absl::InvalidArgumentError(absl::StrCat("sampled_lines_gammas: one per head (",
                                                   heads, "), got ", gammas.size()));
  }
  for (size_t i = 0; i < gammas.size(); ++i) {
    if (!(gammas[i] > 0.f && gammas[i] <= 1.f)) {
      return absl::InvalidArgumentError(absl::StrCat("sampled_lines_gammas[", i,
                                                     "] must be in (0, 1], got ", gammas[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status BuildSampledLinesIndex(const AttentionProblem& problem,
                                    const SampledLinesParams& params, const std::vector<int>& heads,
                                    int block_m, SparseIndex* out,
                                    const std::vector<float>& gammas) {
  MethodConfig config;
  config.method = Method::kSampledLines;
  config.sampled_lines = params;
  SPATTN_RETURN_IF_ERROR(config.Validate());
  SPATTN_RETURN_IF_ERROR(CheckSampledLinesGammas(gammas, heads.size()));
  SPATTN_RETURN_IF_ERROR(CheckBuilderInputs(problem, heads, "block_m", block_m));
  InitSparseIndex(problem, heads, block_m, out);
  const int batch = problem.batch();
  const int nslots = out->num_heads();
  const int nblocks = out->num_blocks();

  // Step 2 per (slot, sequence).
  std::vector<LineEvidence> evidence(static_cast<size_t>(nslots) * batch);
  ParallelFor(static_cast<int64_t>(evidence.size()), [&](int64_t u) {
    evidence[u] =
        EstimateLines(problem, static_cast<int>(u % batch), heads[u / batch], params.last_q);
  });

  // Steps 3-4 per (slot, query block).
  std::vector<RowKeys> rows(out->num_rows());
  ParallelFor(out->num_rows(), [&](int64_t r) {
    const int slot = static_cast<int>(r / nblocks), b = static_cast<int>(r % nblocks);
    const BlockGeometry g = GetBlockGeometry(problem, *out, b);
    const LineEvidence& ev = evidence[static_cast<size_t>(slot) * batch + g.seq];
    const int kl = problem.k_len(g.seq);
    const std::vector<int> sampled =
        SampledLinesRows(g.q_begin, g.q_end, params.rows_per_block, params.edge_rows);
    std::vector<float> probs;
    SampledRowProbs(problem, g.seq, heads[slot], sampled, &probs);
    const float w = sampled.empty() ? 0.f : 1.f / static_cast<float>(sampled.size());
    const float diag_floor = SampledLinesFloor(params.diagonal_floor, params.short_floor, kl);
    // Mass per bin over the block's entries, then the threshold bin.
    std::vector<double> hist(kSampledLinesBins, 0.0);
    double total = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
      const float m = probs[i] * w;
      if (m > 0.f) {
        hist[SampledLinesBin(m)] += m;
        total += m;
      }
    }
    int thr = kSampledLinesBins;  // nothing kept
    if (total > 0) {
      const float gamma = gammas.empty() ? params.gamma : gammas[slot];
      const double target = static_cast<double>(gamma) * total;
      double cum = 0;
      for (int bin = kSampledLinesBins - 1; bin >= 0; --bin) {
        cum += hist[bin];
        if (cum >= target) {
          thr = bin;
          break;
        }
      }
    }
    const float diag_bar = SampledLinesDiagonalBar(params.diagonal_cost, g.q_end - g.q_begin, thr);
    std::vector<int32_t> offsets, columns;
    std::vector<std::pair<int32_t, int32_t>> clipped;  // clip_diagonals: (offset, sampled row)
    for (size_t i = 0; i < sampled.size(); ++i) {
      const int pos = problem.query_pos(g.seq, sampled[i]);
      const float* pr = probs.data() + i * kl;
      for (int j = 0; j < kl; ++j) {
        const float m = pr[j] * w;
        if (!(m > 0.f) || SampledLinesBin(m) < thr) continue;
        const int o = pos - j;
        const int oi = o - ev.min_offset;
        const float d = oi >= 0 && oi < static_cast<int>(ev.diag.size()) ? ev.diag[oi] : 0.f;
        if (d > ev.col[j] && d > diag_floor && d > diag_bar) {
          if (params.clip_diagonals) {
            clipped.emplace_back(o, static_cast<int32_t>(i));
          } else {
            offsets.push_back(o);
          }
        } else {
          columns.push_back(j);
        }
      }
    }
    std::sort(offsets.begin(), offsets.end(), std::greater<int32_t>());
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
    std::sort(columns.begin(), columns.end());
    columns.erase(std::unique(columns.begin(), columns.end()), columns.end());
    RowKeys& row = rows[r];
    if (!clipped.empty()) {
      std::sort(clipped.begin(), clipped.end());
      clipped.erase(std::unique(clipped.begin(), clipped.end()), clipped.end());
      const int n = g.q_end - g.q_begin;
      for (const auto& [o, i] : clipped) {
        int lo, hi;
        SampledLinesRowSpan(sampled[i] - g.q_begin, n, params.rows_per_block, params.edge_rows, &lo,
                            &hi);
        row.AddRange(int64_t{g.first_pos} + lo - o, int64_t{g.first_pos} + hi - o + 1);
      }
    }
    if (params.sink_tokens > 0) row.AddRange(0, params.sink_tokens);
    if (params.local_tokens > 0) {
      row.AddRange(int64_t{g.first_pos} - params.local_tokens + 1, int64_t{g.last_pos} + 1);
    }
    AddVerticalSlash(g, offsets, columns, &row);  // also normalizes
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
