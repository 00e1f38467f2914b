// Where spattn-bench runs index builders and the sparse kernel: one interface per device.
// The CPU backend calls the host builders and SparseAttentionCpu (dense too: its index is one
// range per block). The CUDA backend copies Q/K/V
// to the device in Prepare, builds indexes with the GPU builders where the method has one
// (others on the CPU; index time = GPU build time), times the kernel with CUDA events (the dense
// kernel for an index that IsFullDenseIndex, as the worker runs dense over every head, else the
// sparse kernel) and copies O back for the fidelity metrics.
#ifndef SPATTN_TESTS_BENCH_BACKEND_H_
#define SPATTN_TESTS_BENCH_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// One device's builders and kernel. Not thread-safe: one benchmark drives it at a time.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0", ...
  // Takes the host problem the following calls work on (a device backend copies Q/K/V).
  virtual absl::Status Prepare(AttentionProblem* host_problem) = 0;
  // Builds the index of q heads `heads` into `index` (host copy); returns elapsed milliseconds
  // (on a device: the build's device time, without copying the index back).
  virtual absl::StatusOr<double> BuildIndex(const MethodConfig& config,
                                            const std::vector<int>& heads,
                                            const BuildOptions& options, SparseIndex* index) = 0;
  // Wall milliseconds of the stats a device backend's worker path counts after the last
  // BuildIndex (the computed pairs per head; timed apart from the build), else 0.
  virtual double last_pairs_ms() const { return 0; }
  // Runs the sparse kernel over the heads of `index`; returns elapsed milliseconds.
  virtual absl::StatusOr<double> RunKernel(const SparseIndex& index) = 0;
  // Makes the output of the last RunKernel visible in the host problem's O.
  virtual absl::Status FetchOutput() = 0;
  // The worker's recall guard on this device (WorkerCudaPath::Guard): the configs heads end with
  // after it, their estimates and rebuild counts; recall_ms = its stage time, build_ms = the
  // first builds'. UNIMPLEMENTED where the device runs no worker path (the bench then guards on
  // the host).
  struct GuardOutcome {
    std::vector<MethodConfig> configs;
    std::vector<double> estimates;
    std::vector<int> widened;
    double recall_ms = 0, build_ms = 0;
    // With `again`: the same guard once more on this prompt, starting from what the first call
    // learned (a worker's steady state): its recall stage (else 0).
    double warm_recall_ms = 0;
  };
  // The guard's adaptive tries for GuardOnDevice (RecallGuardOptions::adaptive /
  // adaptive_also / adaptive_auto); not called: the worker's default (auto). Backends without a
  // worker path ignore it.
  virtual void SetGuardAdaptive(const MethodConfig& adaptive, const MethodConfig& adaptive_also,
                                bool adaptive_auto) {}
  virtual absl::StatusOr<GuardOutcome> GuardOnDevice(
      const std::vector<MethodConfig>& config_of_head, double target, int probe_rows,
      const BuildOptions& options, bool again = true) {
    return absl::UnimplementedError("no worker path on " + name());
  }
};

// True when `index` holds every q head of `problem` and each of its rows is one range of all the
// keys its block may see (causal: up to the block's last query position) and no columns: dense
// attention, which the CUDA backend then runs with the dedicated dense kernel.
bool IsFullDenseIndex(const AttentionProblem& problem, const SparseIndex& index);

// "cpu", or "cuda" (device 0 through CudaAttentionEngine; FAILED_PRECONDITION, saying why,
// when the build has no CUDA or the machine no GPU); anything else is INVALID_ARGUMENT.
// `gpu_workspace_bytes` sizes the CUDA workspace (0: 8 GiB on a device of 32 GiB or more, else
// 1 GiB).
absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeBackend(const std::string& device,
                                                              int64_t gpu_workspace_bytes = 0);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_BACKEND_H_
