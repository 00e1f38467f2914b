// Test helpers for the index builders: random and planted problems, exact attention
// probabilities, attention-mass recall, and the densified-mask check of the CPU kernel.
// Test-only; not thread-safe.
#ifndef SPATTN_KERNELS_BUILDERS_TESTING_BUILDER_TEST_UTIL_H_
#define SPATTN_KERNELS_BUILDERS_TESTING_BUILDER_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/builders/testing/method_testing.h"
#include "kernels/host_problem.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace testing {

// Shapes, problems and heads: method_testing.h (one definition for every builder test).
using method_testing::AllHeads;
using method_testing::Describe;
using method_testing::MakeShape;
using method_testing::RandomProblem;

// Writes one head row (head_dim floats, converted to the problem's dtype) of Q or K.
void SetQRow(HostProblem* hp, int64_t token, int head, const std::vector<float>& row);
void SetKRow(HostProblem* hp, int64_t token, int kv_head, const std::vector<float>& row);

// Element [token, head, c] of Q or K as double (the builder's inputs after dtype rounding).
double QAt(const AttentionProblem& p, int64_t token, int head, int c);
double KAt(const AttentionProblem& p, int64_t token, int head, int c);

// Exact attention probabilities of q head `q_head`, sequence `seq`, query rows
// [row_begin, row_end): [n, k_len] in double with the causal mask; plain loops.
std::vector<double> ExactProbs(const AttentionProblem& p, int q_head, int seq, int row_begin,
                               int row_end);

// Mean over the query rows of sequence `seq` (with at least one key) of the exact attention mass
// that `mask` ([q_len, k_len], e.g. from DensifyMask) keeps for q head `q_head`.
double MaskRecall(const AttentionProblem& p, int q_head, int seq, const std::vector<uint8_t>& mask);
// Mean recall over every head slot and sequence of `index`.
double IndexRecall(const AttentionProblem& p, const SparseIndex& index);
// Computed pairs over allowed pairs, averaged over head slots.
double IndexDensity(const AttentionProblem& p, const SparseIndex& index);

// Runs SparseAttentionCpu on `index` and checks O and LSE against ReferenceAttention under the
// densified masks (FlashAttention's tolerance rule: 2 units of the dtype's roundoff): the gtest
// form of method_testing::CompareKernelWithMaskedReference.
void ExpectKernelMatchesMaskedReference(HostProblem* hp, const SparseIndex& index,
                                        const std::string& config);

// The ranges of one row of `index` as [start, end) pairs, in index order.
using Ranges = std::vector<std::pair<int32_t, int32_t>>;
Ranges RowRanges(const SparseIndex& index, int slot, int block);

// Key sets of one row of `index` as a sorted list of keys (ranges expanded).
std::vector<int32_t> RowKeyList(const SparseIndex& index, int slot, int block);

}  // namespace testing
}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_TESTING_BUILDER_TEST_UTIL_H_
