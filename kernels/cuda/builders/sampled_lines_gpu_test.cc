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

}  // namespace
}  // namespace spattn
