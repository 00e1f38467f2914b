#include "tests/bench/backend.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sparse_attention_cpu.h"

namespace spattn {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

class CpuBackend : public AttentionBackend {
 public:
  std::string name() const override { return "cpu"; }

  absl::Status Prepare(AttentionProblem* host_problem) override {
    problem_ = host_problem;
    return absl::OkStatus();
  }

  absl::StatusOr<double> BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                    const BuildOptions& options, SparseIndex* index) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = BuildSparseIndex(*problem_, config, heads, options, index);
    if (!s.ok()) return s;
    return MillisSince(start);
  }

  absl::StatusOr<double> RunKernel(const SparseIndex& index) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = SparseAttentionCpu(*problem_, index);
    if (!s.ok()) return s;
    return MillisSince(start);
  }

  absl::Status FetchOutput() override { return absl::OkStatus(); }

 private:
  AttentionProblem* problem_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return std::unique_ptr<AttentionBackend>(new CpuBackend());
  if (device == "cuda") {
    return absl::FailedPreconditionError(
        "device cuda: this build has no CUDA sparse-attention backend yet (kernels/cuda offers "
        "device discovery only); run with --device=cpu");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device: unknown '", device, "' (expected cpu or cuda)"));
}

}  // namespace spattn
