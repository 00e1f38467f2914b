// An attention backend: one device's way of building sparse indexes and running the sparse
// kernel. The worker runs every request on a backend through the same pipeline: it resolves the
// request's handles into BoundTensors (host or device memory, wherever the caller put them) and
// calls Begin, which places the tensors where the device wants them (staging copies only where
// needed) and returns a BackendCall that builds, attends and delivers the output.
// The CPU backend (index builders + SparseAttentionCpu) always exists; the CUDA backend
// (server/cuda_backend.h) serves one GPU through CudaAttentionEngine.
#ifndef SPATTN_SERVER_BACKEND_H_
#define SPATTN_SERVER_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"
#include "server/request.h"

namespace spattn {

// One resolved tensor: where its bytes are and how they got there.
struct BoundTensor {
  void* data = nullptr;  // First element (host or device pointer); const for inputs.
  MemorySpace space = MemorySpace::kHost;
  int device = 0;  // CUDA ordinal when space == kCuda.
  HandleKind kind = HandleKind::kInline;
  int64_t bytes = 0;  // Span from the first to one past the last element.
};

// The tensors of one request. Strides, sizes and dtype are those of the problem given to Begin.
struct RequestTensors {
  BoundTensor q, k, v, o;
  float* maybe_lse = nullptr;  // Host [num_q_heads, total_q] (inline LSE), or null.
};

// Bytes a backend copied between host and device for one request, by the handle kind the bytes
// came through (spattn_transfer_bytes_total{direction="h2d"|"d2h"}).
struct CopiedBytes {
  bool to_device = true;
  HandleKind kind = HandleKind::kInline;
  int64_t bytes = 0;
};

// Stage seconds a device measured itself (CUDA events); negative = not measured (the pipeline
// then keeps its wall-clock time for that stage).
struct DeviceSeconds {
  double kernel = -1;    // Sparse kernel + its work schedule.
  double transfer = -1;  // Host <-> device copies of tensors, sequence offsets and indexes.
};

// One request on one backend; it owns the staging it made. Used by one thread at a time.
class BackendCall {
 public:
  virtual ~BackendCall() = default;
  // Builds the index of `heads` under `config` (a host SparseIndex, read for stats; a device
  // backend may keep its own copy).
  virtual absl::Status BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                  const BuildOptions& options, SparseIndex* index) = 0;
  // Computes O (and the LSE when asked) for the heads of `index`, built under `config`.
  virtual absl::Status Attend(const MethodConfig& config, const SparseIndex& index) = 0;
  // Per head slot of `index` (as BuildIndex left it), the (query, key) pairs the kernel computes
  // (ComputedPairs of kernels/sparse_index.h), for the stats. The default counts them on the host
  // from the index; a device backend that keeps the index on the device (its host `index` then
  // holds only heads, block_m and block_offsets) counts them there.
  virtual absl::StatusOr<std::vector<int64_t>> ComputedPairsPerSlot(const AttentionProblem& problem,
                                                                    const MethodConfig& config,
                                                                    const SparseIndex& index);
  // Fills `index` on the host when BuildIndex kept it on the device only. Default: nothing to do.
  virtual absl::Status CompleteHostIndex(SparseIndex* index) { return absl::OkStatus(); }
  // Per head slot of `index` (as BuildIndex left it), the attention-mass recall over the query
  // rows SampleQueryRows(problem, rows, seed) picks (AttentionMassRecall, kernels/fidelity.h):
  // the recall guard's estimate and `estimate_recall`. The default computes it on the host
  // (HostView, CompleteHostIndex); a device backend computes it where Q/K and the index are.
  virtual absl::StatusOr<std::vector<double>> MassRecall(SparseIndex* index, int rows,
                                                         uint64_t seed);
  // Saap's learned inputs of the request's layer, for a device builder that keeps its own copy
  // (held while the backend caches it). Called before BuildIndex when a group is Saap. Default:
  // ignored (BuildOptions::maybe_assets serves the host builders).
  virtual void UseLayerAssets(std::shared_ptr<const LayerAssets> assets) {}
  // Delivers O and the LSE to where the request wants them (copies back staged outputs).
  virtual absl::Status Finish() = 0;
  // The problem with host Q/K/V pointers (copying device tensors to the host when needed), for
  // the default MassRecall.
  virtual absl::StatusOr<const AttentionProblem*> HostView() = 0;
  virtual std::vector<CopiedBytes> copies() const = 0;
  virtual DeviceSeconds device_seconds() const { return DeviceSeconds(); }
};

// Implementations must be thread-safe when the executor runs several threads on one device.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string kind() const = 0;  // "cpu" or "cuda"
  virtual int ordinal() const = 0;       // Device ordinal (0 for the CPU).
  // "cpu" or "cuda:N": names the device in errors, logs and queues.
  std::string name() const;
  // Whether this backend can serve `method` (with whichever builder).
  virtual bool MethodAvailable(Method method) const = 0;
  // Whether the index of `method` is built on the device itself (else on the host CPU).
  virtual bool DeviceBuilder(Method method) const { return false; }
  // OK, or FAILED_PRECONDITION when the device cannot compute in `dtype`.
  virtual absl::Status CheckDType(DType dtype) const = 0;
  // OK while the device works; after a device failure (a lost or faulted GPU) the error that
  // says so, and every later Begin fails with UNAVAILABLE.
  virtual absl::Status Health() const { return absl::OkStatus(); }
  // Starts a request: `problem` carries sizes, cu_seqlens, dtype, scale and the strides of
  // `tensors` (its pointers are ignored). Errors name the tensor ("q: ...").
  virtual absl::StatusOr<std::unique_ptr<BackendCall>> Begin(const AttentionProblem& problem,
                                                             const RequestTensors& tensors) = 0;
};

// The CPU backend: host memory, every method whose CPU builder is implemented, bf16/fp16/fp32.
// Tensors in GPU memory (CUDA handles) are copied to the host and the output back.
std::unique_ptr<AttentionBackend> MakeCpuBackend();

}  // namespace spattn

#endif  // SPATTN_SERVER_BACKEND_H_
