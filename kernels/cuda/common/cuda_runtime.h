// Which CUDA devices this process can use. Callable from any build: without CUDA (or without a
// GPU, or a driver) it reports zero devices and says why. Thread-safe.
#ifndef SPATTN_KERNELS_CUDA_COMMON_CUDA_RUNTIME_H_
#define SPATTN_KERNELS_CUDA_COMMON_CUDA_RUNTIME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spattn {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-..." like nvidia-smi
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
  int compute_major = 0, compute_minor = 0;
};

// True when this binary was built with nvcc (not --config=nocuda).
bool CudaCompiledIn();

// The usable devices; empty when there is none. `why_none` (optional) gets the reason.
std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none = nullptr);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_CUDA_RUNTIME_H_
