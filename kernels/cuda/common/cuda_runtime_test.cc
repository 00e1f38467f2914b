#include "kernels/cuda/common/cuda_runtime.h"

#include <gtest/gtest.h>

namespace spattn {
namespace {

// Runs on any machine: with no GPU the list is empty and the reason is given.
TEST(CudaRuntimeTest, ListsDevicesOrSaysWhyNot) {
  std::string why;
  const std::vector<CudaDeviceInfo> devices = ListCudaDevices(&why);
  if (devices.empty()) {
    EXPECT_FALSE(why.empty());
  } else {
    for (const CudaDeviceInfo& d : devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
      EXPECT_GT(d.memory_bytes, 0u);
    }
  }
}

}  // namespace
}  // namespace spattn
