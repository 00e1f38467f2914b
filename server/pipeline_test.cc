// The request pipeline without gRPC: deadlines and cancellation between stages, the dense
// fallback for short sequences, model consistency checks, and stats (density, recall).
#include "server/pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/time/clock.h"
#include "kernels/builders/build_index.h"
#include "kernels/fidelity.h"
#include "kernels/host_problem.h"
#include "kernels/workload/workload.h"
#include "server/recall_guard.h"
#include "server/test_util.h"

namespace spattn {
namespace {

using testing_util::Describe;
using testing_util::InlineRequest;

class PipelineTest : public ::testing::Test {
 protected:
  PipelineTest() : backend_(MakeCpuBackend()) {
    ProblemShape s;
    s.q_lens = {100};
    s.num_q_heads = 2;
    s.num_kv_heads = 1;
    s.head_dim = 64;
    hp_ = std::make_unique<HostProblem>(s);
    hp_->FillRandom(3);
    request_ = InlineRequest(*hp_);
    request_.set_causal(true);
    request_.set_return_stats(true);
  }

  absl::Status Run(const PipelineOptions& options, const CallControl& control,
                   v1::AttentionResponse* response) {
    auto parsed = ParseAttentionRequest(request_, ConvertLimits());
    if (!parsed.ok()) return parsed.status();
    AttentionPipeline pipeline(options, &regions_, nullptr, nullptr);
    return pipeline.Run(*parsed, *backend_, control, 0.0, response);
  }

  std::unique_ptr<AttentionBackend> backend_;
  RegionManager regions_;
  std::unique_ptr<HostProblem> hp_;
  v1::AttentionRequest request_;
};

TEST_F(PipelineTest, DeadlineAndCancellationStopTheRequest) {
  v1::AttentionResponse r;
  CallControl past;
  past.deadline = absl::Now() - absl::Seconds(1);
  const absl::Status late = Run(PipelineOptions(), past, &r);
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << Describe(late);
  CallControl cancelled;
  cancelled.cancelled = [] { return true; };
  const absl::Status gone = Run(PipelineOptions(), cancelled, &r);
  EXPECT_EQ(gone.code(), absl::StatusCode::kCancelled) << Describe(gone);
  // Cancellation observed between stages: the probe answers "no" during resolve only.
  int calls = 0;
  CallControl later;
  later.cancelled = [&calls] { return ++calls > 1; };
  const absl::Status mid = Run(PipelineOptions(), later, &r);
  EXPECT_EQ(mid.code(), absl::StatusCode::kCancelled) << Describe(mid);
  EXPECT_NE(mid.message().find("before config"), std::string::npos) << Describe(mid);
}

TEST_F(PipelineTest, ShortSequencesFallBackToDense) {
  PipelineOptions options;
  options.default_method.method = Method::kAShape;
  options.default_method.a_shape.sink_tokens = 4;
  options.default_method.a_shape.local_tokens = 16;
  options.guard.probe_rows = 0;  // this test is about dense_below_tokens, not the recall guard
  v1::AttentionResponse sparse;
  ASSERT_TRUE(Run(options, CallControl(), &sparse).ok());
  EXPECT_EQ(sparse.heads(0).method_name(), "a_shape");
  EXPECT_LT(sparse.heads(0).density(), 1.0);
  options.dense_below_tokens = 101;  // The sequence has 100 keys.
  v1::AttentionResponse dense;
  ASSERT_TRUE(Run(options, CallControl(), &dense).ok());
  EXPECT_EQ(dense.heads(0).method_name(), "dense");
  EXPECT_DOUBLE_EQ(dense.heads(0).density(), 1.0);
  EXPECT_DOUBLE_EQ(dense.density(), 1.0);
}

TEST_F(PipelineTest, RecallOfDenseIsOne) {
  request_.set_estimate_recall(true);
  v1::AttentionResponse r;
  ASSERT_TRUE(Run(PipelineOptions(), CallControl(), &r).ok());
  ASSERT_EQ(r.heads_size(), 2);
  for (const auto& h : r.heads()) EXPECT_NEAR(h.recall(), 1.0, 1e-12);
}

// The recall guard (server/recall_guard.h): with no opt-in, every head gets an estimate and the
// recall stage its time; a default-method head short of the target is widened (here to dense:
// random Q/K attend broadly), a head whose method the request forces is only estimated.
TEST_F(PipelineTest, RecallGuardEstimatesEveryHeadAndWidensShortOnes) {
  PipelineOptions options;
  options.default_method.method = Method::kAShape;
  options.default_method.a_shape.sink_tokens = 4;
  options.default_method.a_shape.local_tokens = 16;
  v1::AttentionResponse guarded;
  ASSERT_TRUE(Run(options, CallControl(), &guarded).ok());
  ASSERT_EQ(guarded.heads_size(), 2);
  for (const auto& h : guarded.heads()) EXPECT_GE(h.recall(), 0.95) << h.method_name();
  EXPECT_GT(guarded.timings().recall_seconds(), 0);
  options.guard.target = 0;  // estimate only
  v1::AttentionResponse estimated;
  ASSERT_TRUE(Run(options, CallControl(), &estimated).ok());
  ASSERT_EQ(estimated.heads_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const auto& h = estimated.heads(i);
    EXPECT_EQ(h.method_name(), "a_shape");
    EXPECT_GT(h.recall(), 0);
    EXPECT_LT(h.recall(), 0.95);
    EXPECT_LT(h.density(), guarded.heads(i).density());  // the guard widened it
  }
}

// The guard remembers what it widened a head to (GuardMemory, per length class): the next
// request of that length starts there and needs no rebuild.
TEST_F(PipelineTest, RecallGuardStartsFromWhatItLearned) {
  PipelineOptions options;
  options.default_method.method = Method::kAShape;
  options.default_method.a_shape.sink_tokens = 4;
  options.default_method.a_shape.local_tokens = 16;
  auto parsed = ParseAttentionRequest(request_, ConvertLimits());
  ASSERT_TRUE(parsed.ok());
  AttentionPipeline pipeline(options, &regions_, nullptr, nullptr);
  v1::AttentionResponse first, second;
  ASSERT_TRUE(pipeline.Run(*parsed, *backend_, CallControl(), 0.0, &first).ok());
  auto again = ParseAttentionRequest(request_, ConvertLimits());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(pipeline.Run(*again, *backend_, CallControl(), 0.0, &second).ok());
  ASSERT_EQ(second.heads_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(second.heads(i).method_name(), first.heads(i).method_name());
    EXPECT_EQ(second.heads(i).density(), first.heads(i).density());
    EXPECT_GE(second.heads(i).recall(), 0.95);
  }
}

// A structured 1024-token layer (fixed seeds) of `q_heads` / `kv_heads` heads, d = 64, and a
// causal inline request over it that asks for per-head stats.
struct StructuredLayer {
  Workload workload;
  v1::AttentionRequest request;
};
absl::StatusOr<StructuredLayer> MakeStructuredLayer(int q_heads, int kv_heads) {
  WorkloadOptions wo;
  wo.shape.q_lens = {1024};
  wo.shape.num_q_heads = q_heads;
  wo.shape.num_kv_heads = kv_heads;
  wo.shape.head_dim = 64;
  wo.seed = 5;
  wo.model_seed = 7;
  auto w = GenerateWorkload(wo);
  if (!w.ok()) return w.status();
  StructuredLayer layer{std::move(*w), {}};
  layer.request = InlineRequest(*layer.workload.host);
  layer.request.set_causal(true);
  layer.request.set_return_stats(true);
  return layer;
}

// The pipeline widens the short heads of a request together (GuardHeads): on a structured
// 8-head layer (CPU backend) every head ends as GuardHead decides head by head (method,
// estimate, density), and its output is what the request gets when it forces that config.
TEST(PipelineGuardTest, WidensShortHeadsTogetherAsHeadByHead) {
  auto layer = MakeStructuredLayer(8, 2);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const AttentionProblem& p = layer->workload.problem();
  const v1::AttentionRequest& request = layer->request;
  PipelineOptions options;
  options.default_method.method = Method::kAShape;
  options.default_method.a_shape.sink_tokens = 4;
  options.default_method.a_shape.local_tokens = 32;
  RegionManager regions;
  std::unique_ptr<AttentionBackend> backend = MakeCpuBackend();
  auto parsed = ParseAttentionRequest(request, ConvertLimits());
  ASSERT_TRUE(parsed.ok());
  v1::AttentionResponse guarded;
  {
    AttentionPipeline pipeline(options, &regions, nullptr, nullptr);
    ASSERT_TRUE(pipeline.Run(*parsed, *backend, CallControl(), 0.0, &guarded).ok());
  }
  ASSERT_EQ(guarded.heads_size(), 8);
  // Head by head on the host, as the guard did before it batched.
  BuildOptions bo;
  bo.block_m = options.block_m;
  auto build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
    return BuildSparseIndex(p, c, hs, bo, out);
  };
  RecallGuardOptions go = options.guard;
  go.probe_rows = 32;  // the CPU backend's default
  SparseIndex index;
  ASSERT_TRUE(build(options.default_method, {0, 1, 2, 3, 4, 5, 6, 7}, &index).ok());
  int widened = 0;
  auto forced = ParseAttentionRequest(request, ConvertLimits());
  ASSERT_TRUE(forced.ok());
  for (int h = 0; h < 8; ++h) {
    auto g = GuardHead(p, index, h, options.default_method, /*widen=*/true, build, go);
    ASSERT_TRUE(g.ok()) << g.status();
    const auto& got = guarded.heads(h);
    ASSERT_EQ(static_cast<int>(got.head()), h);
    EXPECT_EQ(got.method_name(), MethodName(g->config.method)) << "head " << h;
    EXPECT_NEAR(got.recall(), g->estimate, 1e-12) << "head " << h;
    const SparseIndex& served = g->replaced ? *g->index : index;
    EXPECT_NEAR(got.density(), Density(p, served, g->replaced ? g->slot : h), 1e-12)
        << "head " << h;
    widened += g->replaced;
    forced->head_overrides.emplace_back(h, g->config);
  }
  EXPECT_GE(widened, 2) << "the test needs several heads widened together";
  // Forcing every head's guarded config (estimate only, no widening) gives the same output.
  v1::AttentionResponse direct;
  {
    AttentionPipeline pipeline(options, &regions, nullptr, nullptr);
    ASSERT_TRUE(pipeline.Run(*forced, *backend, CallControl(), 0.0, &direct).ok());
  }
  ASSERT_EQ(direct.heads_size(), 8);
  for (int h = 0; h < 8; ++h) {
    EXPECT_EQ(direct.heads(h).method_name(), guarded.heads(h).method_name()) << "head " << h;
    EXPECT_NEAR(direct.heads(h).density(), guarded.heads(h).density(), 1e-12) << "head " << h;
  }
  ASSERT_FALSE(guarded.output().inline_data().data().empty());
  EXPECT_EQ(guarded.output().inline_data().data(), direct.output().inline_data().data());
}

// sampled_lines indexes on its own block size (PipelineOptions::sampled_lines_block_m, default
// 128), the other methods on block_m; 0 falls back to block_m.
TEST(PipelineBlockTest, SampledLinesRunsOnItsOwnBlockSize) {
  auto layer = MakeStructuredLayer(4, 2);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const AttentionProblem& p = layer->workload.problem();
  const v1::AttentionRequest& request = layer->request;
  std::unique_ptr<AttentionBackend> backend = MakeCpuBackend();
  RegionManager regions;
  const std::vector<int> heads = {0, 1, 2, 3};
  std::map<int, SparseIndex> built;  // by block_m
  for (int bm : {64, 128}) {
    BuildOptions bo;
    bo.block_m = bm;
    MethodConfig c;
    c.method = Method::kSampledLines;
    ASSERT_TRUE(BuildSparseIndex(p, c, heads, bo, &built[bm]).ok());
  }
  bool differ = false;
  for (int h : heads) differ |= Density(p, built[64], h) != Density(p, built[128], h);
  ASSERT_TRUE(differ) << "the test needs block sizes that give different indexes";
  for (int own : {0, 128}) {
    PipelineOptions options;
    EXPECT_EQ(options.sampled_lines_block_m, 128);
    options.default_method.method = Method::kSampledLines;
    options.guard.probe_rows = 0;  // the default config as built, no widening
    options.block_m = 64;
    options.sampled_lines_block_m = own;
    auto parsed = ParseAttentionRequest(request, ConvertLimits());
    ASSERT_TRUE(parsed.ok());
    v1::AttentionResponse r;
    AttentionPipeline pipeline(options, &regions, nullptr, nullptr);
    ASSERT_TRUE(pipeline.Run(*parsed, *backend, CallControl(), 0.0, &r).ok());
    ASSERT_EQ(r.heads_size(), 4);
    const SparseIndex& want = built[own == 0 ? 64 : own];
    for (int h : heads) {
      EXPECT_EQ(r.heads(h).method_name(), "sampled_lines");
      EXPECT_NEAR(r.heads(h).density(), Density(p, want, h), 1e-12)
          << "own " << own << " head " << h;
    }
  }
}

// Issue 11 item 5: heads whose sampled_lines configs differ only in gamma run in one planner
// group (one build with per-head gammas), each at its own gamma: every head's density is that of
// a build of it alone at its gamma.
TEST(PipelineBlockTest, SampledLinesHeadsOfDifferentGammasRunEachAtItsOwn) {
  auto layer = MakeStructuredLayer(4, 2);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const AttentionProblem& p = layer->workload.problem();
  std::unique_ptr<AttentionBackend> backend = MakeCpuBackend();
  RegionManager regions;
  const float gammas[] = {0.5f, 0.95f, 0.7f, 0.95f};
  auto parsed = ParseAttentionRequest(layer->request, ConvertLimits());
  ASSERT_TRUE(parsed.ok());
  std::vector<double> want(4);
  std::set<double> distinct;
  for (int h = 0; h < 4; ++h) {
    MethodConfig c;
    c.method = Method::kSampledLines;
    c.sampled_lines.gamma = gammas[h];
    parsed->head_overrides.emplace_back(h, c);
    BuildOptions bo;
    bo.block_m = 128;
    SparseIndex alone;
    ASSERT_TRUE(BuildSparseIndex(p, c, {h}, bo, &alone).ok());
    want[h] = Density(p, alone, 0);
    distinct.insert(want[h]);
  }
  ASSERT_GE(distinct.size(), 2u) << "the test needs gammas that give different indexes";
  PipelineOptions options;
  options.guard.probe_rows = 0;  // the configs as given
  v1::AttentionResponse r;
  AttentionPipeline pipeline(options, &regions, nullptr, nullptr);
  ASSERT_TRUE(pipeline.Run(*parsed, *backend, CallControl(), 0.0, &r).ok());
  ASSERT_EQ(r.heads_size(), 4);
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(r.heads(h).method_name(), "sampled_lines");
    EXPECT_NEAR(r.heads(h).density(), want[h], 1e-12) << "head " << h << " gamma " << gammas[h];
  }
}

TEST(GuardMemoryTest, KeysByLengthClassAndPublishedConfig) {
  GuardMemory memory(2);
  MethodConfig a, wide;
  a.method = Method::kAShape;
  wide.method = Method::kFlexPrefill;
  const std::string k = GuardMemory::Key("m", 1, 0, 3, a, 40000);
  EXPECT_EQ(k, GuardMemory::Key("m", 1, 0, 3, a, 32768));  // same power-of-two class
  EXPECT_NE(k, GuardMemory::Key("m", 1, 0, 3, a, 65536));
  EXPECT_NE(k, GuardMemory::Key("m", 2, 0, 3, a, 40000));
  EXPECT_NE(k, GuardMemory::Key("m", 1, 0, 3, wide, 40000));
  MethodConfig got;
  EXPECT_FALSE(memory.Lookup(k, &got));
  memory.Remember(k, wide);
  ASSERT_TRUE(memory.Lookup(k, &got));
  EXPECT_EQ(got.method, Method::kFlexPrefill);
  memory.Remember("b", a);
  memory.Remember("c", a);  // over max_entries: the oldest (k) goes
  EXPECT_FALSE(memory.Lookup(k, &got));
  EXPECT_EQ(memory.size(), 2);
}

TEST_F(PipelineTest, ModelIdWithoutIndexServiceIsFailedPrecondition) {
  request_.set_model_id("llama");
  v1::AttentionResponse r;
  const absl::Status s = Run(PipelineOptions(), CallControl(), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << Describe(s);
  EXPECT_EQ(s.message().rfind("model_id", 0), 0u) << Describe(s);
}

}  // namespace
}  // namespace spattn
