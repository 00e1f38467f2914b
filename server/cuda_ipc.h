// The few CUDA runtime calls the worker needs outside the kernels (IPC handles, copies, pinned
// host memory, memory use, device health), behind plain functions and one small class so that
// CPU-only builds (--config=nocuda) link a variant that reports FAILED_PRECONDITION.
// Functions are thread-safe.
#ifndef SPATTN_SERVER_CUDA_IPC_H_
#define SPATTN_SERVER_CUDA_IPC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spattn {

// OK when CUDA IPC can work here (CUDA compiled in and a device present), else
// FAILED_PRECONDITION saying why.
absl::Status CudaIpcUsable();

// The ordinal of the device with `uuid` ("GPU-..."), or `device_id` when uuid is empty.
// FAILED_PRECONDITION when no such device is visible here (the handle is unusable on this
// worker).
absl::StatusOr<int> ResolveCudaDevice(const std::string& uuid, int device_id);

// Opens a 64-byte cudaIpcMemHandle_t on `device`; the pointer stays valid until CudaIpcClose.
absl::StatusOr<void*> CudaIpcOpen(const std::string& raw_handle, int device);
void CudaIpcClose(void* ptr, int device);
// The producer's side (clients, tests, benchmarks): the 64-byte handle of a cudaMalloc'd block.
absl::StatusOr<std::string> CudaIpcExport(void* device_ptr);

// Synchronous copies between host and device memory on `device`.
absl::Status CudaCopyToHost(void* dst, const void* src, size_t bytes, int device);
absl::Status CudaCopyToDevice(void* dst, const void* src, size_t bytes, int device);

// Bytes in use on `device` (total - free), or 0 when unknown.
uint64_t CudaMemoryUsed(int device);

// Page-locks [ptr, ptr + bytes) of host memory (e.g. a mapped shared-memory region) for every
// device, so that copies from and to it run at full DMA speed without a bounce buffer.
// `read_only`: the mapping is not writable. Errors leave the memory pageable (still usable).
absl::Status CudaHostRegister(void* ptr, size_t bytes, bool read_only);
void CudaHostUnregister(void* ptr);

// The device whose memory `ptr` points into, or INVALID_ARGUMENT when it is no device memory.
absl::StatusOr<int> CudaPointerDevice(const void* ptr);

// OK while `device` works; the sticky error otherwise (a faulted kernel, a lost GPU: the CUDA
// context of this process is unusable and the process must restart).
absl::Status CudaDeviceCheck(int device);

// Asynchronous copies between host and device memory of one device on a stream of its own, timed
// with CUDA events: enqueue any number, then Sync. Strided copies move `rows` rows of `row_bytes`
// bytes each, `*_pitch` bytes apart. Thread-compatible: one user at a time.
class CudaCopyStream {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCopyStream>> Create(int device);
  ~CudaCopyStream();
  CudaCopyStream(const CudaCopyStream&) = delete;
  CudaCopyStream& operator=(const CudaCopyStream&) = delete;

  absl::Status ToDevice(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                        size_t row_bytes, size_t rows);
  absl::Status ToHost(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      size_t row_bytes, size_t rows);
  // Waits for every copy enqueued since the last Sync; returns the seconds they took on the
  // device (0 when there were none).
  absl::StatusOr<double> Sync();

  struct Impl;

 private:
  explicit CudaCopyStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_CUDA_IPC_H_
