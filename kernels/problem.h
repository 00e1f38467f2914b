// AttentionProblem: the one description of a prefill attention call that every builder and kernel
// takes. A plain struct of sizes, pointers and strides; it owns nothing but the sequence offsets.
#ifndef SPATTN_KERNELS_PROBLEM_H_
#define SPATTN_KERNELS_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace spattn {

enum class MemorySpace { kHost, kCuda };

// A tensor [tokens, heads, head_dim]; the last dimension is contiguous. Strides count elements.
struct TokenTensor {
  const void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

struct AttentionProblem {
  // Varlen batch: sequence b owns query tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key tokens
  // [cu_seqlens_k[b], cu_seqlens_k[b+1]). With q_len < k_len the queries are the last q_len key
  // positions (chunked prefill): query i sits at position k_len - q_len + i, and the causal mask
  // is aligned bottom-right.
  std::vector<int32_t> cu_seqlens_q;  // [batch + 1], host
  std::vector<int32_t> cu_seqlens_k;  // [batch + 1], host
  int num_q_heads = 0;
  int num_kv_heads = 0;  // GQA: q head h reads kv head h / (num_q_heads / num_kv_heads).
  int head_dim = 0;
  float softmax_scale = 0.f;
  bool causal = true;
  DType dtype = DType::kBF16;  // Of Q, K, V and O.
  MemorySpace space = MemorySpace::kHost;

  TokenTensor q;      // [total_q, num_q_heads, head_dim]
  TokenTensor k;      // [total_k, num_kv_heads, head_dim]
  TokenTensor v;      // [total_k, num_kv_heads, head_dim]
  void* o = nullptr;  // [total_q, num_q_heads, head_dim], strides below
  int64_t o_token_stride = 0;
  int64_t o_head_stride = 0;
  float* maybe_lse = nullptr;  // [num_q_heads, total_q], natural log; -inf for rows with no keys

  int batch() const { return static_cast<int>(cu_seqlens_q.size()) - 1; }
  int total_q() const { return cu_seqlens_q.empty() ? 0 : cu_seqlens_q.back(); }
  int total_k() const { return cu_seqlens_k.empty() ? 0 : cu_seqlens_k.back(); }
  int q_len(int b) const { return cu_seqlens_q[b + 1] - cu_seqlens_q[b]; }
  int k_len(int b) const { return cu_seqlens_k[b + 1] - cu_seqlens_k[b]; }
  int group_size() const { return num_q_heads / num_kv_heads; }
  int kv_head_of(int q_head) const { return q_head / group_size(); }
  // Key position of query row i of sequence b (the offset of chunked prefill).
  int query_pos(int b, int i) const { return k_len(b) - q_len(b) + i; }

  // Checks sizes, offsets, strides and pointers; the message names the bad field.
  absl::Status Validate() const;
};

// Fills row-major contiguous strides for Q/K/V/O from the head counts and head_dim.
void SetContiguousStrides(AttentionProblem* p);

// Number of (query, key) pairs the mask allows (causal or full), summed over sequences; per head.
int64_t AllowedPairs(const AttentionProblem& p);

}  // namespace spattn

#endif  // SPATTN_KERNELS_PROBLEM_H_
