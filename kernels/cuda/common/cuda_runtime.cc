#include "kernels/cuda/common/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace spattn {

bool CudaCompiledIn() { return true; }

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why_none) {
      *why_none = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(err));
    }
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.ordinal = i;
    info.name = prop.name;
    char uuid[64];
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof(uuid),
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    info.uuid = uuid;
    info.memory_bytes = prop.totalGlobalMem;
    info.multiprocessors = prop.multiProcessorCount;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    out.push_back(info);
  }
  if (out.empty() && why_none) *why_none = "no CUDA device found";
  return out;
}

}  // namespace spattn
