// The few CUDA runtime calls the worker's handle layer needs (IPC handles, copies, memory use),
// behind plain functions so that CPU-only builds (--config=nocuda) link a variant that reports
// FAILED_PRECONDITION. Thread-safe.
#ifndef SPATTN_SERVER_CUDA_IPC_H_
#define SPATTN_SERVER_CUDA_IPC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spattn {

// OK when CUDA IPC can work here (CUDA compiled in and a device present), else
// FAILED_PRECONDITION saying why.
absl::Status CudaIpcUsable();

// The ordinal of the device with `uuid` ("GPU-..."), or `device_id` when uuid is empty.
// NOT_FOUND when no such device is visible.
absl::StatusOr<int> ResolveCudaDevice(const std::string& uuid, int device_id);

// Opens a 64-byte cudaIpcMemHandle_t on `device`; the pointer stays valid until CudaIpcClose.
absl::StatusOr<void*> CudaIpcOpen(const std::string& raw_handle, int device);
void CudaIpcClose(void* ptr, int device);

// Synchronous copies between host and device memory on `device`.
absl::Status CudaCopyToHost(void* dst, const void* src, size_t bytes, int device);
absl::Status CudaCopyToDevice(void* dst, const void* src, size_t bytes, int device);

// Bytes in use on `device` (total - free), or 0 when unknown.
uint64_t CudaMemoryUsed(int device);

}  // namespace spattn

#endif  // SPATTN_SERVER_CUDA_IPC_H_
