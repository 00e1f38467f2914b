// Fidelity metrics of a sparse index against exact dense attention (DESIGN §8): attention-mass
// recall over sampled query rows, density, and the relative L2 error of outputs.
//
// Every metric here computes its exact scores itself, in double precision, over all keys the
// mask allows (causal, chunked-prefill positions), sharing no code with the kernels it judges.
// Memory stays O(tokens * head_dim + sample * keys): never O(S^2) unless asked to keep all rows.
#ifndef SPATTN_KERNELS_FIDELITY_H_
#define SPATTN_KERNELS_FIDELITY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// One query row of the batch: row `row` (0 .. q_len-1) of sequence `seq`.
struct SampledRow {
  int seq = 0;
  int row = 0;
};

// `sample_rows` query rows spread over the whole batch: the batch's total_q rows are cut into
// `sample_rows` equal strata and one row is drawn uniformly from each (splitmix64 on `seed`, so
// the same on every platform). sample_rows <= 0 or >= total_q: every row, in order.
std::vector<SampledRow> SampleQueryRows(const AttentionProblem& problem, int sample_rows,
                                        uint64_t seed);

// Share of the exact softmax mass that the keys selected by `index` for head slot `slot` carry,
// averaged over `sample_rows` query rows sampled deterministically (seed) across the batch; exact
// over all allowed keys in double precision (chunked-prefill positions and causal respected).
// Rows are processed one at a time per thread (memory O(total_k * head_dim)). Errors:
// INVALID_ARGUMENT for a bad problem, index or slot; FAILED_PRECONDITION for device memory.
absl::StatusOr<double> AttentionMassRecall(const AttentionProblem& problem,
                                           const SparseIndex& index, int slot, int sample_rows,
                                           uint64_t seed);

// ||got - want|| / ||want|| over all elements (NaN if either has NaN or the sizes differ;
// 0 when both are all zero, +inf when only `want` is).
double RelativeL2Error(const std::vector<float>& got, const std::vector<float>& want);

// ComputedPairs(slot) / AllowedPairs (0 when the mask allows no pair).
double Density(const AttentionProblem& problem, const SparseIndex& index, int slot);

// Recall and density of one head slot.
struct SlotFidelity {
  int slot = 0;
  int head = 0;            // q head of the slot
  double recall_mean = 0;  // mean over sampled rows of the selected share of softmax mass
  double recall_min = 0;   // worst sampled row
  double density = 0;      // computed pairs / allowed pairs
};

// Per-slot fidelity plus aggregates over the slots.
struct FidelitySummary {
  std::vector<SlotFidelity> slots;
  double recall_mean = 0;   // mean of the slots' recall_mean
  double recall_min = 0;    // min of the slots' recall_min (worst row of any slot)
  double density_mean = 0;  // mean of the slots' density
  double density_min = 0;
  double density_max = 0;
};

// Recall (over `sample_rows` rows, as AttentionMassRecall) and density of every slot of `index`.
absl::StatusOr<FidelitySummary> SummarizeFidelity(const AttentionProblem& problem,
                                                  const SparseIndex& index, int sample_rows,
                                                  uint64_t seed);

// Aggregates an arbitrary subset of slot results (e.g. the heads of one head kind).
FidelitySummary Aggregate(const std::vector<SlotFidelity>& slots);

// Exact dense attention on a fixed sample of query rows for a set of q heads, computed once and
// then reused to score many indexes and outputs of the same problem (what a benchmark needs: the
// dense cost is paid for the sample only, once). Keeps the exact probabilities of every sampled
// row (sample * keys floats per head) and the exact output rows (fp32, from double sums).
// Immutable after Compute(); const methods are thread-safe.
class ExactRowSample {
 public:
  struct Options {
    int sample_rows = 256;  // Default: 256 rows per head (<= 0: every row; beware O(S^2)).
    uint64_t seed = 0;      // Default: 0.
  };

  // `heads` empty = all q heads. The problem's Q/K/V are read now and not kept.
  static absl::StatusOr<std::unique_ptr<ExactRowSample>> Compute(const AttentionProblem& problem,
                                                                 const std::vector<int>& heads,
                                                                 const Options& options);

  const std::vector<int>& heads() const { return heads_; }
  const std::vector<SampledRow>& rows() const { return rows_; }

  // Recall of `index` at `slot` over the sample (same definition as AttentionMassRecall).
  // INVALID_ARGUMENT when the slot's head was not sampled or the index does not fit the problem.
  absl::StatusOr<SlotFidelity> Score(const AttentionProblem& problem, const SparseIndex& index,
                                     int slot) const;

  // Relative L2 error of `problem.o` (host, problem.dtype) against the exact outputs, over the
  // sampled rows of `heads` (empty = all sampled heads).
  absl::StatusOr<double> OutputError(const AttentionProblem& problem,
                                     const std::vector<int>& heads) const;

  // Exact output row [head_dim] of sampled row `i` of head `head` (null if not sampled).
  const float* ExactOutput(int head, int i) const;
  // Exact probabilities of sampled row `i` of head `head` over keys [0, *count) of its sequence
  // (null if not sampled).
  const float* Probabilities(int head, int i, int* count) const;

 private:
  ExactRowSample() = default;
  int HeadPosition(int head) const;
  // INVALID_ARGUMENT unless `problem` has the sampled problem's sequences and head_dim.
  absl::Status CheckSameShape(const AttentionProblem& problem) const;

  int head_dim_ = 0;
  std::vector<int32_t> cu_seqlens_q_, cu_seqlens_k_;
  std::vector<int> heads_;
  std::vector<SampledRow> rows_;
  std::vector<int64_t> prob_offset_;  // [rows + 1] start of each row's probabilities
  // Per head position: probabilities of each sampled row over keys [0, limit), concatenated.
  std::vector<std::vector<float>> probs_;
  std::vector<std::vector<float>> outputs_;  // per head position: [rows, head_dim]
};

}  // namespace spattn

#endif  // SPATTN_KERNELS_FIDELITY_H_
