// The plain reference: attention computed row by row in double precision, with its own indexing
// (it shares no layout helpers with the kernels it checks). Slow; for tests and fidelity metrics.
#ifndef SPATTN_KERNELS_REFERENCE_REFERENCE_ATTENTION_H_
#define SPATTN_KERNELS_REFERENCE_REFERENCE_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/problem.h"

namespace spattn {

// Optional extra mask: masks[head * batch + seq] is [q_len, k_len], 1 = key allowed (the causal
// mask still applies on top). Empty vector = no extra mask.
using ReferenceMasks = std::vector<std::vector<uint8_t>>;

// Computes O for `heads` (all heads when empty) into `out` as fp32 [total_q, num_q_heads,
// head_dim] (rows of other heads are left 0) and, when `maybe_lse` is set, the natural-log LSE
// [num_q_heads, total_q]. Rows with no allowed key give 0 and -inf. Host memory only.
absl::Status ReferenceAttention(const AttentionProblem& problem, const std::vector<int>& heads,
                                const ReferenceMasks& masks, std::vector<float>* out,
                                std::vector<float>* maybe_lse);

// Reads element [token, head, d] of a host tensor as float.
float ReadElement(const TokenTensor& t, DType dtype, int64_t token, int head, int d);

}  // namespace spattn

#endif  // SPATTN_KERNELS_REFERENCE_REFERENCE_ATTENTION_H_
