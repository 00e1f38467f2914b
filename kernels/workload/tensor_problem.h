// Attention problems from tensors captured from a real model (.npy / .safetensors via
// kernels/io), and the way back (a problem's Q/K/V as named tensors).
#ifndef SPATTN_KERNELS_WORKLOAD_TENSOR_PROBLEM_H_
#define SPATTN_KERNELS_WORKLOAD_TENSOR_PROBLEM_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/host_problem.h"
#include "kernels/io/tensor_io.h"

namespace spattn {

// How Q/K/V tensors are laid out.
enum class TensorLayout {
  kAuto,  // rank 3: kTHD; rank 4: kBHSD
  kTHD,   // [tokens, heads, head_dim] (this project's layout, one sequence)
  kHSD,   // [heads, tokens, head_dim]
  kBHSD,  // [batch, heads, tokens, head_dim] (Hugging Face attention inputs); batch rows become
          // equal-length sequences of a varlen batch
};
absl::StatusOr<TensorLayout> ParseTensorLayout(absl::string_view name);  // auto|thd|hsd|bhsd

struct TensorProblemOptions {
  TensorLayout layout = TensorLayout::kAuto;  // Default: kAuto.
  // Element type of the problem; Q/K/V are converted. Default: Q's dtype.
  std::optional<DType> dtype;
  bool causal = true;         // Default: true.
  float softmax_scale = 0.f;  // Default: 0 = 1/sqrt(head_dim).
};

// Q [.., q_tokens, ..], K and V [.., k_tokens, ..]: q_tokens <= k_tokens (the queries are the
// last q_tokens positions: chunked prefill). Tensors are taken as the attention kernel sees them
// (after RoPE). INVALID_ARGUMENT names the tensor and dimension that do not fit.
absl::StatusOr<std::unique_ptr<HostProblem>> ProblemFromTensors(
    const HostTensor& q, const HostTensor& k, const HostTensor& v,
    const TensorProblemOptions& options);

// "q", "k", "v" of a problem in THD layout (one sequence) or BHSD (equal-length batch), in the
// problem's dtype. INVALID_ARGUMENT for ragged batches, which neither layout can hold.
absl::StatusOr<NamedTensors> ProblemToTensors(const AttentionProblem& problem,
                                              TensorLayout layout = TensorLayout::kTHD);

}  // namespace spattn

#endif  // SPATTN_KERNELS_WORKLOAD_TENSOR_PROBLEM_H_
