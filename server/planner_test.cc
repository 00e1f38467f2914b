// Planner: grouping heads by method config, precedence of overrides, the short-sequence dense
// fallback, and refusal of methods the device cannot run.
#include "server/planner.h"

#include <gtest/gtest.h>

namespace spattn {
namespace {

bool All(Method) { return true; }

ModelConfig TwoLayerModel() {
  ModelConfig m;
  m.model_id = "m";
  m.version = 4;
  m.num_layers = 2;
  m.num_q_heads = 6;
  m.num_kv_heads = 2;
  m.head_dim = 64;
  m.default_method.method = Method::kAShape;
  m.heads.assign(2, std::vector<std::optional<MethodConfig>>(6));
  MethodConfig vs;
  vs.method = Method::kVerticalSlash;
  m.heads[1][0] = vs;
  m.heads[1][3] = vs;
  MethodConfig vs_small = vs;
  vs_small.vertical_slash.vertical_size = 200;  // Same method, other params: its own group.
  m.heads[1][4] = vs_small;
  return m;
}

TEST(PlannerTest, GroupsHeadsByConfig) {
  const ModelConfig m = TwoLayerModel();
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  auto plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 3u);
  EXPECT_EQ(plan->groups[0].config.method, Method::kVerticalSlash);
  EXPECT_EQ(plan->groups[0].heads, (std::vector<int>{0, 3}));
  EXPECT_EQ(plan->groups[1].config.method, Method::kAShape);
  EXPECT_EQ(plan->groups[1].heads, (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(plan->groups[2].config.vertical_slash.vertical_size, 200);
  EXPECT_EQ(plan->groups[2].heads, (std::vector<int>{4}));
  EXPECT_EQ(plan->group_of_head, (std::vector<int>{0, 1, 1, 0, 2, 1}));
  EXPECT_EQ(plan->source[0], MethodSource::kHeadConfig);
  EXPECT_EQ(plan->source[1], MethodSource::kModelDefault);
  EXPECT_FALSE(plan->dense_fallback);

  in.layer = 0;  // No per-head configs: one group with the model default.
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->groups.size(), 1u);
  EXPECT_EQ(plan->groups[0].heads.size(), 6u);
}

// Issue 11: a head's length bucket is picked by the request's longest sequence, and what the
// recall guard learned (maybe_learned) replaces published and default configs, not overrides.
TEST(PlannerTest, LengthBucketsAndLearnedConfigs) {
  ModelConfig m = TwoLayerModel();
  m.buckets.assign(2, std::vector<std::vector<ModelConfig::Bucket>>(6));
  MethodConfig flex;
  flex.method = Method::kFlexPrefill;
  m.buckets[1][0].push_back({16384, flex});
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  in.max_k_len = 8192;
  auto plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->groups[plan->group_of_head[0]].config.method, Method::kVerticalSlash);
  in.max_k_len = 16384;
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->groups[plan->group_of_head[0]].config.method, Method::kFlexPrefill);
  EXPECT_EQ(plan->groups[plan->group_of_head[3]].config.method, Method::kVerticalSlash);
  EXPECT_EQ(plan->source[0], MethodSource::kHeadConfig);

  MethodConfig dense;
  std::vector<int> asked;
  in.maybe_learned = [&](int h, const MethodConfig& c) -> const MethodConfig* {
    asked.push_back(h);
    return h == 1 || h == 2 ? &dense : nullptr;
  };
  const std::vector<std::pair<int, MethodConfig>> overrides = {{2, flex}};
  in.maybe_head_overrides = &overrides;
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(asked, (std::vector<int>{0, 1, 3, 4, 5}));  // not the overridden head 2
  EXPECT_EQ(plan->groups[plan->group_of_head[1]].config.method, Method::kDense);
  EXPECT_EQ(plan->groups[plan->group_of_head[2]].config.method, Method::kFlexPrefill);
  EXPECT_EQ(plan->groups[plan->group_of_head[5]].config.method, Method::kAShape);
}

// Issue 11: a head config that records its calibration length runs its key-count budgets
// scaled to the request's length (ScaleConfigToLength); configs without it (written before the
// field, or the model default) run as published; learned configs are looked up under the
// published config and win over the scaled one.
TEST(PlannerTest, ScalesConfigsByServedOverCalibratedLength) {
  ModelConfig m = TwoLayerModel();
  m.calibrated_tokens.assign(2, std::vector<int64_t>(6, 0));
  m.calibrated_tokens[1][0] = 16384;  // head 3 shares head 0's config but records no length
  m.buckets.assign(2, std::vector<std::vector<ModelConfig::Bucket>>(6));
  MethodConfig bs;
  bs.method = Method::kBlockSparse;
  bs.block_sparse.top_k = 100;
  m.buckets[1][4].push_back({65536, bs, 65536});
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  in.max_k_len = 65536;                  // 4x head 0's calibration length
  auto plan = MakePlan(in, All, "cpu");  // length_exponent 0: as published
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->groups[plan->group_of_head[0]].config.vertical_slash.vertical_size, 1000);

  in.length_exponent = 1.0;
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const MethodConfig& h0 = plan->groups[plan->group_of_head[0]].config;
  EXPECT_EQ(h0.vertical_slash.vertical_size, 4000);
  EXPECT_EQ(h0.vertical_slash.slash_size, 4 * 6096);
  EXPECT_EQ(h0.vertical_slash.last_q, 64);  // structural sizes stay
  EXPECT_EQ(h0.vertical_slash.forced_columns, 30);
  EXPECT_EQ(plan->groups[plan->group_of_head[3]].config.vertical_slash.vertical_size, 1000);
  EXPECT_NE(plan->group_of_head[0], plan->group_of_head[3]);
  EXPECT_EQ(plan->groups[plan->group_of_head[1]].config.a_shape.local_tokens, 3968);  // default
  // The bucket calibrated at the served length: as published.
  EXPECT_EQ(plan->groups[plan->group_of_head[4]].config.block_sparse.top_k, 100);

  in.length_exponent = 0.5;
  in.max_k_len = 4096;  // shorter than calibrated: budgets shrink
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->groups[plan->group_of_head[0]].config.vertical_slash.vertical_size, 500);

  MethodConfig learned;
  learned.method = Method::kFlexPrefill;
  std::vector<int> published_vs;
  in.maybe_learned = [&](int h, const MethodConfig& c) -> const MethodConfig* {
    if (c.method == Method::kVerticalSlash) published_vs.push_back(c.vertical_slash.vertical_size);
    return h == 0 ? &learned : nullptr;
  };
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(published_vs, (std::vector<int>{1000, 1000, 200}));  // heads 0, 3, 4: unscaled
  EXPECT_EQ(plan->groups[plan->group_of_head[0]].config.method, Method::kFlexPrefill);
}

TEST(PlannerTest, OverridesTakePrecedence) {
  const ModelConfig m = TwoLayerModel();
  MethodConfig dense;
  MethodConfig block;
  block.method = Method::kBlockSparse;
  std::vector<std::pair<int, MethodConfig>> heads = {{5, block}};
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  in.maybe_method_override = &dense;
  in.maybe_head_overrides = &heads;
  auto plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 2u);
  EXPECT_EQ(plan->groups[0].config.method, Method::kDense);
  EXPECT_EQ(plan->groups[0].heads, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(plan->groups[1].config.method, Method::kBlockSparse);
  EXPECT_EQ(plan->source[5], MethodSource::kHeadOverride);
  EXPECT_EQ(plan->source[0], MethodSource::kRequestOverride);

  // Without model and override: the worker default.
  PlanInput bare;
  bare.num_q_heads = 3;
  bare.worker_default.method = Method::kAShape;
  plan = MakePlan(bare, All, "cpu");
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->groups.size(), 1u);
  EXPECT_EQ(plan->groups[0].config.method, Method::kAShape);
  EXPECT_EQ(plan->source[2], MethodSource::kWorkerDefault);
}

TEST(PlannerTest, ShortSequencesRunDenseExceptExplicitOverrides) {
  const ModelConfig m = TwoLayerModel();
  MethodConfig block;
  block.method = Method::kBlockSparse;
  std::vector<std::pair<int, MethodConfig>> heads = {{2, block}};
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  in.maybe_head_overrides = &heads;
  in.dense_below_tokens = 1024;
  in.max_k_len = 1023;
  auto plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->dense_fallback);
  ASSERT_EQ(plan->groups.size(), 2u);
  EXPECT_EQ(plan->groups[0].config.method, Method::kDense);
  EXPECT_EQ(plan->groups[0].heads, (std::vector<int>{0, 1, 3, 4, 5}));
  EXPECT_EQ(plan->source[0], MethodSource::kShortSequence);
  EXPECT_EQ(plan->groups[1].config.method, Method::kBlockSparse);

  in.max_k_len = 1024;  // At the threshold: the configured methods.
  plan = MakePlan(in, All, "cpu");
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->dense_fallback);
  EXPECT_EQ(plan->groups.size(), 4u);
}

TEST(PlannerTest, UnavailableMethodIsFailedPrecondition) {
  const ModelConfig m = TwoLayerModel();
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  auto plan = MakePlan(
      in, [](Method x) { return x != Method::kVerticalSlash; }, "cpu");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("head 0: method vertical_slash"), std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("device cpu"), std::string::npos);
}

// Issue 11 item 5: sampled_lines heads of different gammas (what the calibration search picks per
// head) share one group, i.e. one build, each head keeping its own gamma (head_configs, and the
// group's build options carry them); another parameter still splits.
TEST(PlannerTest, SampledLinesHeadsOfDifferentGammasShareOneGroup) {
  ModelConfig m = TwoLayerModel();
  MethodConfig sl;
  sl.method = Method::kSampledLines;
  sl.sampled_lines.gamma = 0.95f;
  MethodConfig sl_975 = sl;
  sl_975.sampled_lines.gamma = 0.975f;
  MethodConfig sl_floor = sl_975;
  sl_floor.sampled_lines.diagonal_floor = 5.f;  // another parameter: another build
  m.heads[1] = {sl, sl_975, std::nullopt, sl, sl_975, sl_floor};
  PlanInput in;
  in.num_q_heads = 6;
  in.layer = 1;
  in.maybe_model = &m;
  auto plan = MakePlan(in, All, "cuda");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 3u);
  const HeadGroup& g = plan->groups[0];
  EXPECT_EQ(g.config.method, Method::kSampledLines);
  EXPECT_EQ(g.heads, (std::vector<int>{0, 1, 3, 4}));
  ASSERT_EQ(g.head_configs.size(), 4u);
  const float want[] = {0.95f, 0.975f, 0.95f, 0.975f};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(g.head_configs[k].sampled_lines.gamma, want[k]) << "head " << g.heads[k];
    EXPECT_TRUE(SameMethodConfig(g.head_configs[k], k % 2 ? sl_975 : sl));
  }
  BuildOptions base;
  base.sampled_lines_block_m = 128;
  const BuildOptions o = g.BuildOptionsFor(base);
  EXPECT_EQ(o.sampled_lines_gammas, (std::vector<float>{0.95f, 0.975f, 0.95f, 0.975f}));
  EXPECT_EQ(o.sampled_lines_block_m, 128);
  EXPECT_EQ(plan->groups[1].config.method, Method::kAShape);  // the model default, head 2
  EXPECT_EQ(plan->groups[1].heads, (std::vector<int>{2}));
  EXPECT_EQ(plan->groups[2].heads, (std::vector<int>{5}));
  EXPECT_EQ(plan->groups[2].config.sampled_lines.diagonal_floor, 5.f);
  EXPECT_EQ(plan->group_of_head, (std::vector<int>{0, 0, 1, 0, 0, 2}));
  // One gamma: no per-head gammas in the build options (the build as before).
  EXPECT_TRUE(plan->groups[2].BuildOptionsFor(base).sampled_lines_gammas.empty());
  EXPECT_TRUE(plan->groups[1].BuildOptionsFor(base).sampled_lines_gammas.empty());
  EXPECT_TRUE(SameHeadGroup(sl, sl_975));
  EXPECT_FALSE(SameHeadGroup(sl, sl_floor));
}

TEST(PlannerTest, SameMethodConfigComparesOnlyTheMethodsParams) {
  MethodConfig a, b;
  a.method = b.method = Method::kAShape;
  b.vertical_slash.last_q = 5;  // Not a_shape's parameter.
  EXPECT_TRUE(SameMethodConfig(a, b));
  b.a_shape.local_tokens = 100;
  EXPECT_FALSE(SameMethodConfig(a, b));
  b = a;
  b.method = Method::kDense;
  EXPECT_FALSE(SameMethodConfig(a, b));
}

}  // namespace
}  // namespace spattn
