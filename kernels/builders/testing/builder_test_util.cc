#include "kernels/builders/testing/builder_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/reference/reference_attention.h"

namespace spattn {
namespace testing {

ProblemShape MakeShape(std::vector<int32_t> q_lens, std::vector<int32_t> k_lens, int hq, int hkv,
                       int head_dim, DType dtype, bool causal) {
  ProblemShape s;
  s.q_lens = std::move(q_lens);
  s.k_lens = std::move(k_lens);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.causal = causal;
  return s;
}

std::string Describe(const ProblemShape& s) {
  std::string out = "q_lens=";
  for (int x : s.q_lens) absl::StrAppend(&out, x, ",");
  absl::StrAppend(&out, " k_lens=");
  for (int x : s.k_lens) absl::StrAppend(&out, x, ",");
  absl::StrAppend(&out, " hq=", s.num_q_heads, " hkv=", s.num_kv_heads, " d=", s.head_dim,
                  " dtype=", DTypeName(s.dtype), " causal=", s.causal);
  return out;
}

std::unique_ptr<HostProblem> RandomProblem(const ProblemShape& shape, uint64_t seed, float stddev) {
  auto hp = std::make_unique<HostProblem>(shape);
  hp->FillRandom(seed, stddev);
  return hp;
}

std::vector<int> AllHeads(const AttentionProblem& p) {
  std::vector<int> h(p.num_q_heads);
  for (int i = 0; i < p.num_q_heads; ++i) h[i] = i;
  return h;
}

namespace {

void SetRow(const AttentionProblem& p, const TokenTensor& t, std::vector<uint8_t>* bytes,
            int64_t token, int head, const std::vector<float>& row) {
  const int es = DTypeSize(p.dtype);
  const int64_t off = (token * t.token_stride + int64_t{head} * t.head_stride) * es;
  FromFloat(row.data(), p.dtype, p.head_dim, bytes->data() + off);
}

}  // namespace

void SetQRow(HostProblem* hp, int64_t token, int head, const std::vector<float>& row) {
  SetRow(hp->problem(), hp->problem().q, &hp->q_bytes(), token, head, row);
}

void SetKRow(HostProblem* hp, int64_t token, int kv_head, const std::vector<float>& row) {
  SetRow(hp->problem(), hp->problem().k, &hp->k_bytes(), token, kv_head, row);
}

double QAt(const AttentionProblem& p, int64_t token, int head, int c) {
  return ReadElement(p.q, p.dtype, token, head, c);
}

double KAt(const AttentionProblem& p, int64_t token, int head, int c) {
  return ReadElement(p.k, p.dtype, token, head, c);
}

std::vector<double> ExactProbs(const AttentionProblem& p, int q_head, int seq, int row_begin,
                               int row_end) {
  const int kl = p.k_len(seq), d = p.head_dim, kv = p.kv_head_of(q_head);
  std::vector<double> keys(static_cast<size_t>(kl) * d), q(d);
  for (int j = 0; j < kl; ++j) {
    for (int c = 0; c < d; ++c)
      keys[static_cast<size_t>(j) * d + c] = KAt(p, p.cu_seqlens_k[seq] + j, kv, c);
  }
  std::vector<double> out(static_cast<size_t>(row_end - row_begin) * kl, 0.0);
  for (int i = row_begin; i < row_end; ++i) {
    for (int c = 0; c < d; ++c) q[c] = QAt(p, p.cu_seqlens_q[seq] + i, q_head, c);
    const int visible = p.causal ? p.query_pos(seq, i) + 1 : kl;
    double* row = &out[static_cast<size_t>(i - row_begin) * kl];
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < visible; ++j) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += q[c] * keys[static_cast<size_t>(j) * d + c];
      row[j] = s * p.softmax_scale;
      mx = std::max(mx, row[j]);
    }
    double sum = 0;
    for (int j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int j = 0; j < visible; ++j) row[j] /= sum;
  }
  return out;
}

double MaskRecall(const AttentionProblem& p, int q_head, int seq,
                  const std::vector<uint8_t>& mask) {
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  const std::vector<double> probs = ExactProbs(p, q_head, seq, 0, ql);
  double total = 0;
  int rows = 0;
  for (int i = 0; i < ql; ++i) {
    double kept = 0;
    for (int j = 0; j < kl; ++j) {
      if (mask[static_cast<size_t>(i) * kl + j]) kept += probs[static_cast<size_t>(i) * kl + j];
    }
    total += kept;
    ++rows;
  }
  return rows == 0 ? 1.0 : total / rows;
}

double IndexRecall(const AttentionProblem& p, const SparseIndex& index) {
  double sum = 0;
  int n = 0;
  for (int s = 0; s < index.num_heads(); ++s) {
    for (int b = 0; b < p.batch(); ++b) {
      if (p.q_len(b) == 0) continue;
      sum += MaskRecall(p, index.heads[s], b, DensifyMask(p, index, s, b));
      ++n;
    }
  }
  return n == 0 ? 1.0 : sum / n;
}

double IndexDensity(const AttentionProblem& p, const SparseIndex& index) {
  double sum = 0;
  for (int s = 0; s < index.num_heads(); ++s) {
    sum += static_cast<double>(ComputedPairs(p, index, s)) / AllowedPairs(p);
  }
  return index.num_heads() == 0 ? 0 : sum / index.num_heads();
}

namespace {

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 1.0 / (1 << 24);
    case DType::kF16:
      return 1.0 / (1 << 11);
    case DType::kBF16:
      return 1.0 / (1 << 8);
  }
  return 1;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, DType t,
                 const std::string& config) {
  ASSERT_EQ(got.size(), want.size()) << config;
  const double u = UnitRoundoff(t);
  double max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;  // -inf LSE of empty rows
    const double tol = 2 * u * std::fabs(want[i]) + 1e-5;
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= tol) && (err - tol > max_err || std::isnan(err))) {
      max_err = std::isnan(err) ? INFINITY : err - tol;
      worst = i;
    }
  }
  EXPECT_EQ(max_err, 0) << config << ": element " << worst << " got " << got[worst] << " want "
                        << want[worst];
}

}  // namespace

void ExpectKernelMatchesMaskedReference(HostProblem* hp, const SparseIndex& index,
                                        const std::string& config) {
  const AttentionProblem& p = hp->problem();
  ASSERT_TRUE(SparseAttentionCpu(p, index).ok()) << config;
  ReferenceMasks masks(static_cast<size_t>(p.num_q_heads) * p.batch());
  std::vector<int> heads;
  for (int s = 0; s < index.num_heads(); ++s) {
    heads.push_back(index.heads[s]);
    for (int b = 0; b < p.batch(); ++b) {
      masks[static_cast<size_t>(index.heads[s]) * p.batch() + b] = DensifyMask(p, index, s, b);
    }
  }
  std::vector<float> ref, ref_lse;
  ASSERT_TRUE(ReferenceAttention(p, heads, masks, &ref, &ref_lse).ok()) << config;
  // Only the head slots of the index are written by both.
  std::vector<float> got = hp->OutputAsFloat(), want(got.size(), 0.f);
  std::vector<float> got_lse, want_lse;
  const int d = p.head_dim;
  for (int h : heads) {
    for (int t = 0; t < p.total_q(); ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t i = (static_cast<size_t>(t) * p.num_q_heads + h) * d + c;
        want[i] = ref[i];
      }
      got_lse.push_back(hp->lse()[static_cast<size_t>(h) * p.total_q() + t]);
      want_lse.push_back(ref_lse[static_cast<size_t>(h) * p.total_q() + t]);
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t h = (i / d) % p.num_q_heads;
    if (std::find(heads.begin(), heads.end(), static_cast<int>(h)) == heads.end()) got[i] = 0.f;
  }
  ExpectClose(got, want, p.dtype, config);
  ExpectClose(got_lse, want_lse, DType::kF32, "lse " + config);
}

std::vector<int32_t> RowKeyList(const SparseIndex& index, int slot, int block) {
  std::vector<int32_t> keys;
  const int64_t r = index.row(slot, block);
  for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
    for (int32_t k = index.range_start[e]; k < index.range_start[e] + index.range_len[e]; ++k) {
      keys.push_back(k);
    }
  }
  for (int32_t e = index.col_indptr[r]; e < index.col_indptr[r + 1]; ++e) {
    keys.push_back(index.col_idx[e]);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace testing
}  // namespace spattn
