#include "kernels/problem.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

absl::Status CheckCuSeqlens(const std::vector<int32_t>& cu, const char* name, int batch) {
  if (static_cast<int>(cu.size()) != batch + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", batch + 1, " entries (batch + 1), got ", cu.size()));
  }
  if (cu[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "[0] must be 0, got ", cu[0]));
  }
  for (int b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be non-decreasing: entry ", b + 1,
                                                     " is ", cu[b + 1], " after ", cu[b]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const TokenTensor& t, const char* name, int heads, int head_dim,
                         int tokens) {
  if (tokens > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": data is null"));
  }
  if (t.head_stride < head_dim && heads > 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": head stride ", t.head_stride,
                                                   " overlaps rows of head_dim ", head_dim));
  }
  if (t.token_stride < static_cast<int64_t>(heads - 1) * t.head_stride + head_dim && tokens > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": token stride ", t.token_stride, " is smaller than one token's ", heads, " heads"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionProblem::Validate() const {
  if (cu_seqlens_q.size() < 2) {
    return absl::InvalidArgumentError("cu_seqlens_q: need at least one sequence (2 entries)");
  }
  const int nb = batch();
  absl::Status s = CheckCuSeqlens(cu_seqlens_q, "cu_seqlens_q", nb);
  if (!s.ok()) return s;
  s = CheckCuSeqlens(cu_seqlens_k, "cu_seqlens_k", nb);
  if (!s.ok()) return s;
  for (int b = 0; b < nb; ++b) {
    if (q_len(b) > k_len(b)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cu_seqlens_q: sequence ", b, " has ", q_len(b), " queries but only ",
                       k_len(b), " keys (queries must be a suffix of the keys)"));
    }
  }
  if (num_q_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_q_heads must be > 0, got ", num_q_heads));
  }
  if (num_kv_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_kv_heads must be > 0, got ", num_kv_heads));
  }
  if (num_q_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_q_heads (", num_q_heads, ") must be a multiple of num_kv_heads (", num_kv_heads, ")"));
  }
  if (head_dim <= 0 || head_dim > 256 || head_dim % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be a multiple of 8 in [8, 256], got ", head_dim));
  }
  if (!(softmax_scale > 0.f) || !std::isfinite(softmax_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("softmax_scale must be finite and > 0, got ", softmax_scale));
  }
  s = CheckTensor(q, "q", num_q_heads, head_dim, total_q());
  if (!s.ok()) return s;
  s = CheckTensor(k, "k", num_kv_heads, head_dim, total_k());
  if (!s.ok()) return s;
  s = CheckTensor(v, "v", num_kv_heads, head_dim, total_k());
  if (!s.ok()) return s;
  s = CheckTensor(TokenTensor{o, o_token_stride, o_head_stride}, "o", num_q_heads, head_dim,
                  total_q());
  if (!s.ok()) return s;
  return absl::OkStatus();
}

void SetContiguousStrides(AttentionProblem* p) {
  p->q.head_stride = p->head_dim;
  p->q.token_stride = static_cast<int64_t>(p->num_q_heads) * p->head_dim;
  p->k.head_stride = p->v.head_stride = p->head_dim;
  p->k.token_stride = p->v.token_stride = static_cast<int64_t>(p->num_kv_heads) * p->head_dim;
  p->o_head_stride = p->head_dim;
  p->o_token_stride = static_cast<int64_t>(p->num_q_heads) * p->head_dim;
}

int64_t AllowedPairs(const AttentionProblem& p) {
  int64_t total = 0;
  for (int b = 0; b < p.batch(); ++b) {
    const int64_t ql = p.q_len(b), kl = p.k_len(b);
    if (!p.causal) {
      total += ql * kl;
    } else {
      // Query i sees kl - ql + i + 1 keys.
      total += ql * (kl - ql) + ql * (ql + 1) / 2;
    }
  }
  return total;
}

}  // namespace spattn
