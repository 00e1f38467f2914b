// The CUDA backend: one GPU through CudaAttentionEngine.
//
// Tensors already in this GPU's memory (CUDA IPC regions, raw CUDA IPC handles) feed the kernels
// in place, with no copy. Tensors in host memory (inline bytes, shared-memory regions) are copied
// once per request into a staging pool reserved on the GPU at start, and a host output is copied
// back once at the end, whatever the number of head groups.
//
// Indexes are planned and run on the device (FlashInfer's plan / run): every method's GPU
// builder (BuildIndexOnGpu, kernels/cuda/builders/build_index_gpu.h) writes its index into the
// engine's workspace, where it stays until the request ends, and the sparse kernel reads it
// there. Only what the stats need comes to the host: the computed pairs per head, counted on the
// device; the whole index only when the request asks for a recall estimate. Dense over every head
// runs the dense kernel without an index. Saap's centroids and classifiers are uploaded once per
// layer and cached on the device (CudaBackendOptions::saap_assets_bytes); a classifier or a
// request past the GPU builder's limits falls back to the CPU builder (host Q/K: for device tensors
// only the heads and query rows it reads are copied), whose index is then uploaded.
#ifndef SPATTN_SERVER_CUDA_BACKEND_H_
#define SPATTN_SERVER_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/backend.h"

namespace spattn {

struct CudaBackendOptions {
  // CUDA device ordinal. Default: 0.
  int device = 0;
  // The engine's pool: sequence offsets, uploaded or GPU-built indexes, the kernel's work list.
  // Requests that do not fit fail with RESOURCE_EXHAUSTED. Default: 1 GiB.
  int64_t workspace_bytes = int64_t{1} << 30;
  // Device copies of host tensors (Q/K/V, the output, the LSE) of one request; 128K tokens of
  // 32 q / 8 kv heads at d = 128 in bf16 need 2.5 GiB. 0 = only tensors already on the GPU.
  // Default: 4 GiB.
  int64_t staging_bytes = int64_t{4} << 30;
  // CudaEngineOptions::kernel_variant. Default: 0 (the measured best for the GPU).
  int kernel_variant = 0;
  // Device copies of Saap's layer assets (centroids, query classifiers) kept across requests,
  // least recently used evicted first (one layer of 32 q / 8 kv heads at the paper's sizes takes
  // ~80 MB). Default: 2 GiB.
  int64_t saap_assets_bytes = int64_t{2} << 30;
};

// Reserves the workspace and the staging pool on `options.device`. FAILED_PRECONDITION without
// CUDA or without that device; RESOURCE_EXHAUSTED when the pools do not fit in its memory.
// The backend runs one request at a time (one stream, one staging pool): more executor threads
// on a CUDA device only queue behind each other. Thread-safe.
absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeCudaBackend(
    const CudaBackendOptions& options);

// Whether a build of `method` that the GPU builder refused with `gpu_status` goes to the CPU
// builder instead: true for UNIMPLEMENTED (the request, or Saap's layer assets, past a GPU
// builder's limits -- the GPU builders check those before anything runs on the GPU, see
// kernels/cuda/builders/build_index_gpu.h) when `method` has a CPU builder; false for every other
// status (the request fails with it). One rule for every method.
bool GpuBuildGoesToCpu(Method method, const absl::Status& gpu_status);

}  // namespace spattn

#endif  // SPATTN_SERVER_CUDA_BACKEND_H_
