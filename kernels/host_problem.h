// HostProblem: an AttentionProblem together with host buffers it points into. Used by tests,
// benchmarks and the CPU path of the worker when it has to own copies.
#ifndef SPATTN_KERNELS_HOST_PROBLEM_H_
#define SPATTN_KERNELS_HOST_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "kernels/problem.h"

namespace spattn {

struct ProblemShape {
  std::vector<int32_t> q_lens;  // One entry per sequence.
  std::vector<int32_t> k_lens;  // Empty: same as q_lens.
  int num_q_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 64;
  bool causal = true;
  DType dtype = DType::kBF16;
  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim).
};

class HostProblem {
 public:
  // Allocates zeroed Q/K/V/O (and LSE) and sets contiguous strides. Not thread-safe.
  explicit HostProblem(const ProblemShape& shape);
  HostProblem(const HostProblem&) = delete;
  HostProblem& operator=(const HostProblem&) = delete;

  AttentionProblem& problem() { return problem_; }
  const AttentionProblem& problem() const { return problem_; }
  std::vector<uint8_t>& q_bytes() { return q_; }
  std::vector<uint8_t>& k_bytes() { return k_; }
  std::vector<uint8_t>& v_bytes() { return v_; }
  std::vector<uint8_t>& o_bytes() { return o_; }
  std::vector<float>& lse() { return lse_; }

  // Fills Q, K and V with independent N(0, stddev^2) values (deterministic in seed).
  void FillRandom(uint64_t seed, float stddev = 1.f);
  // O converted to float, [total_q, num_q_heads, head_dim].
  std::vector<float> OutputAsFloat() const;

 private:
  AttentionProblem problem_;
  std::vector<uint8_t> q_, k_, v_, o_;
  std::vector<float> lse_;
};

}  // namespace spattn

#endif  // SPATTN_KERNELS_HOST_PROBLEM_H_
