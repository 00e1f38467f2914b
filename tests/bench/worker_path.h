// The worker's CUDA request path (server/cuda_backend.h: GPU index builders planning into the
// engine's workspace, the sparse kernel running on the kept index, stats counted on the device),
// driven one head group at a time over tensors already on the GPU: what spattn-bench
// --device=cuda times. A separate file because server/backend.h and tests/bench/backend.h both
// name an AttentionBackend.
#ifndef SPATTN_TESTS_BENCH_WORKER_PATH_H_
#define SPATTN_TESTS_BENCH_WORKER_PATH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"
#include "server/recall_guard.h"

namespace spattn {

// Not thread-safe.
class WorkerCudaPath {
 public:
  // The worker's CUDA backend on `device` with `workspace_bytes` and no staging pool.
  static absl::StatusOr<std::unique_ptr<WorkerCudaPath>> Create(int device,
                                                                int64_t workspace_bytes);
  ~WorkerCudaPath();

  // Starts a request over `device_problem` (Q/K/V/O/LSE in this GPU's memory); ends the one
  // before (its kept indexes are released).
  absl::Status Begin(const AttentionProblem& device_problem);
  // BackendCall::BuildIndex of the request (what the worker's index_build stage spends: the
  // builder, its host round trip and keeping the index), then the stats the worker takes after
  // the kernel (computed pairs per head, counted on the device). Returns the wall milliseconds of
  // the build alone; *pairs_ms (when given) gets the pairs count's, timed apart: the worker pays
  // it once per request in its output stats, not in its index build.
  absl::StatusOr<double> BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                    const BuildOptions& options, SparseIndex* index,
                                    double* pairs_ms = nullptr);
  // Fills `index` on the host (not timed: the bench's fidelity metrics need it; the worker only
  // for recall estimates).
  absl::Status CompleteHostIndex(SparseIndex* index);
  // BackendCall::Attend; returns the wall milliseconds, and in *device_ms the kernel's own time
  // (CUDA events, work schedule included).
  absl::StatusOr<double> Attend(const MethodConfig& config, const SparseIndex& index,
                                double* device_ms);
  // The worker's recall guard (server/recall_guard.h, as the pipeline runs it) on the current
  // request: each head starts from what the guard learned on earlier calls of this length class
  // (GuardMemory, as the worker), builds every group of heads with equal configs, estimates each
  // head on the GPU
  // (BackendCall::MassRecall, `probe_rows` rows) and widens heads short of `target`. Fills the
  // configs the heads end with and their estimates; returns the wall milliseconds of the recall
  // stage (estimates + widening, after the first builds) and in *build_ms those builds'.
  absl::StatusOr<double> Guard(const std::vector<MethodConfig>& config_of_head, double target,
                               int probe_rows, const BuildOptions& options,
                               std::vector<MethodConfig>* guarded, std::vector<double>* estimates,
                               std::vector<int>* widened, double* build_ms);
  // The guard's adaptive tries (RecallGuardOptions::adaptive / adaptive_also / adaptive_auto)
  // for Guard. Default: the worker's (auto: by each head's method in config_of_head).
  void SetGuardAdaptive(const MethodConfig& adaptive, const MethodConfig& adaptive_also,
                        bool adaptive_auto) {
    adaptive_ = adaptive;
    adaptive_also_ = adaptive_also;
    adaptive_auto_ = adaptive_auto;
  }
  // Ends the request.
  void End();

 private:
  struct Rep;
  explicit WorkerCudaPath(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
  MethodConfig adaptive_ = RecallGuardOptions::DefaultAdaptive();
  MethodConfig adaptive_also_;
  bool adaptive_auto_ = true;
};

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_WORKER_PATH_H_
