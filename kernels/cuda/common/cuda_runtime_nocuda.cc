// The build without nvcc (--config=nocuda): no devices, and it says so.
#include "kernels/cuda/common/cuda_runtime.h"

namespace spattn {

bool CudaCompiledIn() { return false; }

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA (--config=nocuda)";
  return {};
}

}  // namespace spattn
