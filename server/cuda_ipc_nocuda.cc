// The build without nvcc (--config=nocuda): CUDA handles are refused with FAILED_PRECONDITION.
#include "server/cuda_ipc.h"

namespace spattn {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "CUDA handles need a GPU, and this worker was built without CUDA (--config=nocuda)");
}

}  // namespace

absl::Status CudaIpcUsable() { return NoCuda(); }
absl::StatusOr<int> ResolveCudaDevice(const std::string&, int) { return NoCuda(); }
absl::StatusOr<void*> CudaIpcOpen(const std::string&, int) { return NoCuda(); }
void CudaIpcClose(void*, int) {}
absl::StatusOr<std::string> CudaIpcExport(void*) { return NoCuda(); }
absl::Status CudaCopyToHost(void*, const void*, size_t, int) { return NoCuda(); }
absl::Status CudaCopyToDevice(void*, const void*, size_t, int) { return NoCuda(); }
uint64_t CudaMemoryUsed(int) { return 0; }
absl::Status CudaHostRegister(void*, size_t, bool) { return NoCuda(); }
void CudaHostUnregister(void*) {}
absl::StatusOr<int> CudaPointerDevice(const void*) { return NoCuda(); }
absl::Status CudaDeviceCheck(int) { return NoCuda(); }

struct CudaCopyStream::Impl {};

absl::StatusOr<std::unique_ptr<CudaCopyStream>> CudaCopyStream::Create(int) { return NoCuda(); }
CudaCopyStream::CudaCopyStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCopyStream::~CudaCopyStream() = default;
absl::Status CudaCopyStream::ToDevice(void*, size_t, const void*, size_t, size_t, size_t) {
  return NoCuda();
}
absl::Status CudaCopyStream::ToHost(void*, size_t, const void*, size_t, size_t, size_t) {
  return NoCuda();
}
absl::StatusOr<double> CudaCopyStream::Sync() { return NoCuda(); }

}  // namespace spattn
