#include "kernels/builders/estimate.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

constexpr int kKeyTile = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

// Maps a logit to the value softmax and ranking see: NaN -> -inf, +inf -> largest float.
inline float SanitizeLogit(float x) {
  if (std::isnan(x)) return kNegInf;
  if (x == std::numeric_limits<float>::infinity()) return FLT_MAX;
  return x;
}

inline double RankKey(double v) { return std::isnan(v) ? kNegInfD : v; }

struct RankLess {
  const double* s;
  bool operator()(int32_t a, int32_t b) const {
    const double x = RankKey(s[a]), y = RankKey(s[b]);
    if (x != y) return x > y;
    return a < b;
  }
};

const char* ElementPtr(const AttentionProblem& p, const TokenTensor& t, int head, int64_t token) {
  const int es = DTypeSize(p.dtype);
  return static_cast<const char*>(t.data) +
         (token * t.token_stride + int64_t{head} * t.head_stride) * es;
}

}  // namespace

absl::Status CheckBuilderInputs(const AttentionProblem& problem, const std::vector<int>& heads,
                                absl::string_view block_name, int block) {
  absl::Status s = problem.Validate();
  if (!s.ok()) return s;
  if (problem.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("CPU index builders need Q/K in host memory");
  }
  for (size_t i = 0; i < heads.size(); ++i) {
    if (heads[i] < 0 || heads[i] >= problem.num_q_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads[", i, "]: ", heads[i],
                       " is not a q head (num_q_heads = ", problem.num_q_heads, ")"));
    }
  }
  if (block <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(block_name, " must be > 0, got ", block));
  }
  return absl::OkStatus();
}

void LoadRows(const AttentionProblem& problem, const TokenTensor& t, int head, int64_t token, int n,
              float* dst) {
  const int d = problem.head_dim;
  for (int i = 0; i < n; ++i) {
    ToFloat(ElementPtr(problem, t, head, token + i), problem.dtype, d,
            dst + static_cast<size_t>(i) * d);
  }
}

void RowAttention(const AttentionProblem& problem, int seq, int q_head, int row_begin, int row_end,
                  std::vector<float>* out) {
  const int n = row_end - row_begin;
  const int kl = problem.k_len(seq);
  const int d = problem.head_dim;
  out->assign(static_cast<size_t>(std::max(n, 0)) * kl, 0.f);
  if (n <= 0 || kl <= 0) return;
  std::vector<float> q(static_cast<size_t>(n) * d);
  LoadRows(problem, problem.q, q_head, problem.cu_seqlens_q[seq] + row_begin, n, q.data());
  for (float& x : q) x *= problem.softmax_scale;
  const int kv = problem.kv_head_of(q_head);
  const int first_pos = problem.query_pos(seq, row_begin);
  const int key_end = problem.causal ? problem.query_pos(seq, row_end - 1) + 1 : kl;
  std::vector<float> rows(static_cast<size_t>(kKeyTile) * d), kt(static_cast<size_t>(d) * kKeyTile);
  float s[kKeyTile];
  float* o = out->data();
  for (int t0 = 0; t0 < key_end; t0 += kKeyTile) {
    const int m = std::min(kKeyTile, key_end - t0);
    LoadRows(problem, problem.k, kv, problem.cu_seqlens_k[seq] + t0, m, rows.data());
    // Transposed tile [d][kKeyTile]: the inner loop below runs over keys and vectorizes.
    for (int j = 0; j < kKeyTile; ++j) {
      for (int c = 0; c < d; ++c) {
        kt[static_cast<size_t>(c) * kKeyTile + j] =
            j < m ? rows[static_cast<size_t>(j) * d + c] : 0.f;
      }
    }
    for (int i = 0; i < n; ++i) {
      const float* qi = &q[static_cast<size_t>(i) * d];
      for (int j = 0; j < kKeyTile; ++j) s[j] = 0.f;
      for (int c = 0; c < d; ++c) {
        const float qc = qi[c];
        const float* kc = &kt[static_cast<size_t>(c) * kKeyTile];
        for (int j = 0; j < kKeyTile; ++j) s[j] += qc * kc[j];
      }
      std::copy(s, s + m, o + static_cast<size_t>(i) * kl + t0);
    }
  }
  for (int i = 0; i < n; ++i) {
    float* row = o + static_cast<size_t>(i) * kl;
    const int visible = problem.causal ? first_pos + i + 1 : kl;
    float mx = kNegInf;
    for (int j = 0; j < visible; ++j) {
      row[j] = SanitizeLogit(row[j]);
      mx = std::max(mx, row[j]);
    }
    std::fill(row + visible, row + kl, 0.f);
    if (mx == kNegInf) {
      std::fill(row, row + visible, 0.f);
      continue;
    }
    double sum = 0;
    for (int j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < visible; ++j) row[j] *= inv;
  }
}

std::vector<double> SumColumns(const float* probs, int n, int k_len) {
  std::vector<double> cols(std::max(k_len, 0), 0.0);
  for (int i = 0; i < n; ++i) {
    const float* row = probs + static_cast<size_t>(i) * k_len;
    for (int j = 0; j < k_len; ++j) cols[j] += row[j];
  }
  return cols;
}

DiagonalSums SumDiagonals(const AttentionProblem& problem, int seq, int row_begin, int row_end,
                          const float* probs) {
  DiagonalSums out;
  const int n = row_end - row_begin;
  const int kl = problem.k_len(seq);
  if (n <= 0 || kl <= 0) return out;
  const int first_pos = problem.query_pos(seq, row_begin);
  const int last_pos = problem.query_pos(seq, row_end - 1);
  // Offsets reachable: causal rows see keys <= pos (o >= 0); otherwise every key (o may be < 0).
  out.min_offset = problem.causal ? 0 : first_pos - (kl - 1);
  const int max_offset = last_pos;
  out.sums.assign(max_offset - out.min_offset + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    const int pos = first_pos + i;
    const int visible = problem.causal ? pos + 1 : kl;
    const float* row = probs + static_cast<size_t>(i) * kl;
    // Key j lies on offset pos - j: index pos - j - min_offset, decreasing with j.
    double* base = out.sums.data() + (pos - out.min_offset);
    for (int j = 0; j < visible; ++j) base[-j] += row[j];
  }
  return out;
}

void MeanPool(const AttentionProblem& problem, const TokenTensor& t, int head, int64_t token, int n,
              int block, std::vector<float>* out) {
  const int d = problem.head_dim;
  const int nb = n <= 0 ? 0 : (n + block - 1) / block;
  out->assign(static_cast<size_t>(nb) * d, 0.f);
  std::vector<float> row(d);
  for (int b = 0; b < nb; ++b) {
    const int r0 = b * block, r1 = std::min(n, r0 + block);
    float* dst = &(*out)[static_cast<size_t>(b) * d];
    for (int r = r0; r < r1; ++r) {
      ToFloat(ElementPtr(problem, t, head, token + r), problem.dtype, d, row.data());
      for (int c = 0; c < d; ++c) dst[c] += row[c];
    }
    const float inv = 1.f / static_cast<float>(r1 - r0);
    for (int c = 0; c < d; ++c) dst[c] *= inv;
  }
}

PooledKeys::PooledKeys(const AttentionProblem& problem, int block)
    : num_kv_heads_(problem.num_kv_heads), head_dim_(problem.head_dim) {
  const int batch = problem.batch();
  num_blocks_.resize(batch);
  stride_.resize(batch);
  offset_.resize(static_cast<size_t>(batch) * num_kv_heads_ + 1, 0);
  for (int b = 0; b < batch; ++b) {
    num_blocks_[b] = (problem.k_len(b) + block - 1) / block;
    stride_[b] = std::max(1, num_blocks_[b]);
    for (int h = 0; h < num_kv_heads_; ++h) {
      const size_t u = static_cast<size_t>(b) * num_kv_heads_ + h;
      offset_[u + 1] = offset_[u] + static_cast<int64_t>(stride_[b]) * head_dim_;
    }
  }
  data_.assign(offset_.back(), 0.f);
  ParallelFor(static_cast<int64_t>(batch) * num_kv_heads_, [&](int64_t u) {
    const int b = static_cast<int>(u / num_kv_heads_), h = static_cast<int>(u % num_kv_heads_);
    std::vector<float> pooled;
    MeanPool(problem, problem.k, h, problem.cu_seqlens_k[b], problem.k_len(b), block, &pooled);
    float* dst = &data_[offset_[u]];
    for (int j = 0; j < num_blocks_[b]; ++j) {
      for (int c = 0; c < head_dim_; ++c) {
        dst[static_cast<size_t>(c) * stride_[b] + j] =
            pooled[static_cast<size_t>(j) * head_dim_ + c];
      }
    }
  });
}

const float* PooledKeys::at(int seq, int kv_head) const {
  return &data_[offset_[static_cast<size_t>(seq) * num_kv_heads_ + kv_head]];
}

void ColumnDots(const float* q, int head_dim, const float* kt, int stride, int n, float* out) {
  for (int j = 0; j < n; ++j) out[j] = 0.f;
  for (int c = 0; c < head_dim; ++c) {
    const float qc = q[c];
    const float* col = kt + static_cast<size_t>(c) * stride;
    for (int j = 0; j < n; ++j) out[j] += qc * col[j];
  }
  for (int j = 0; j < n; ++j) out[j] = SanitizeLogit(out[j]);
}

void SoftmaxInPlace(double* x, int n) {
  double mx = kNegInfD;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(x[i])) x[i] = kNegInfD;
    mx = std::max(mx, x[i]);
  }
  if (mx == kNegInfD || std::isinf(mx)) {
    // Nothing finite, or +inf logits: the +inf entries share the mass, the rest get 0.
    int inf_count = 0;
    for (int i = 0; i < n; ++i) inf_count += (x[i] == mx && mx > 0);
    for (int i = 0; i < n; ++i) x[i] = (inf_count > 0 && x[i] == mx) ? 1.0 / inf_count : 0.0;
    return;
  }
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

std::vector<int32_t> TopK(const double* scores, int n, int k) {
  k = std::max(0, std::min(k, n));
  std::vector<int32_t> idx(std::max(n, 0));
  for (int i = 0; i < n; ++i) idx[i] = i;
  if (k < n) {
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), RankLess{scores});
    idx.resize(k);
  }
  std::sort(idx.begin(), idx.end(), RankLess{scores});
  return idx;
}

std::vector<int32_t> RankAll(const double* scores, int n) { return TopK(scores, n, n); }

int CumulativeCount(const double* scores, const std::vector<int32_t>& order, double target) {
  double cum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const double v = scores[order[i]];
    if (v > 0) cum += v;
    if (cum >= target) return static_cast<int>(i + 1);
  }
  return static_cast<int>(order.size());
}

void AddVerticalSlash(const BlockGeometry& g, const std::vector<int32_t>& offsets_desc,
                      const std::vector<int32_t>& columns_asc, RowKeys* row) {
  // Offsets above last_pos put the whole segment before key 0: skip them (bisect, as Alg. 4).
  auto it = std::lower_bound(offsets_desc.begin(), offsets_desc.end(), g.last_pos,
                             [](int32_t a, int32_t b) { return a > b; });
  int64_t cur_start = -1, cur_end = -1;
  for (; it != offsets_desc.end(); ++it) {
    const int64_t start = std::max<int64_t>(0, int64_t{g.first_pos} - *it);
    const int64_t end = std::min<int64_t>(g.key_end, int64_t{g.last_pos} - *it + 1);
    if (start >= g.key_end) break;  // Later offsets are smaller: their segments lie further right.
    if (end <= start) continue;
    if (cur_end >= start) {
      cur_end = std::max(cur_end, end);
    } else {
      if (cur_end > cur_start) row->AddRange(cur_start, cur_end);
      cur_start = start;
      cur_end = end;
    }
  }
  if (cur_end > cur_start) row->AddRange(cur_start, cur_end);
  for (int32_t c : columns_asc) {
    if (c >= g.key_end) break;
    row->AddCol(c);
  }
  row->Normalize(g.key_end);
}

}  // namespace spattn
