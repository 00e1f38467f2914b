// Test helpers for the CUDA kernels: device copies of a HostProblem, a sampled-row reference
// (exact in double, plus the same math done in the input dtype), and the FlashAttention
// tolerance rule. Its own indexing: it shares no layout helper with the kernels it checks.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_CUDA_TEST_UTIL_H_
#define SPATTN_KERNELS_CUDA_ATTENTION_CUDA_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/host_problem.h"
#include "kernels/method_config.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda_test {

// Device copies of a HostProblem's Q/K/V plus O and LSE; `problem()` points at them.
// Thread-compatible.
class DeviceProblem {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceProblem>> Create(int device, HostProblem& hp);
  AttentionProblem& problem() { return problem_; }
  // Fills O and LSE with NaN (0xff bytes) so unwritten elements show.
  absl::Status Poison();
  // Re-uploads Q/K/V from `hp` (after the host values changed).
  absl::Status Upload(HostProblem& hp);
  // O as float [total_q, num_q_heads, head_dim] and the LSE [num_q_heads, total_q].
  absl::Status Download(std::vector<float>* o, std::vector<float>* lse) const;

 private:
  AttentionProblem problem_;
  std::unique_ptr<CudaDeviceBuffer> q_, k_, v_, o_, lse_;
};

// One query row to check: q head `head`, global query token `token`.
struct SampledRow {
  int head;
  int token;
};

// Rows to check: every row of `heads` when the problem is small (<= max_rows per head), else
// the first and last rows of each sequence plus an even spread.
std::vector<SampledRow> SampleRows(const AttentionProblem& p, const std::vector<int>& heads,
                                   int max_rows_per_head);

// The keys the row attends to: every causal key (maybe_index null) or the keys of its index
// row (ranges + columns, causal mask applied). `slot_of_head[h]` is h's slot, -1 when absent.
std::vector<int32_t> AllowedKeys(const AttentionProblem& p, const SparseIndex* maybe_index,
                                 const SampledRow& row);

// Reference values of one row: exact (double) and "input-dtype math" (scores, probabilities and
// output rounded to the dtype, as PyTorch computes attention in bf16/fp16).
struct RowReference {
  std::vector<double> exact;
  double exact_lse;
  std::vector<double> emulated;
  double emulated_lse;
};
RowReference ComputeRowReference(const AttentionProblem& p, const SampledRow& row,
                                 const std::vector<int32_t>& keys);

// Compares the kernel's O / LSE at the sampled rows with the FlashAttention rule:
// max |out - exact| <= 2 * max |emulated - exact| + u * max |exact| (u: unit roundoff of the
// output dtype), and the same for the LSE (u of fp32). NaN fails. Returns "" when it holds,
// else a description of the worst element.
std::string CheckRows(const AttentionProblem& p, const SparseIndex* maybe_index,
                      const std::vector<SampledRow>& rows, const std::vector<float>& o,
                      const std::vector<float>& lse);

// Every O element and LSE of `heads` is written (no NaN left from the poison).
std::string CheckAllWritten(const AttentionProblem& p, const std::vector<int>& heads,
                            const std::vector<float>& o, const std::vector<float>& lse);

// The one GPU calling convention (BuildIndexOnGpu, then DownloadIndex or RunSparseDeviceIndex,
// then ReleaseIndexes) in one call, for tests: the index is dropped before returning, also on
// errors. `block_m` is GpuBuildOptions::block_m. BuildAndDownloadIndex: maybe_times gets the
// build's times. BuildAndRunIndex: maybe_times gets the build's index_seconds and the run's
// schedule / kernel seconds.
absl::Status BuildAndDownloadIndex(CudaAttentionEngine& engine, const AttentionProblem& problem,
                                   const MethodConfig& config, const std::vector<int>& heads,
                                   int block_m, SparseIndex* out,
                                   const CudaLayerAssets* maybe_assets = nullptr,
                                   CudaStageTimes* maybe_times = nullptr);
absl::Status BuildAndRunIndex(CudaAttentionEngine& engine, const AttentionProblem& problem,
                              const MethodConfig& config, const std::vector<int>& heads,
                              int block_m, CudaStageTimes* maybe_times = nullptr,
                              const CudaLayerAssets* maybe_assets = nullptr);

}  // namespace cuda_test
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_CUDA_TEST_UTIL_H_
