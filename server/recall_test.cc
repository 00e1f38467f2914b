// Attention-mass recall against an independent computation: with every row sampled, the recall
// of a mask is the mean over rows of exp(LSE under the mask - LSE over all keys), both from the
// double-precision reference.
#include "server/recall.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/builders/simple_patterns.h"
#include "kernels/host_problem.h"
#include "kernels/reference/reference_attention.h"

namespace spattn {
namespace {

TEST(RecallTest, MatchesReferenceLseRatioOverAllRows) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    ProblemShape s;
    s.q_lens = {40, 97};
    s.k_lens = {120, 97};  // A chunk and a full prompt.
    s.num_q_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.dtype = dtype;
    HostProblem hp(s);
    hp.FillRandom(9, 2.f);  // Peaky scores, so the mask matters.
    const AttentionProblem& p = hp.problem();
    AShapeParams params;
    params.sink_tokens = 4;
    params.local_tokens = 16;
    SparseIndex index;
    ASSERT_TRUE(BuildAShapeIndex(p, params, {0, 1, 2, 3}, 16, &index).ok());
    ReferenceMasks masks;
    for (int h = 0; h < 4; ++h) {
      for (int b = 0; b < 2; ++b) masks.push_back(DensifyMask(p, index, h, b));
    }
    std::vector<float> out, lse_full, lse_masked;
    ASSERT_TRUE(ReferenceAttention(p, {}, {}, &out, &lse_full).ok());
    ASSERT_TRUE(ReferenceAttention(p, {}, masks, &out, &lse_masked).ok());
    for (int h = 0; h < 4; ++h) {
      double want = 0;
      for (int row = 0; row < p.total_q(); ++row) {
        want += std::exp(double{lse_masked[h * p.total_q() + row]} -
                         lse_full[h * p.total_q() + row]);
      }
      want /= p.total_q();
      auto got = EstimateRecall(p, index, h, 1 << 20, 1);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_NEAR(*got, want, 1e-5) << "head " << h << " dtype " << DTypeName(dtype);
      EXPECT_LT(*got, 0.999);
    }
    // A sample is a subset of rows, deterministic in the seed.
    auto a = EstimateRecall(p, index, 0, 10, 7), b = EstimateRecall(p, index, 0, 10, 7);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_GT(*a, 0.0);
    EXPECT_LE(*a, 1.0);
  }
}

TEST(RecallTest, DenseIndexHasRecallOneAndBadArgumentsAreRejected) {
  ProblemShape s;
  s.q_lens = {50};
  s.num_q_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 32;
  HostProblem hp(s);
  hp.FillRandom(2);
  SparseIndex index;
  ASSERT_TRUE(BuildDenseIndex(hp.problem(), {1}, 16, &index).ok());
  auto r = EstimateRecall(hp.problem(), index, 0, 64, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(*r, 1.0, 1e-12);
  EXPECT_EQ(EstimateRecall(hp.problem(), index, 1, 64, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EstimateRecall(hp.problem(), index, 0, 0, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
