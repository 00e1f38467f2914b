// The dense helpers under the methods-B builders: SGEMM against plain loops over awkward sizes,
// the exp approximation's error bound, RoPE round trips.
#include "kernels/builders/tile_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/builders/saap_math.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

TEST(TileMathTest, SgemmMatchesPlainLoops) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  const int sizes[] = {1, 5, 6, 7, 16, 17, 33, 130};
  for (int m : sizes) {
    for (int n : sizes) {
      for (int k : {1, 7, 64, 257, 520}) {
        const int lda = k + 3, ldb = n + 5, ldc = n + 2;
        std::vector<float> a(static_cast<size_t>(m) * lda), b(static_cast<size_t>(k) * ldb);
        for (float& x : a) x = g(rng);
        for (float& x : b) x = g(rng);
        for (bool acc : {false, true}) {
          std::vector<float> c(static_cast<size_t>(m) * ldc, 1.5f), c2 = c;
          Sgemm(m, n, k, a.data(), lda, b.data(), ldb, acc, c.data(), ldc);
          ParallelSgemm(m, n, k, a.data(), lda, b.data(), ldb, acc, c2.data(), ldc);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < ldc; ++j) {
              const float got = c[i * ldc + j];
              if (j >= n) {  // outside the product: untouched
                ASSERT_EQ(got, 1.5f);
                continue;
              }
              double want = acc ? 1.5 : 0.0, mag = 0;
              for (int p = 0; p < k; ++p) {
                want += double{a[i * lda + p]} * b[p * ldb + j];
                mag += std::fabs(double{a[i * lda + p]} * b[p * ldb + j]);
              }
              // fp32 accumulation: error below k ulps of the sum of magnitudes.
              ASSERT_NEAR(got, want, 1e-7 * k * (mag + 1.5))
                  << m << "x" << n << "x" << k << " acc " << acc;
              ASSERT_EQ(c2[i * ldc + j], got);
            }
          }
        }
      }
    }
  }
}

TEST(TileMathTest, ExpApproxRelativeError) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    worst = std::max(worst, std::fabs(ExpApprox(static_cast<float>(x)) / want - 1));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(ExpApprox(-1000.f), ExpApprox(-87.f));  // clamped, never negative or NaN
  EXPECT_GT(ExpApprox(-1000.f), 0.f);
}

TEST(TileMathTest, RopeRoundTripAndFormula) {
  LayerAssets a;
  a.rope_theta = 5e5;
  const int d = 128;
  const std::vector<double> f = RopeInvFreq(a, d).value();
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.f, 1.f);
  for (bool interleaved : {false, true}) {
    std::vector<float> x(200 * d);
    for (float& v : x) v = g(rng);
    std::vector<float> y = x;
    const int64_t first = 123456;  // long positions: angles formed in double
    RotateRope(y.data(), 200, d, first, f, interleaved, +1);
    // Row 77, pair 3 by the formula.
    const int i = 3, a_idx = interleaved ? 6 : 3, b_idx = interleaved ? 7 : 3 + d / 2;
    const double ang = (first + 77) * std::pow(5e5, -2.0 * i / d);
    const double x1 = x[77 * d + a_idx], x2 = x[77 * d + b_idx];
    EXPECT_NEAR(y[77 * d + a_idx], x1 * std::cos(ang) - x2 * std::sin(ang), 1e-4);
    EXPECT_NEAR(y[77 * d + b_idx], x2 * std::cos(ang) + x1 * std::sin(ang), 1e-4);
    RotateRope(y.data(), 200, d, first, f, interleaved, -1);
    for (size_t e = 0; e < x.size(); ++e) ASSERT_NEAR(y[e], x[e], 1e-5) << e;
  }
  a.rope_inv_freq.assign(3, 1.f);
  EXPECT_EQ(RopeInvFreq(a, d).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeInvFreq(LayerAssets(), 7).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
