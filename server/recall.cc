#include "server/recall.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace spattn {

absl::StatusOr<double> EstimateRecall(const AttentionProblem& p, const SparseIndex& index,
                                      int slot, int sample_rows, uint64_t seed) {
  if (p.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("recall: Q/K must be in host memory");
  }
  if (slot < 0 || slot >= index.num_heads()) {
    return absl::InvalidArgumentError(absl::StrCat("recall: slot ", slot, " out of range"));
  }
  if (sample_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("recall: sample_rows must be > 0, got ",
                                                   sample_rows));
  }
  const int total_q = p.total_q();
  // A partial Fisher-Yates shuffle picks the sample without replacement.
  std::vector<int32_t> rows(total_q);
  std::iota(rows.begin(), rows.end(), 0);
  std::mt19937_64 rng(seed);
  const int n = std::min(sample_rows, total_q);
  for (int i = 0; i < n; ++i) {
    std::uniform_int_distribution<int> pick(i, total_q - 1);
    std::swap(rows[i], rows[pick(rng)]);
  }
  rows.resize(n);
  std::sort(rows.begin(), rows.end());

  const int q_head = index.heads[slot];
  const int kv_head = p.kv_head_of(q_head);
  const int d = p.head_dim;
  const int es = DTypeSize(p.dtype);
  const char* kbase = static_cast<const char*>(p.k.data);
  const char* qbase = static_cast<const char*>(p.q.data);
  std::vector<float> q(d), keys;  // keys: the kv head's keys of sequence `keys_seq`, as float
  int keys_seq = -1;
  std::vector<double> scores;
  std::vector<uint8_t> selected;
  double sum = 0;
  int counted = 0;
  int seq = 0;
  for (int row : rows) {
    while (p.cu_seqlens_q[seq + 1] <= row) ++seq;
    const int i = row - p.cu_seqlens_q[seq];
    const int k_len = p.k_len(seq);
    const int allowed = p.causal ? std::min(k_len, p.query_pos(seq, i) + 1) : k_len;
    if (allowed <= 0) continue;
    if (keys_seq != seq) {
      // Rows are sorted, so each sequence's keys are converted once.
      keys.resize(static_cast<size_t>(k_len) * d);
      for (int j = 0; j < k_len; ++j) {
        const int64_t tok = int64_t{p.cu_seqlens_k[seq]} + j;
        ToFloat(kbase + (tok * p.k.token_stride + int64_t{kv_head} * p.k.head_stride) * es,
                p.dtype, d, &keys[static_cast<size_t>(j) * d]);
      }
      keys_seq = seq;
    }
    ToFloat(qbase + (int64_t{row} * p.q.token_stride + int64_t{q_head} * p.q.head_stride) * es,
            p.dtype, d, q.data());
    scores.assign(allowed, 0.0);
    double max_score = -INFINITY;
    for (int j = 0; j < allowed; ++j) {
      const float* kj = &keys[static_cast<size_t>(j) * d];
      double s = 0;
      for (int c = 0; c < d; ++c) s += double{q[c]} * kj[c];
      scores[j] = s * p.softmax_scale;
      max_score = std::max(max_score, scores[j]);
    }
    // The keys the index selects for this row's block.
    selected.assign(allowed, 0);
    const int block = index.block_offsets[seq] + i / index.block_m;
    const int64_t r = index.row(slot, block);
    for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
      const int end = std::min(allowed, index.range_start[e] + index.range_len[e]);
      for (int j = std::max(0, index.range_start[e]); j < end; ++j) selected[j] = 1;
    }
    for (int32_t e = index.col_indptr[r]; e < index.col_indptr[r + 1]; ++e) {
      const int j = index.col_idx[e];
      if (j >= 0 && j < allowed) selected[j] = 1;
    }
    double total = 0, kept = 0;
    for (int j = 0; j < allowed; ++j) {
      const double w = std::exp(scores[j] - max_score);
      total += w;
      if (selected[j]) kept += w;
    }
    sum += kept / total;
    ++counted;
  }
  return counted == 0 ? 1.0 : sum / counted;
}

}  // namespace spattn
