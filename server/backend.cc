#include "server/backend.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/fidelity.h"
#include "kernels/status_macros.h"
#include "server/cuda_ipc.h"

namespace spattn {

absl::StatusOr<std::vector<int64_t>> BackendCall::ComputedPairsPerSlot(
    const AttentionProblem& problem, const MethodConfig& config, const SparseIndex& index) {
  std::vector<int64_t> out(index.num_heads());
  // Static patterns give every head the same rows: count them once (long contexts have
  // thousands of rows per head).
  const bool same_rows = config.method == Method::kDense || config.method == Method::kAShape;
  for (int slot = 0; slot < index.num_heads(); ++slot) {
    out[slot] = same_rows && slot > 0 ? out[0] : ComputedPairs(problem, index, slot);
  }
  return out;
}

absl::StatusOr<std::vector<double>> BackendCall::MassRecall(SparseIndex* index, int rows,
                                                            uint64_t seed) {
  SPATTN_ASSIGN_OR_RETURN(const AttentionProblem* host, HostView());
  SPATTN_RETURN_IF_ERROR(CompleteHostIndex(index));
  std::vector<double> out(index->num_heads());
  for (int slot = 0; slot < index->num_heads(); ++slot) {
    SPATTN_ASSIGN_OR_RETURN(out[slot], AttentionMassRecall(*host, *index, slot, rows, seed));
  }
  return out;
}

std::string AttentionBackend::name() const {
  return kind() == "cpu" ? std::string("cpu") : absl::StrCat(kind(), ":", ordinal());
}

namespace {

// A request on the CPU: host tensors are used in place; tensors in GPU memory are copied to the
// host first, and a GPU output back at the end.
class CpuCall : public BackendCall {
 public:
  explicit CpuCall(const AttentionProblem& problem) : p_(problem) { p_.space = MemorySpace::kHost; }

  absl::Status Bind(const RequestTensors& t) {
    SPATTN_ASSIGN_OR_RETURN(p_.q.data, Input("q", t.q));
    SPATTN_ASSIGN_OR_RETURN(p_.k.data, Input("k", t.k));
    SPATTN_ASSIGN_OR_RETURN(p_.v.data, Input("v", t.v));
    if (t.o.space == MemorySpace::kCuda) {
      staging_.emplace_back(static_cast<size_t>(t.o.bytes));
      device_output_ = t.o;
      p_.o = staging_.back().data();
    } else {
      p_.o = t.o.data;
    }
    p_.maybe_lse = t.maybe_lse;
    return p_.Validate();
  }

  absl::Status BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                          const BuildOptions& options, SparseIndex* index) override {
    return BuildSparseIndex(p_, config, heads, options, index);
  }
  absl::Status Attend(const MethodConfig&, const SparseIndex& index) override {
    return SparseAttentionCpu(p_, index);
  }
  absl::Status Finish() override {
    if (device_output_.data == nullptr) return absl::OkStatus();
    SPATTN_RETURN_IF_ERROR(CudaCopyToDevice(device_output_.data, p_.o,
                                            static_cast<size_t>(device_output_.bytes),
                                            device_output_.device));
    copies_.push_back({true, device_output_.kind, device_output_.bytes});
    return absl::OkStatus();
  }
  absl::StatusOr<const AttentionProblem*> HostView() override { return &p_; }
  std::vector<CopiedBytes> copies() const override { return copies_; }

 private:
  absl::StatusOr<const void*> Input(const char* name, const BoundTensor& t) {
    if (t.space == MemorySpace::kHost) return static_cast<const void*>(t.data);
    staging_.emplace_back(static_cast<size_t>(t.bytes));
    const absl::Status s =
        CudaCopyToHost(staging_.back().data(), t.data, static_cast<size_t>(t.bytes), t.device);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name, ": ", s.message()));
    copies_.push_back({false, t.kind, t.bytes});
    return static_cast<const void*>(staging_.back().data());
  }

  AttentionProblem p_;
  std::deque<std::vector<uint8_t>> staging_;  // Host copies of device tensors.
  BoundTensor device_output_;                 // data == nullptr: the output is on the host.
  std::vector<CopiedBytes> copies_;
};

class CpuBackend : public AttentionBackend {
 public:
  CpuBackend() {
    for (Method m : kAllMethods) available_[static_cast<int>(m)] = CpuBuilderAvailable(m);
  }
  std::string kind() const override { return "cpu"; }
  int ordinal() const override { return 0; }
  bool MethodAvailable(Method method) const override {
    return available_[static_cast<int>(method)];
  }
  absl::Status CheckDType(DType) const override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<BackendCall>> Begin(const AttentionProblem& problem,
                                                     const RequestTensors& tensors) override {
    auto call = std::make_unique<CpuCall>(problem);
    SPATTN_RETURN_IF_ERROR(call->Bind(tensors));
    return std::unique_ptr<BackendCall>(std::move(call));
  }

 private:
  bool available_[sizeof(kAllMethods) / sizeof(kAllMethods[0])] = {};
};

}  // namespace

std::unique_ptr<AttentionBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace spattn
