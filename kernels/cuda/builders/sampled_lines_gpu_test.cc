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

}  // namespace
}  // namespace spattn
