// The exp2 of the GPU sampled_lines passes (ex2.approx.ftz) is non-decreasing over every float:
// pass 3 keeps an entry by a threshold on its raw product q . k, which equals the per-entry mass
// test of sampled_lines.cu only then. Exhaustive over the 2^32 - 2^24 non-NaN floats (~ms on an
// H100); skips without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/common/cuda_runtime.h"
#ifdef SPATTN_SL_EXP2_KERNEL
#include "kernels/cuda/builders/sampled_lines_exp2.h"
#endif

namespace spattn {
namespace {

TEST(SampledLinesGpuTest, Exp2IsNonDecreasingOverEveryFloat) {
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_SL_EXP2_KERNEL
  unsigned long long inversions = 1;
  ASSERT_EQ(cuda::CountSampledLinesExp2Inversions(&inversions), cudaSuccess);
  EXPECT_EQ(inversions, 0u);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The passes' products by wgmma (the default on compute capability 9.0, session 26) are
// mma.sync's bit for bit, so the index is the one the mma.sync passes built: every head_dim and
// dtype the passes take, 4096 tiles of 64 x 64 products each of varied magnitudes. Skips without
// a GPU and on other compute capabilities (which run the mma.sync passes).
TEST(SampledLinesGpuTest, WgmmaProductsAreMmaSyncProducts) {
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_SL_EXP2_KERNEL
  for (int head_dim : {64, 128}) {
    for (bool bf16 : {true, false}) {
      unsigned long long mismatches = 1, compared = 0;
      const cudaError_t err =
          cuda::CountSampledLinesTileMismatches(head_dim, bf16, 4096, 2026, &mismatches, &compared);
      if (err == cudaErrorNotSupported) GTEST_SKIP() << "not a compute capability 9.0 device";
      ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
      EXPECT_EQ(compared, 4096ull * 64 * 64) << head_dim << (bf16 ? " bf16" : " fp16");
      EXPECT_EQ(mismatches, 0u) << head_dim << (bf16 ? " bf16" : " fp16");
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// Passes 1 and 2 run 5 CTAs per SM on a compute capability 9.0 device (their wgmma instances
// capped at 96 registers, session 27; pass 2's histograms sized by the build's largest group: 21
// blocks at 3 sampled rows per block), pass 3 and the mma.sync instances 4; pass 2 at d 128 falls
// back to its 128-register instance (4) where a group spans 32 blocks. Skips without a GPU.
TEST(SampledLinesGpuTest, PassesOneAndTwoKeepFiveCtasPerSm) {
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_SL_EXP2_KERNEL
  int dev = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), cudaSuccess);
  const bool sm90 = major == 9 && minor == 0;
  for (int head_dim : {64, 128}) {
    for (bool bf16 : {true, false}) {
      const std::string what = std::to_string(head_dim) + (bf16 ? " bf16" : " fp16");
      int ctas = 0;
      ASSERT_EQ(cuda::SampledLinesPassCtas(1, head_dim, bf16, 21, &ctas), cudaSuccess) << what;
      EXPECT_EQ(ctas, sm90 ? 5 : 4) << "pass 1 " << what;
      ASSERT_EQ(cuda::SampledLinesPassCtas(2, head_dim, bf16, 21, &ctas), cudaSuccess) << what;
      EXPECT_EQ(ctas, sm90 ? 5 : 4) << "pass 2, 21 blocks " << what;
      ASSERT_EQ(cuda::SampledLinesPassCtas(2, head_dim, bf16, 32, &ctas), cudaSuccess) << what;
      // d 128: 16 KB key tile + 33 KB histograms leave room for 4; d 64 (8 KB tile) for 5.
      EXPECT_EQ(ctas, sm90 && head_dim == 64 ? 5 : 4) << "pass 2, 32 blocks " << what;
      ASSERT_EQ(cuda::SampledLinesPassCtas(3, head_dim, bf16, 21, &ctas), cudaSuccess) << what;
      EXPECT_EQ(ctas, 4) << "pass 3 " << what;
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace spattn
