#include "kernels/host_problem.h"

#include <cmath>
#include <random>

namespace spattn {

HostProblem::HostProblem(const ProblemShape& shape) {
  AttentionProblem& p = problem_;
  const std::vector<int32_t>& k_lens = shape.k_lens.empty() ? shape.q_lens : shape.k_lens;
  p.cu_seqlens_q.assign(1, 0);
  p.cu_seqlens_k.assign(1, 0);
  for (size_t b = 0; b < shape.q_lens.size(); ++b) {
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + shape.q_lens[b]);
    p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + (b < k_lens.size() ? k_lens[b] : 0));
  }
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.causal = shape.causal;
  p.dtype = shape.dtype;
  p.softmax_scale = shape.softmax_scale > 0.f ? shape.softmax_scale
                                              : 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  SetContiguousStrides(&p);
  const size_t es = DTypeSize(shape.dtype);
  q_.assign(static_cast<size_t>(p.total_q()) * p.num_q_heads * p.head_dim * es, 0);
  o_.assign(q_.size(), 0);
  k_.assign(static_cast<size_t>(p.total_k()) * p.num_kv_heads * p.head_dim * es, 0);
  v_.assign(k_.size(), 0);
  lse_.assign(static_cast<size_t>(p.num_q_heads) * p.total_q(), 0.f);
  p.q.data = q_.data();
  p.k.data = k_.data();
  p.v.data = v_.data();
  p.o = o_.data();
  p.maybe_lse = lse_.data();
}

void HostProblem::FillRandom(uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  const DType t = problem_.dtype;
  const size_t es = DTypeSize(t);
  for (std::vector<uint8_t>* buf : {&q_, &k_, &v_}) {
    const size_t n = buf->size() / es;
    std::vector<float> vals(n);
    for (float& x : vals) x = dist(rng);
    FromFloat(vals.data(), t, static_cast<int64_t>(n), buf->data());
  }
}

std::vector<float> HostProblem::OutputAsFloat() const {
  const size_t n = o_.size() / DTypeSize(problem_.dtype);
  std::vector<float> out(n);
  ToFloat(o_.data(), problem_.dtype, static_cast<int64_t>(n), out.data());
  return out;
}

}  // namespace spattn
