#include "kernels/workload/attention_stats.h"

#include "gtest/gtest.h"
#include "kernels/host_problem.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

// Zero Q: every row attends uniformly, so the row oracle needs half of each row's keys for 0.5,
// a row's top-k holds k / keys of its mass, and two such prompts agree exactly.
TEST(AttentionStatsTest, UniformAttention) {
  ProblemShape s;
  s.q_lens = {512};
  HostProblem hp(s);
  OracleOptions o;
  o.target = 0.5;
  o.sample_blocks = 100;  // every block
  auto r = OracleDensities(hp.problem(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NEAR((*r)[0].row, 0.5, 0.01);
  // The column and block oracles meet the target on the block's average (not on every row).
  EXPECT_NEAR((*r)[0].column, 0.5, 0.02);
  EXPECT_LE((*r)[0].column, (*r)[0].block + 1e-9);
  TopKRecallOptions t;
  t.top_k = 256;
  t.sample_rows = 0;  // every row
  auto k = TopKRecall(hp.problem(), hp.problem(), t);
  ASSERT_TRUE(k.ok()) << k.status();
  // Rows 0..255 keep everything; row i > 255 keeps 256 / (i + 1).
  double want = 0;
  for (int i = 0; i < 512; ++i) want += (i < 256 ? 1.0 : 256.0 / (i + 1)) / 512;
  EXPECT_NEAR((*k)[0].same, want, 1e-4);
  EXPECT_NEAR((*k)[0].cross, want, 1e-4);
}

// llm_mix: sparse on its own prompt, less so with another prompt's indices (MInference Fig. 2b/2c
// at a small length with k scaled to len / 32); oracles ordered by granularity.
TEST(AttentionStatsTest, LlmMixIsSparseAndDynamic) {
  WorkloadOptions w;
  w.shape.q_lens = {4096};
  w.shape.num_q_heads = 8;
  w.shape.num_kv_heads = 2;
  w.shape.head_dim = 64;
  w.seed = 1;
  w.model_seed = 5;
  auto a = GenerateWorkload(w);
  w.seed = 2;
  auto b = GenerateWorkload(w);
  ASSERT_TRUE(a.ok() && b.ok());
  TopKRecallOptions t;
  t.top_k = 128;
  t.sample_rows = 32;
  auto k = TopKRecall(a->problem(), b->problem(), t);
  ASSERT_TRUE(k.ok()) << k.status();
  double same = 0, cross = 0;
  for (const auto& h : *k) {
    same += h.same / k->size();
    cross += h.cross / k->size();
    if (a->heads[h.head].kind == HeadKind::kRetrieval) {
      EXPECT_LT(h.cross, 0.8) << h.head;
    }
  }
  EXPECT_GT(same, 0.9);
  EXPECT_LT(cross, same - 0.05);
  OracleOptions o;
  o.sample_blocks = 2;
  auto r = OracleDensities(a->problem(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const HeadOracle& h : *r) {
    EXPECT_GT(h.row, 0) << h.head;
    EXPECT_LE(h.row, h.column + 0.01) << h.head;
    EXPECT_LE(h.column, h.block + 1e-9) << h.head;
    EXPECT_LE(h.block, 1.0) << h.head;
  }
  // Mismatched problems are refused.
  WorkloadOptions other = w;
  other.shape.q_lens = {2048};
  auto c = GenerateWorkload(other);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(TopKRecall(a->problem(), c->problem(), t).ok());
  o.target = 1.5;
  EXPECT_FALSE(OracleDensities(a->problem(), o).ok());
}

}  // namespace
}  // namespace spattn
