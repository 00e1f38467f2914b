// The exp2 of the GPU sampled_lines passes (ex2.approx.ftz) is non-decreasing over every float:
// pass 3 keeps an entry by a threshold on its raw product q . k, which equals the per-entry mass
// test of sampled_lines.cu only then. Exhaustive over the 2^32 - 2^24 non-NaN floats (~ms on an
// H100); skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
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
// mma.sync's bit for bit, both the RS form (Q fragments in registers) and pass 3's SS form (Q read
// from shared memory, session 28), so the index is the one the mma.sync passes built: every
// head_dim and dtype the passes take, 4096 tiles of 64 x 64 products each of varied magnitudes.
// Skips without a GPU and on other compute capabilities (which run the mma.sync passes).
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

// The passes' CTAs per SM (session 27): an instance capped for 5 CTAs per SM (96 registers; by
// default the wgmma instances of passes 1 and 2 on a compute capability 9.0 device,
// SPATTN_SL_CTAS=P1,P2) keeps >= 5 resident, pass 2's histograms sized by the build's largest group
// (21 blocks at 3 sampled rows per block); where a group spans 32 blocks pass 2 at d 128 (33 KB of
// histograms) falls back to its 128-register instance; those at d 128 keep 4. Skips without a GPU.
TEST(SampledLinesGpuTest, PassesKeepTheirCtasPerSm) {
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_SL_EXP2_KERNEL
  int dev = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), cudaSuccess);
  const bool defaults = std::getenv("SPATTN_SL_CTAS") == nullptr &&
                        std::getenv("SPATTN_SL_WGMMA") == nullptr && major == 9 && minor == 0;
  for (int head_dim : {64, 128}) {
    for (bool bf16 : {true, false}) {
      for (int pass = 1; pass <= 3; ++pass) {
        for (int blocks : {21, 32}) {
          const std::string at = "pass " + std::to_string(pass) + ", " + std::to_string(blocks) +
                                 " blocks, d " + std::to_string(head_dim) +
                                 (bf16 ? " bf16" : " fp16");
          int ctas = 0, capped_for = 0;
          ASSERT_EQ(cuda::SampledLinesPassCtas(pass, head_dim, bf16, blocks, &ctas, &capped_for),
                    cudaSuccess)
              << at;
          if (defaults) {
            EXPECT_EQ(capped_for, 5) << at;  // pass 3's since session 28 (Q by the SS wgmma)
          }
          if (capped_for == 5 && !(pass == 2 && head_dim == 128 && blocks == 32)) {
            EXPECT_GE(ctas, 5) << at;  // d 64's pass 1 (79 registers): 6
          } else if (head_dim == 128) {
            EXPECT_EQ(ctas, 4) << at;
          } else {
            EXPECT_GE(ctas, 4) << at;  // d 64's 128-register instances may use fewer (pass 1: 88)
          }
        }
      }
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace spattn
