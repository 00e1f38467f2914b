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

void ExpectKernelMatchesMaskedReference(HostProblem* hp, const SparseIndex& index,
                                        const std::string& config) {
  EXPECT_EQ(method_testing::CompareKernelWithMaskedReference(hp, index), "") << config;
}

Ranges RowRanges(const SparseIndex& index, int slot, int block) {
  Ranges out;
  const int64_t r = index.row(slot, block);
  for (int e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
    out.emplace_back(index.range_start[e], index.range_start[e] + index.range_len[e]);
  }
  return out;
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
