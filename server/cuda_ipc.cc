#include "server/cuda_ipc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spattn {

absl::Status CudaIpcUsable() {
  std::string why;
  if (ListCudaDevices(&why).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA handles need a GPU on the worker, and it has none (", why, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ResolveCudaDevice(const std::string& uuid, int device_id) {
  std::string why;
  const std::vector<CudaDeviceInfo> devices = ListCudaDevices(&why);
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA handles need a GPU on the worker, and it has none (", why, ")"));
  }
  for (const CudaDeviceInfo& d : devices) {
    if (!uuid.empty() ? d.uuid == uuid : d.ordinal == device_id) return d.ordinal;
  }
  if (!uuid.empty()) {
    return absl::FailedPreconditionError("device_uuid: no such GPU on this worker");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "device_id: no GPU ", device_id, " on this worker (", devices.size(), " visible)"));
}

absl::StatusOr<void*> CudaIpcOpen(const std::string& raw_handle, int device) {
  if (raw_handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_handle: expected ", sizeof(cudaIpcMemHandle_t), " bytes, got ", raw_handle.size()));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaSetDevice");
  void* ptr = nullptr;
  err = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    // A handle from this very process, a stale handle or another host's handle ends up here.
    return absl::FailedPreconditionError(
        absl::StrCat("cudaIpcOpenMemHandle failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

absl::StatusOr<std::string> CudaIpcExport(void* device_ptr) {
  cudaIpcMemHandle_t handle;
  const cudaError_t err = cudaIpcGetMemHandle(&handle, device_ptr);
  if (err != cudaSuccess) return CudaStatus(err, "cudaIpcGetMemHandle");
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

void CudaIpcClose(void* ptr, int device) {
  if (cudaSetDevice(device) != cudaSuccess || cudaIpcCloseMemHandle(ptr) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::Status CudaCopyToHost(void* dst, const void* src, size_t bytes, int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaSetDevice");
  err = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemcpy device to host");
  return absl::OkStatus();
}

absl::Status CudaCopyToDevice(void* dst, const void* src, size_t bytes, int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaSetDevice");
  err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemcpy host to device");
  // From pageable memory the copy returns before its DMA has landed: wait for it, since the
  // reader (the client's process, once the response is sent) is not ordered after this stream.
  err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemcpy host to device (wait)");
  return absl::OkStatus();
}

uint64_t CudaMemoryUsed(int device) {
  size_t free_bytes = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return total - free_bytes;
}

absl::Status CudaHostRegister(void* ptr, size_t bytes, bool read_only) {
  unsigned int flags = cudaHostRegisterPortable;
  if (read_only) flags |= cudaHostRegisterReadOnly;
  const cudaError_t err = cudaHostRegister(ptr, bytes, flags);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cudaHostRegister: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

void CudaHostUnregister(void* ptr) {
  if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

absl::StatusOr<int> CudaPointerDevice(const void* ptr) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError("not a CUDA pointer");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError("not device memory");
  }
  return attr.device;
}

absl::Status CudaDeviceCheck(int device) {
  // Sticky errors (a faulted kernel, a lost device) come back from every call; plain ones were
  // cleared where they happened.
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("GPU ", device, " failed: ", cudaGetErrorName(err),
                                               " (", cudaGetErrorString(err), ")"));
  }
  return absl::OkStatus();
}

struct CudaCopyStream::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool pending = false;  // A copy was enqueued since the last Sync.

  // Records the start event before the first copy of a batch.
  absl::Status Begin() {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return CudaStatus(err, "cudaSetDevice");
    if (!pending) {
      err = cudaEventRecord(start, stream);
      if (err != cudaSuccess) return CudaStatus(err, "cudaEventRecord");
      pending = true;
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<CudaCopyStream>> CudaCopyStream::Create(int device) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaSetDevice");
  err = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaStatus(err, "cudaStreamCreate");
  if ((err = cudaEventCreate(&impl->start)) != cudaSuccess ||
      (err = cudaEventCreate(&impl->stop)) != cudaSuccess) {
    return CudaStatus(err, "cudaEventCreate");
  }
  return std::unique_ptr<CudaCopyStream>(new CudaCopyStream(std::move(impl)));
}

CudaCopyStream::CudaCopyStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaCopyStream::~CudaCopyStream() {
  if (cudaSetDevice(impl_->device) != cudaSuccess) return;
  if (impl_->stream != nullptr) {
    cudaStreamSynchronize(impl_->stream);
    cudaStreamDestroy(impl_->stream);
  }
  if (impl_->start != nullptr) cudaEventDestroy(impl_->start);
  if (impl_->stop != nullptr) cudaEventDestroy(impl_->stop);
}

absl::Status CudaCopyStream::ToDevice(void* dst, size_t dst_pitch, const void* src,
                                      size_t src_pitch, size_t row_bytes, size_t rows) {
  if (rows == 0 || row_bytes == 0) return absl::OkStatus();
  absl::Status s = impl_->Begin();
  if (!s.ok()) return s;
  const cudaError_t err =
      rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)
          ? cudaMemcpyAsync(dst, src, row_bytes * rows, cudaMemcpyHostToDevice, impl_->stream)
          : cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                              cudaMemcpyHostToDevice, impl_->stream);
  if (err != cudaSuccess) return CudaStatus(err, "copy to the GPU");
  return absl::OkStatus();
}

absl::Status CudaCopyStream::ToHost(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                    size_t row_bytes, size_t rows) {
  if (rows == 0 || row_bytes == 0) return absl::OkStatus();
  absl::Status s = impl_->Begin();
  if (!s.ok()) return s;
  const cudaError_t err =
      rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)
          ? cudaMemcpyAsync(dst, src, row_bytes * rows, cudaMemcpyDeviceToHost, impl_->stream)
          : cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                              cudaMemcpyDeviceToHost, impl_->stream);
  if (err != cudaSuccess) return CudaStatus(err, "copy from the GPU");
  return absl::OkStatus();
}

absl::StatusOr<double> CudaCopyStream::Sync() {
  if (!impl_->pending) return 0.0;
  impl_->pending = false;
  cudaError_t err = cudaSetDevice(impl_->device);
  if (err == cudaSuccess) err = cudaEventRecord(impl_->stop, impl_->stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(impl_->stream);
  if (err != cudaSuccess) return CudaStatus(err, "copies between host and GPU");
  float ms = 0;
  err = cudaEventElapsedTime(&ms, impl_->start, impl_->stop);
  if (err != cudaSuccess) return CudaStatus(err, "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace spattn
