// The recall promise (issue 11): configs calibrated by the pattern search on one 2K prompt,
// served through the recall guard on held-out prompts (other seeds) of 0.25x to 8x that length,
// keep a mean recall >= the target and >= 95 % of heads within 0.02 of it, for targets 0.90,
// 0.95 and 0.98. Recall is measured exactly on rows other than the guard's probe rows.
#include "server/recall_guard.h"

#include <algorithm>
#include <cstdio>

#include "gtest/gtest.h"
#include "kernels/builders/build_index.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/fidelity.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

WorkloadOptions Layer(int len, uint64_t seed) {
  WorkloadOptions o;
  o.shape.q_lens = {len};
  o.shape.num_q_heads = 8;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 64;
  o.seed = seed;
  o.model_seed = 7;
  return o;
}

TEST(WidenConfigTest, EveryMethodButDenseWidens) {
  for (Method m : kAllMethods) {
    MethodConfig c;
    c.method = m;
    MethodConfig w;
    EXPECT_EQ(WidenConfig(c, &w), m != Method::kDense) << MethodName(m);
    if (m != Method::kDense) {
      EXPECT_NE(w.DebugString(), c.DebugString()) << MethodName(m);
      EXPECT_TRUE(w.Validate().ok()) << MethodName(m);
    }
  }
}

TEST(RecallGuardTest, FallsBackToDenseWhenWideningCannotReach) {
  auto w = GenerateWorkload(Layer(1024, 3));
  ASSERT_TRUE(w.ok());
  MethodConfig c;
  c.method = Method::kAShape;
  c.a_shape.sink_tokens = 4;
  c.a_shape.local_tokens = 16;
  BuildOptions bo;
  SparseIndex index;
  ASSERT_TRUE(BuildSparseIndex(w->problem(), c, {0}, bo, &index).ok());
  RecallGuardOptions go;
  go.target = 1.0;
  go.max_widen = 1;
  go.adaptive = MethodConfig();  // no adaptive try: one widening, then dense
  int builds = 0;
  auto build = [&](const MethodConfig& cfg, const std::vector<int>& hs, SparseIndex* out) {
    ++builds;
    return BuildSparseIndex(w->problem(), cfg, hs, bo, out);
  };
  auto g = GuardHead(w->problem(), index, 0, c, /*widen=*/true, build, go);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->replaced);
  EXPECT_EQ(g->config.method, Method::kDense);
  EXPECT_EQ(g->estimate, 1.0);
  EXPECT_EQ(builds, 2);  // one widening, then dense
  // Without widening the head keeps its config and only gets an estimate.
  auto e = GuardHead(w->problem(), index, 0, c, /*widen=*/false, build, go);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->replaced);
  EXPECT_LT(e->estimate, 1.0);
}

TEST(RecallGuardTest, KeepsThePromiseOnHeldOutPromptsAndLengths) {
  const int calib_len = 2048;
  auto calib = GenerateWorkload(Layer(calib_len, 1));
  ASSERT_TRUE(calib.ok());
  for (double target : {0.90, 0.95, 0.98}) {
    PatternSearchOptions so;
    so.target_recall = target;
    so.sample_rows = 128;
    auto search = SearchHeadPatterns({&calib->problem()}, DefaultCandidates(), so);
    ASSERT_TRUE(search.ok()) << search.status();
    std::vector<MethodConfig> config(8);
    for (const HeadSearchResult& h : search->heads) config[h.head] = h.chosen.config;
    std::vector<double> recalls;
    double dens = 0;
    for (int len : {512, 2048, 8192, 16384}) {
      for (uint64_t seed : {11u, 12u}) {
        if (len == 16384 && seed == 12u) continue;  // keep the test short on 2 cores
        auto w = GenerateWorkload(Layer(len, seed));
        ASSERT_TRUE(w.ok());
        const AttentionProblem& p = w->problem();
        BuildOptions bo;
        auto build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
          return BuildSparseIndex(p, c, hs, bo, out);
        };
        RecallGuardOptions go;
        go.target = target;
        for (int h = 0; h < 8; ++h) {
          SparseIndex index;
          ASSERT_TRUE(build(config[h], {h}, &index).ok());
          auto g = GuardHead(p, index, 0, config[h], /*widen=*/true, build, go);
          ASSERT_TRUE(g.ok()) << g.status();
          const SparseIndex& served = g->replaced ? *g->index : index;
          // Other rows than the guard's probe rows.
          auto r = AttentionMassRecall(p, served, 0, 128, /*seed=*/777);
          ASSERT_TRUE(r.ok());
          recalls.push_back(*r);
          dens += Density(p, served, 0);
          std::printf(
              "target %.2f len %5d seed %d head %d (%s): %s -> %s widened %d, estimate "
              "%.4f, recall %.4f\n",
              target, len, static_cast<int>(seed), h, HeadKindName(w->heads[h].kind),
              ConfigLabel(config[h]).c_str(), ConfigLabel(g->config).c_str(), g->widened,
              g->estimate, *r);
        }
      }
    }
    double mean = 0;
    int within = 0;
    for (double r : recalls) {
      mean += r / recalls.size();
      within += r >= target - 0.02;
    }
    std::printf("target %.2f: mean recall %.4f, %d of %zu heads within 0.02, mean density %.3f\n",
                target, mean, within, recalls.size(), dens / recalls.size());
    EXPECT_GE(mean, target) << "target " << target;
    EXPECT_GE(within, 0.95 * recalls.size()) << "target " << target;
  }
}

}  // namespace
}  // namespace spattn
