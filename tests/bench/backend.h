// Where spattn-bench runs index builders and the sparse kernel: one interface per device.
// The CPU backend calls the host builders and SparseAttentionCpu. The CUDA backend copies Q/K/V
// to the device in Prepare, builds indexes on the GPU where the method has a GPU builder (others
// on the CPU), times builders and the sparse kernel with CUDA events and copies O back for the
// fidelity metrics.
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
  // Builds the index of q heads `heads` into `index` (host copy); returns elapsed milliseconds.
  virtual absl::StatusOr<double> BuildIndex(const MethodConfig& config,
                                            const std::vector<int>& heads,
                                            const BuildOptions& options, SparseIndex* index) = 0;
  // Runs the sparse kernel over the heads of `index`; returns elapsed milliseconds.
  virtual absl::StatusOr<double> RunKernel(const SparseIndex& index) = 0;
  // Makes the output of the last RunKernel visible in the host problem's O.
  virtual absl::Status FetchOutput() = 0;
};

// "cpu", or "cuda" (device 0 through CudaAttentionEngine; FAILED_PRECONDITION, saying why,
// when the build has no CUDA or the machine no GPU); anything else is INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeBackend(const std::string& device);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_BACKEND_H_
