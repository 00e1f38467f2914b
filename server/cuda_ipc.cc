#include "server/cuda_ipc.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_runtime.h"

namespace spattn {
namespace {

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

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
  if (!uuid.empty()) return absl::NotFoundError("device_uuid: no such GPU on this worker");
  return absl::NotFoundError(absl::StrCat("device_id: no GPU ", device_id, " on this worker (",
                                          devices.size(), " visible)"));
}

absl::StatusOr<void*> CudaIpcOpen(const std::string& raw_handle, int device) {
  if (raw_handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("raw_handle: expected ",
                                                   sizeof(cudaIpcMemHandle_t), " bytes, got ",
                                                   raw_handle.size()));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  void* ptr = nullptr;
  err = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    // A handle from this very process, a stale handle or another host's handle ends up here.
    return absl::FailedPreconditionError(
        absl::StrCat("cudaIpcOpenMemHandle failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void CudaIpcClose(void* ptr, int device) {
  if (cudaSetDevice(device) == cudaSuccess) cudaIpcCloseMemHandle(ptr);
}

absl::Status CudaCopyToHost(void* dst, const void* src, size_t bytes, int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  err = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return CudaError("cudaMemcpy device to host", err);
  return absl::OkStatus();
}

absl::Status CudaCopyToDevice(void* dst, const void* src, size_t bytes, int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return CudaError("cudaMemcpy host to device", err);
  return absl::OkStatus();
}

uint64_t CudaMemoryUsed(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return 0;
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return total - free_bytes;
}

}  // namespace spattn
