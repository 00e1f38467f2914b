#include "kernels/builders/flex_prefill.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>

#include "kernels/builders/estimate.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

// sqrt(JSD(p || q)) with natural logs; both are normalized first. Empty mass on either side
// counts as the largest distance, sqrt(ln 2).
double SqrtJsDivergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sp += p[i];
    sq += q[i];
  }
  if (!(sp > 0) || !(sq > 0)) return std::sqrt(std::log(2.0));
  double js = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = p[i] / sp, b = q[i] / sq, m = 0.5 * (a + b);
    if (a > 0) js += 0.5 * a * std::log(a / m);
    if (b > 0) js += 0.5 * b * std::log(b / m);
  }
  return std::sqrt(std::max(0.0, js));
}

// Value histogram for the flattened selection: buckets ordered like the values, 2^10 per octave
// down to 2^-60 (smaller values share bucket 0).
constexpr int kMantissaBits = 10;
constexpr int kMinExponent = -60;
constexpr int kNumBuckets = 1 + ((1 - kMinExponent + 1) << kMantissaBits);

int MassBucket(double p) {
  int e;
  const double m = std::frexp(p, &e);  // p = m * 2^e, m in [0.5, 1)
  if (e < kMinExponent) return 0;
  e = std::min(e, 1);
  const int mant =
      std::min((1 << kMantissaBits) - 1, static_cast<int>((m - 0.5) * (2 << kMantissaBits)));
  return 1 + ((e - kMinExponent) << kMantissaBits) + mant;
}

class UnitBuilder {
 public:
  UnitBuilder(const AttentionProblem& p, const FlexPrefillParams& params, const PooledKeys& pk,
              const SparseIndex& index, int slot, int seq, std::vector<RowKeys>* rows)
      : p_(p),
        params_(params),
        index_(index),
        bs_(params.block_size),
        slot_(slot),
        seq_(seq),
        q_head_(index.heads[slot]),
        kt_(pk.at(seq, p.kv_head_of(q_head_))),
        stride_(pk.stride(seq)),
        nk_(pk.num_blocks(seq)),
        rows_(*rows) {}

  FlexPrefillChoice Run() {
    FlexPrefillChoice choice;
    const int ql = p_.q_len(seq_), kl = p_.k_len(seq_), d = p_.head_dim;
    if (ql == 0) return choice;
    // Alg. 2: representative queries = the last block of queries.
    const int n = std::min(bs_, ql), r0 = ql - n;
    std::vector<float> probs;
    RowAttention(p_, seq_, q_head_, r0, ql, &probs);
    const std::vector<double> columns = SumColumns(probs.data(), n, kl);
    std::vector<double> truth(nk_, 0.0);
    for (int j = 0; j < kl; ++j) truth[j / bs_] += columns[j];
    std::vector<float> rep(static_cast<size_t>(n) * d), mean_q(d, 0.f);
    LoadRows(p_, p_.q, q_head_, p_.cu_seqlens_q[seq_] + r0, n, rep.data());
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < d; ++c) mean_q[c] += rep[static_cast<size_t>(i) * d + c];
    }
    for (float& x : mean_q) x *= p_.softmax_scale / static_cast<float>(n);
    const int last_pos = p_.query_pos(seq_, ql - 1);
    const std::vector<double> estimate = BlockSoftmax(mean_q.data(), VisibleBlocks(last_pos));
    choice.js_distance = SqrtJsDivergence(estimate, truth);
    choice.query_aware = choice.js_distance < params_.tau;
    DiagonalSums diagonals;
    if (!choice.query_aware) diagonals = SumDiagonals(p_, seq_, r0, ql, probs.data());
    probs = std::vector<float>();  // B * k_len floats: release before the selection passes
    if (choice.query_aware) {
      QueryAware();
    } else {
      VerticalSlash(columns, diagonals, &choice);
    }
    return choice;
  }

 private:
  int VisibleBlocks(int last_pos) const {
    return p_.causal ? std::min(nk_, last_pos / bs_ + 1) : nk_;
  }

  // softmax(q . pooled K^T) over the first `visible` key blocks; 0 for the others. `q` is
  // pre-scaled.
  std::vector<double> BlockSoftmax(const float* q, int visible) const {
    std::vector<float> logits(visible);
    ColumnDots(q, p_.head_dim, kt_, stride_, visible, logits.data());
    std::vector<double> out(nk_, 0.0);
    for (int j = 0; j < visible; ++j) out[j] = logits[j];
    SoftmaxInPlace(out.data(), visible);
    return out;
  }

  int FirstBlock() const { return index_.block_offsets[seq_]; }
  int NumBlocks() const { return index_.block_offsets[seq_ + 1] - FirstBlock(); }

  // Rows keep their first key block and the key blocks holding their own positions.
  void AddKeptBlocks(const BlockGeometry& g, RowKeys* row) const {
    row->AddRange(0, bs_);
    row->AddRange(int64_t{g.first_pos} / bs_ * bs_, (int64_t{g.last_pos} / bs_ + 1) * bs_);
  }

  void QueryAware() {
    const int nq = NumBlocks(), d = p_.head_dim;
    std::vector<float> pooled_q;
    MeanPool(p_, p_.q, q_head_, p_.cu_seqlens_q[seq_], p_.q_len(seq_), bs_, &pooled_q);
    for (float& x : pooled_q) x *= p_.softmax_scale;
    std::vector<BlockGeometry> geo(nq);
    std::vector<int> visible(nq);
    for (int i = 0; i < nq; ++i) {
      geo[i] = GetBlockGeometry(p_, index_, FirstBlock() + i);
      visible[i] = VisibleBlocks(geo[i].last_pos);
    }
    auto row_probs = [&](int i) {
      return BlockSoftmax(&pooled_q[static_cast<size_t>(i) * d], visible[i]);
    };
    // selected[i]: key blocks query block i keeps by the gamma rule.
    std::vector<std::vector<int32_t>> selected(nq);
    const double gamma = params_.gamma;
    if (params_.flatten) {
      // Alg. 4 over the flattened map: keep the largest scores until their sum reaches
      // gamma * total. Pass 1 finds the value bucket where the sum crosses; pass 2 keeps all
      // larger buckets and sorts only that bucket's entries.
      std::vector<double> mass(kNumBuckets, 0.0);
      double total = 0;
      for (int i = 0; i < nq; ++i) {
        const std::vector<double> pr = row_probs(i);
        for (int j = 0; j < visible[i]; ++j) {
          if (pr[j] > 0) {
            mass[MassBucket(pr[j])] += pr[j];
            total += pr[j];
          }
        }
      }
      const double target = gamma * total;
      int cross = 0;
      double cum = 0, above = 0;
      for (int b = kNumBuckets - 1; b >= 0; --b) {
        above = cum;
        cum += mass[b];
        cross = b;
        if (cum >= target) break;
      }
      struct Candidate {
        double p;
        int32_t i, j;
      };
      std::vector<Candidate> candidates;
      for (int i = 0; i < nq; ++i) {
        const std::vector<double> pr = row_probs(i);
        for (int j = 0; j < visible[i]; ++j) {
          if (!(pr[j] > 0)) continue;
          const int b = MassBucket(pr[j]);
          if (b > cross) selected[i].push_back(j);
          if (b == cross) candidates.push_back({pr[j], i, j});
        }
      }
      std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        if (a.p != b.p) return a.p > b.p;
        if (a.i != b.i) return a.i < b.i;
        return a.j < b.j;
      });
      for (const Candidate& c : candidates) {
        if (above >= target) break;
        selected[c.i].push_back(c.j);
        above += c.p;
      }
    } else {
      for (int i = 0; i < nq; ++i) {
        const std::vector<double> pr = row_probs(i);
        double row_total = 0;
        for (int j = 0; j < visible[i]; ++j) row_total += pr[j];
        const std::vector<int32_t> order = RankAll(pr.data(), visible[i]);
        const int k = CumulativeCount(pr.data(), order, gamma * row_total);
        selected[i].assign(order.begin(), order.begin() + k);
      }
    }
    // Kept blocks and per-block budgets, then ranges.
    const int min_blocks = static_cast<int>((int64_t{params_.min_budget} + bs_ - 1) / bs_);
    const int max_blocks = params_.max_budget > 0
                               ? static_cast<int>((int64_t{params_.max_budget} + bs_ - 1) / bs_)
                               : INT_MAX;
    for (int i = 0; i < nq; ++i) {
      const BlockGeometry& g = geo[i];
      const int vis = visible[i];
      std::vector<char> member(vis, 0), kept(vis, 0);
      int count = 0;
      auto add = [&](int j) {
        if (j >= 0 && j < vis && !member[j]) {
          member[j] = 1;
          ++count;
        }
      };
      add(0);
      if (vis > 0) kept[0] = 1;
      for (int j = g.first_pos / bs_; j <= g.last_pos / bs_ && j < vis; ++j) {
        add(j);
        kept[j] = 1;
      }
      for (int32_t j : selected[i]) add(j);
      if (count < min_blocks || count > max_blocks) {
        const std::vector<double> pr = row_probs(i);
        const std::vector<int32_t> order = RankAll(pr.data(), vis);
        for (size_t t = 0; t < order.size() && count < min_blocks; ++t) add(order[t]);
        for (size_t t = order.size(); t-- > 0 && count > max_blocks;) {
          if (member[order[t]] && !kept[order[t]]) {
            member[order[t]] = 0;
            --count;
          }
        }
      }
      RowKeys& row = rows_[index_.row(slot_, FirstBlock() + i)];
      for (int j = 0; j < vis; ++j) {
        if (member[j]) row.AddRange(int64_t{j} * bs_, (int64_t{j} + 1) * bs_);
      }
      row.Normalize(g.key_end);
    }
  }

  void VerticalSlash(const std::vector<double>& columns, const DiagonalSums& diagonals,
                     FlexPrefillChoice* choice) {
    // Alg. 3: the fewest lines whose normalized mass reaches gamma, clamped to the budgets.
    auto pick = [&](const std::vector<double>& scores) {
      double total = 0;
      for (double v : scores) total += v;
      const int n = static_cast<int>(scores.size());
      const std::vector<int32_t> order = RankAll(scores.data(), n);
      int k = CumulativeCount(scores.data(), order, params_.gamma * total);
      k = std::max(k, params_.min_budget);
      if (params_.max_budget > 0) k = std::min(k, params_.max_budget);
      k = std::min(k, n);
      return std::vector<int32_t>(order.begin(), order.begin() + k);
    };
    std::vector<int32_t> cols = pick(columns);
    std::sort(cols.begin(), cols.end());
    std::vector<int32_t> offsets = pick(diagonals.sums);
    for (int32_t& o : offsets) o += diagonals.min_offset;
    std::sort(offsets.begin(), offsets.end(), std::greater<int32_t>());
    choice->num_columns = static_cast<int>(cols.size());
    choice->num_diagonals = static_cast<int>(offsets.size());
    for (int blk = FirstBlock(); blk < FirstBlock() + NumBlocks(); ++blk) {
      const BlockGeometry g = GetBlockGeometry(p_, index_, blk);
      RowKeys& row = rows_[index_.row(slot_, blk)];
      AddKeptBlocks(g, &row);
      AddVerticalSlash(g, offsets, cols, &row);
    }
  }

  const AttentionProblem& p_;
  const FlexPrefillParams& params_;
  const SparseIndex& index_;
  const int bs_, slot_, seq_, q_head_;
  const float* kt_;
  const int stride_, nk_;
  std::vector<RowKeys>& rows_;
};

}  // namespace

absl::Status BuildFlexPrefillIndexWithChoices(const AttentionProblem& problem,
                                              const FlexPrefillParams& params,
                                              const std::vector<int>& heads, SparseIndex* out,
                                              std::vector<FlexPrefillChoice>* maybe_choices) {
  MethodConfig config;
  config.method = Method::kFlexPrefill;
  config.flex_prefill = params;
  SPATTN_RETURN_IF_ERROR(config.Validate());
  SPATTN_RETURN_IF_ERROR(
      CheckBuilderInputs(problem, heads, "flex_prefill.block_size", params.block_size));
  InitSparseIndex(problem, heads, params.block_size, out);
  const int batch = problem.batch();
  const PooledKeys pooled_k(problem, params.block_size);
  std::vector<RowKeys> rows(out->num_rows());
  std::vector<FlexPrefillChoice> choices(heads.size() * static_cast<size_t>(batch));
  ParallelFor(static_cast<int64_t>(choices.size()), [&](int64_t u) {
    const int slot = static_cast<int>(u / batch), seq = static_cast<int>(u % batch);
    UnitBuilder unit(problem, params, pooled_k, *out, slot, seq, &rows);
    choices[u] = unit.Run();
  });
  CompactRows(&rows, out);
  if (maybe_choices != nullptr) *maybe_choices = std::move(choices);
  return absl::OkStatus();
}

absl::Status BuildFlexPrefillIndex(const AttentionProblem& problem, const FlexPrefillParams& params,
                                   const std::vector<int>& heads, SparseIndex* out) {
  return BuildFlexPrefillIndexWithChoices(problem, params, heads, out, nullptr);
}

}  // namespace spattn
