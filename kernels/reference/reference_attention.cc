#include "kernels/reference/reference_attention.h"

#include <cmath>
#include <limits>

#include "kernels/parallel.h"

namespace spattn {

float ReadElement(const TokenTensor& t, DType dtype, int64_t token, int head, int d) {
  const int64_t off = token * t.token_stride + static_cast<int64_t>(head) * t.head_stride + d;
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(t.data)[off];
    case DType::kF16:
      return Fp16ToFloat(static_cast<const uint16_t*>(t.data)[off]);
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(t.data)[off]);
  }
  return 0.f;
}

absl::Status ReferenceAttention(const AttentionProblem& p, const std::vector<int>& heads_in,
                                const ReferenceMasks& masks, std::vector<float>* out,
                                std::vector<float>* maybe_lse) {
  absl::Status s = p.Validate();
  if (!s.ok()) return s;
  if (p.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("ReferenceAttention reads host memory only");
  }
  std::vector<int> heads = heads_in;
  if (heads.empty()) {
    for (int h = 0; h < p.num_q_heads; ++h) heads.push_back(h);
  }
  const int nb = p.batch(), d = p.head_dim;
  if (!masks.empty() && static_cast<int>(masks.size()) != p.num_q_heads * nb) {
    return absl::InvalidArgumentError("masks: need num_q_heads * batch entries");
  }
  out->assign(static_cast<size_t>(p.total_q()) * p.num_q_heads * d, 0.f);
  if (maybe_lse) {
    maybe_lse->assign(static_cast<size_t>(p.num_q_heads) * p.total_q(),
                      -std::numeric_limits<float>::infinity());
  }
  // One task per (head, sequence, query row).
  struct Task {
    int head, seq, row;
  };
  std::vector<Task> tasks;
  for (int h : heads) {
    for (int b = 0; b < nb; ++b) {
      for (int i = 0; i < p.q_len(b); ++i) tasks.push_back({h, b, i});
    }
  }
  const int group = p.num_q_heads / p.num_kv_heads;
  ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const Task task = tasks[t];
    const int kl = p.k_len(task.seq), ql = p.q_len(task.seq);
    const int64_t qtok = p.cu_seqlens_q[task.seq] + task.row;
    const int64_t ktok0 = p.cu_seqlens_k[task.seq];
    const int kvh = task.head / group;
    const int limit = p.causal ? kl - ql + task.row + 1 : kl;
    const uint8_t* mask = masks.empty() ? nullptr
                                        : masks[task.head * nb + task.seq].data() +
                                              static_cast<size_t>(task.row) * kl;
    std::vector<double> q(d), acc(d, 0.0), scores(limit);
    for (int c = 0; c < d; ++c) q[c] = ReadElement(p.q, p.dtype, qtok, task.head, c);
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < limit; ++j) {
      if (mask && !mask[j]) {
        scores[j] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += q[c] * ReadElement(p.k, p.dtype, ktok0 + j, kvh, c);
      scores[j] = dot * p.softmax_scale;
      if (scores[j] > mx) mx = scores[j];
    }
    float* o = out->data() + (qtok * p.num_q_heads + task.head) * d;
    if (mx == -std::numeric_limits<double>::infinity()) return;  // No key: 0 and -inf.
    double sum = 0;
    for (int j = 0; j < limit; ++j) {
      if (scores[j] == -std::numeric_limits<double>::infinity()) continue;
      const double w = std::exp(scores[j] - mx);
      sum += w;
      for (int c = 0; c < d; ++c) acc[c] += w * ReadElement(p.v, p.dtype, ktok0 + j, kvh, c);
    }
    for (int c = 0; c < d; ++c) o[c] = static_cast<float>(acc[c] / sum);
    if (maybe_lse)
      (*maybe_lse)[static_cast<size_t>(task.head) * p.total_q() + qtok] =
          static_cast<float>(mx + std::log(sum));
  });
  return absl::OkStatus();
}

}  // namespace spattn
