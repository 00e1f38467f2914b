// An attention backend: one device's way of building sparse indexes and running the sparse
// kernel. The worker runs every request on a backend through the same pipeline; the CPU backend
// (index builders + SparseAttentionCpu) always exists, and a CUDA backend slots in by
// implementing this interface for one GPU.
#ifndef SPATTN_SERVER_BACKEND_H_
#define SPATTN_SERVER_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// Implementations must be thread-safe when the executor runs several threads on one device.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string kind() const = 0;  // "cpu" or "cuda"
  virtual int ordinal() const = 0;       // Device ordinal (0 for the CPU).
  // Where Q/K/V/O must be for Attend (the pipeline stages copies when handles point elsewhere).
  virtual MemorySpace space() const = 0;
  virtual bool MethodAvailable(Method method) const = 0;
  // OK, or FAILED_PRECONDITION when the device cannot compute in `dtype`.
  virtual absl::Status CheckDType(DType dtype) const = 0;
  // Builds the index of `heads` under `config`. The result is a host SparseIndex (the pipeline
  // reads it for stats); a device backend may keep its own copy next to it.
  virtual absl::Status BuildIndex(const AttentionProblem& problem, const MethodConfig& config,
                                  const std::vector<int>& heads, const BuildOptions& options,
                                  SparseIndex* index) = 0;
  // Writes O (and the LSE when asked) for the heads of `index`.
  virtual absl::Status Attend(const AttentionProblem& problem, const SparseIndex& index) = 0;
};

// The CPU backend: host memory, every method whose CPU builder is implemented, bf16/fp16/fp32.
std::unique_ptr<AttentionBackend> MakeCpuBackend();

}  // namespace spattn

#endif  // SPATTN_SERVER_BACKEND_H_
