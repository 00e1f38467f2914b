// The shared estimation helpers: last-rows attention, line sums, pooling, ranking, cumulative
// selection.
#include "kernels/builders/estimate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/builders/testing/builder_test_util.h"

namespace spattn {
namespace {

using testing::MakeShape;
using testing::RandomProblem;

TEST(EstimateTest, RowAttentionMatchesExactSoftmax) {
  for (bool causal : {true, false}) {
    auto hp = RandomProblem(MakeShape({20, 37}, {50, 300}, 4, 2, 64, DType::kBF16, causal), 7);
    const AttentionProblem& p = hp->problem();
    for (int seq = 0; seq < 2; ++seq) {
      const int ql = p.q_len(seq), kl = p.k_len(seq);
      std::vector<float> got;
      RowAttention(p, seq, 3, ql - 9, ql, &got);
      const std::vector<double> want = testing::ExactProbs(p, 3, seq, ql - 9, ql);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * want[i]) << "causal " << causal << " at " << i;
      }
      // Rows sum to one; masked keys are exactly zero.
      for (int r = 0; r < 9; ++r) {
        double sum = 0;
        for (int j = 0; j < kl; ++j) sum += got[static_cast<size_t>(r) * kl + j];
        EXPECT_NEAR(sum, 1.0, 1e-5);
        if (causal) {
          const int pos = p.query_pos(seq, ql - 9 + r);
          for (int j = pos + 1; j < kl; ++j) EXPECT_EQ(got[static_cast<size_t>(r) * kl + j], 0.f);
        }
      }
    }
  }
}

// Two rows at positions 3 and 4 (chunked: q_len 2 of k_len 5), probabilities set by hand:
//   row 0 (pos 3): keys 0..3 = [.1 .2 .3 .4] -> offsets 3, 2, 1, 0
//   row 1 (pos 4): keys 0..4 = [.5 0 0 .25 .25] -> offsets 4, 3, 2, 1, 0
// Diagonal sums: o0 = .4 + .25, o1 = .3 + .25, o2 = .2 + 0, o3 = .1 + 0, o4 = .5.
TEST(EstimateTest, SumDiagonalsByHand) {
  auto hp = RandomProblem(MakeShape({2}, {5}, 1, 1), 1);
  const std::vector<float> probs = {.1f, .2f, .3f, .4f, 0.f, .5f, 0.f, 0.f, .25f, .25f};
  const DiagonalSums d = SumDiagonals(hp->problem(), 0, 0, 2, probs.data());
  EXPECT_EQ(d.min_offset, 0);
  ASSERT_EQ(d.num_offsets(), 5);
  const double want[5] = {.65, .55, .2, .1, .5};
  for (int o = 0; o < 5; ++o) EXPECT_NEAR(d.sums[o], want[o], 1e-7) << o;
  const std::vector<double> cols = SumColumns(probs.data(), 2, 5);
  EXPECT_NEAR(cols[0], .6, 1e-7);
  EXPECT_NEAR(cols[3], .65, 1e-7);
  EXPECT_NEAR(cols[4], .25, 1e-7);
}

TEST(EstimateTest, RankingTiesAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> s = {0.5, nan, 0.9, 0.5, 0.1, 0.9};
  EXPECT_EQ(TopK(s.data(), 6, 3), (std::vector<int32_t>{2, 5, 0}));
  EXPECT_EQ(RankAll(s.data(), 6), (std::vector<int32_t>{2, 5, 0, 3, 4, 1}));
  EXPECT_EQ(TopK(s.data(), 6, 99).size(), 6u);
  EXPECT_TRUE(TopK(s.data(), 6, -1).empty());
  const std::vector<int32_t> order = RankAll(s.data(), 6);
  EXPECT_EQ(CumulativeCount(s.data(), order, 1.8), 2);  // .9 + .9 reaches 1.8 exactly
  EXPECT_EQ(CumulativeCount(s.data(), order, 1.81), 3);
  EXPECT_EQ(CumulativeCount(s.data(), order, 99.0), 6);  // never reached: all
}

TEST(EstimateTest, SoftmaxHandlesNonFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = {0.0, std::log(3.0), -inf};
  SoftmaxInPlace(x.data(), 3);
  EXPECT_NEAR(x[0], 0.25, 1e-12);
  EXPECT_NEAR(x[1], 0.75, 1e-12);
  EXPECT_EQ(x[2], 0.0);
  x = {std::numeric_limits<double>::quiet_NaN(), -inf};
  SoftmaxInPlace(x.data(), 2);
  EXPECT_EQ(x, (std::vector<double>{0.0, 0.0}));
  x = {inf, 1.0, inf};
  SoftmaxInPlace(x.data(), 3);
  EXPECT_EQ(x, (std::vector<double>{0.5, 0.0, 0.5}));
}

TEST(EstimateTest, PooledKeysAreBlockMeans) {
  auto hp = RandomProblem(MakeShape({10, 70}, {10, 70}, 2, 2, 64, DType::kF32), 3);
  const AttentionProblem& p = hp->problem();
  const PooledKeys pk(p, 32);
  ASSERT_EQ(pk.num_blocks(0), 1);
  ASSERT_EQ(pk.num_blocks(1), 3);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 3; ++j) {
      const int r0 = j * 32, r1 = std::min(70, r0 + 32);
      for (int c = 0; c < 64; ++c) {
        double m = 0;
        for (int r = r0; r < r1; ++r) m += testing::KAt(p, p.cu_seqlens_k[1] + r, h, c);
        m /= (r1 - r0);
        EXPECT_NEAR(pk.at(1, h)[c * pk.stride(1) + j], m, 1e-5);
      }
    }
  }
  // ColumnDots against plain dot products.
  std::vector<float> q(64);
  for (int c = 0; c < 64; ++c) q[c] = 0.1f * c - 3.f;
  std::vector<float> out(3);
  ColumnDots(q.data(), 64, pk.at(1, 0), pk.stride(1), 3, out.data());
  for (int j = 0; j < 3; ++j) {
    double dot = 0;
    for (int c = 0; c < 64; ++c) dot += q[c] * pk.at(1, 0)[c * pk.stride(1) + j];
    EXPECT_NEAR(out[j], dot, 1e-3);
  }
}

}  // namespace
}  // namespace spattn
