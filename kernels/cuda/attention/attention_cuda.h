// CudaAttentionEngine: the host API of the CUDA attention kernels (no CUDA types here).
//
// One engine per device. It reserves a workspace pool on the device at Create(); every call
// carves its scratch (uploaded sequence offsets and sparse indexes, the sparse kernel's work
// list, and on the host path the Q/K/V/O/LSE copies) out of that pool, so nothing is allocated
// with cudaMalloc on the request path. A call that does not fit answers RESOURCE_EXHAUSTED.
//
// Supported: bf16 and fp16, head_dim 64 and 128, GQA, varlen batches, chunked prefill (queries
// are the last q_len key positions, causal mask aligned bottom-right), causal or full masks,
// sparse indexes with block_m 64 or 128. Q/K/V/O need a contiguous last dimension, 16-byte
// aligned rows (strides multiple of 8 elements) and 16-byte aligned base pointers.
//
// Every call enqueues its work on the engine's own stream and waits for it: when a call returns
// OK, the outputs are in place. Stage times are measured with CUDA events.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_
#define SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {
class EngineAccess;
}  // namespace cuda

// Seconds spent per stage of one call (0 for stages the call does not have).
struct CudaStageTimes {
  double upload_seconds = 0;    // host → device: Q/K/V (host path), offsets, a host index
  double index_seconds = 0;     // GPU index builders (BuildIndexOnGpu)
  double schedule_seconds = 0;  // ordering the sparse kernel's rows by cost
  double kernel_seconds = 0;    // the attention kernel itself
  double download_seconds = 0;  // device → host: O and LSE (host path)
};

struct CudaEngineOptions {
  // Kernel shape (for benchmarks and tests): 0 = default (measured best), 1 = 8 warps of 16
  // query rows (mma.sync), 2 = 4 warps of 32 rows (mma.sync), 3 = Hopper wgmma warpgroups,
  // 4 = 3 with deeper pipelines (3 and 4 fall back to 2 off Hopper). Variants 1 and 2 apply to
  // block_m 128; block_m 64 uses 4 warps of 16 rows, or one wgmma warpgroup with 3 and 4.
  // 5 = Hopper warp-specialized kernels (TMA producer, ping-pong consumer warpgroups;
  // attention/hopper/): dense, and sparse with block_m 128 on a persistent grid (block_m 64
  // as 4); 6 = 5 with the dense kernel on the persistent grid too; 2 off Hopper.
  // 0 = 5 on Hopper, 2 elsewhere. Default: 0.
  int kernel_variant = 0;
};

// Device memory owned by the caller (tests, benchmarks, a worker's own buffers): cudaMalloc'd
// once, freed on destruction. Not for the request path (use the engine's workspace there).
// Thread-compatible: one owner at a time.
class CudaDeviceBuffer {
 public:
  // FAILED_PRECONDITION without a device, RESOURCE_EXHAUSTED when the memory is not there.
  static absl::StatusOr<std::unique_ptr<CudaDeviceBuffer>> Allocate(int device, int64_t bytes);
  ~CudaDeviceBuffer();
  CudaDeviceBuffer(const CudaDeviceBuffer&) = delete;
  CudaDeviceBuffer& operator=(const CudaDeviceBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // Synchronous copies of `bytes` at byte `offset` of the buffer.
  absl::Status CopyFromHost(const void* src, int64_t bytes, int64_t offset = 0);
  absl::Status CopyToHost(void* dst, int64_t bytes, int64_t offset = 0) const;
  // Sets every byte to `value` (0xff poisons bf16/fp16/fp32 data with NaN).
  absl::Status Fill(uint8_t value);

 private:
  CudaDeviceBuffer(int device, void* data, int64_t bytes)
      : device_(device), data_(data), bytes_(bytes) {}
  int device_;
  void* data_;
  int64_t bytes_;
};

// Saap's LayerAssets of one layer (k-means centroids per kv head, query classifiers per q head,
// RoPE settings) in device memory, made once per layer by CudaAttentionEngine::UploadLayerAssets
// and passed to BuildIndexOnGpu (GpuBuildOptions::maybe_assets). Centroids are kept as bf16 hi + lo
// parts (float-like precision in the key assignment), classifier weights as bf16 for the tensor
// cores, biases and RoPE tables in float / double. Immutable: thread-safe to share between calls of
// the engine that uploaded it (only that engine's device may use it).
class CudaLayerAssets {
 public:
  struct Rep;
  explicit CudaLayerAssets(std::unique_ptr<Rep> rep);
  ~CudaLayerAssets();
  CudaLayerAssets(const CudaLayerAssets&) = delete;
  CudaLayerAssets& operator=(const CudaLayerAssets&) = delete;

  int device() const;
  int head_dim() const;
  int num_centroids() const;
  int64_t bytes() const;  // of device memory held
  const Rep& rep() const;

 private:
  std::unique_ptr<Rep> rep_;
};

// Thread-safe: calls are serialized by an internal mutex (one stream, one workspace).
class CudaAttentionEngine {
 public:
  // Takes device `device` and reserves `workspace_bytes` on it. FAILED_PRECONDITION when the
  // build has no CUDA or there is no such device; RESOURCE_EXHAUSTED when the pool cannot be
  // allocated.
  static absl::StatusOr<std::unique_ptr<CudaAttentionEngine>> Create(
      int device, int64_t workspace_bytes, const CudaEngineOptions& options = {});
  ~CudaAttentionEngine();
  CudaAttentionEngine(const CudaAttentionEngine&) = delete;
  CudaAttentionEngine& operator=(const CudaAttentionEngine&) = delete;

  int device() const;
  int64_t workspace_bytes() const;

  // ---- Device-pointer path: problem.space == kCuda; q/k/v/o/maybe_lse are device pointers
  // of this engine's device, cu_seqlens stay host vectors (uploaded by the call).

  // Dense attention over every q head.
  absl::Status RunDense(const AttentionProblem& problem, CudaStageTimes* maybe_times = nullptr);
  // Sparse attention under a host index (validated against the problem, then uploaded).
  absl::Status RunSparse(const AttentionProblem& problem, const SparseIndex& index,
                         CudaStageTimes* maybe_times = nullptr);
  // Sparse attention under an index already in device memory: a GpuSparseIndex's view
  // (BuildIndexOnGpu, build_index_gpu.h: the worker's path) or UploadSparseIndex's. Not
  // validated: builders guarantee the invariants of sparse_index.h. INVALID_ARGUMENT when the
  // index's block_m is not 64 or 128 (a method's own block_size may build other indexes).
  // The one way to run a GPU-built index: BuildIndexOnGpu (plan), this (run), ReleaseIndexes.
  absl::Status RunSparseDeviceIndex(const AttentionProblem& problem,
                                    const SparseIndexView& device_index,
                                    CudaStageTimes* maybe_times = nullptr);

  // ---- Host-buffer path: problem.space == kHost. Copies Q/K/V in, runs the dense kernel
  // (maybe_index null) or the sparse kernel, copies O (and LSE) out.
  absl::Status RunHost(const AttentionProblem& problem, const SparseIndex* maybe_index,
                       CudaStageTimes* maybe_times = nullptr);

  // Checks Saap's `assets` for head_dim as the CPU builder would (INVALID_ARGUMENT naming the
  // field) and copies them to this engine's device (cudaMalloc: once per layer, not on the
  // request path). UNIMPLEMENTED for classifiers the GPU builder does not run: more than two
  // layers, hidden width over 1024, more than 4096 centroids, different shapes per head.
  absl::StatusOr<std::unique_ptr<CudaLayerAssets>> UploadLayerAssets(const LayerAssets& assets,
                                                                     int head_dim);

  // Whether config.method has a GPU index builder (GpuBuilderAvailable in build_index_gpu.h).
  static bool GpuBuilderAvailable(Method method);

  // Drops every index BuildIndexOnGpu (build_index_gpu.h) kept in this engine's workspace: their
  // views become invalid and the space returns to the pool. The worker calls it when a request
  // starts.
  void ReleaseIndexes();
  // Bytes of the workspace the kept indexes hold.
  int64_t resident_index_bytes() const;

  class Impl;

 private:
  friend class cuda::EngineAccess;
  explicit CudaAttentionEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Validates `index` against `problem` and copies it into a new device buffer (`storage`, kept by
// the caller as long as the view is used): for indexes reused across calls.
absl::StatusOr<SparseIndexView> UploadSparseIndex(const AttentionProblem& problem,
                                                  const SparseIndex& index, int device,
                                                  std::unique_ptr<CudaDeviceBuffer>* storage);

// The kernels' launch knobs (SPATTN_HOPPER_*, kernels/cuda/README.md) are read from the
// environment once per process, at the first launch. This reads them again: for tests and
// benchmarks that change the environment between calls (no call may be running meanwhile).
// No-op without CUDA.
void ReloadCudaKernelKnobs();

}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_
