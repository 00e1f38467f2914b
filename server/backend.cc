#include "server/backend.h"

#include "kernels/cpu/sparse_attention_cpu.h"

namespace spattn {
namespace {

class CpuBackend : public AttentionBackend {
 public:
  CpuBackend() {
    for (Method m : kAllMethods) available_[static_cast<int>(m)] = CpuBuilderAvailable(m);
  }
  std::string kind() const override { return "cpu"; }
  int ordinal() const override { return 0; }
  MemorySpace space() const override { return MemorySpace::kHost; }
  bool MethodAvailable(Method method) const override {
    return available_[static_cast<int>(method)];
  }
  absl::Status CheckDType(DType) const override { return absl::OkStatus(); }
  absl::Status BuildIndex(const AttentionProblem& problem, const MethodConfig& config,
                          const std::vector<int>& heads, const BuildOptions& options,
                          SparseIndex* index) override {
    return BuildSparseIndex(problem, config, heads, options, index);
  }
  absl::Status Attend(const AttentionProblem& problem, const SparseIndex& index) override {
    return SparseAttentionCpu(problem, index);
  }

 private:
  bool available_[sizeof(kAllMethods) / sizeof(kAllMethods[0])] = {};
};

}  // namespace

std::unique_ptr<AttentionBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace spattn
