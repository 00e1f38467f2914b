// The worker end to end over loopback gRPC: inline and shared-memory handles, dense output against
// the double-precision reference, a_shape against the reference under its densified mask, streams
// answered in order, head configs from a (fake) index service, validation over the wire, queue
// full, deadlines, cancellation-free drain, health, metrics scrape.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/attention_client.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/fidelity.h"
#include "kernels/host_problem.h"
#include "kernels/reference/reference_attention.h"
#include "server/convert.h"
#include "server/recall_guard.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

using testing_util::Describe;
using testing_util::FakeIndexServer;
using testing_util::InlineRequest;

// FlashAttention's rule: within twice the output dtype's rounding of the exact value, plus fp32
// accumulation noise.
double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 1.0 / (1 << 24);
    case DType::kF16:
      return 1.0 / (1 << 11);
    case DType::kBF16:
      return 1.0 / (1 << 8);
  }
  return 1;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, DType t,
                 const std::string& config) {
  ASSERT_EQ(got.size(), want.size()) << config;
  const double u = UnitRoundoff(t);
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= 2 * u * std::fabs(want[i]) + 1e-5)) {
      if (bad++ == 0) worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << config << ": first bad element " << worst << " got " << got[worst]
                     << " want " << want[worst];
}

ProblemShape TestShape(DType dtype = DType::kBF16) {
  ProblemShape s;
  s.q_lens = {70, 131};
  s.k_lens = {150, 131};  // Sequence 0: a prefill chunk (70 queries at the end of 150 keys).
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.dtype = dtype;
  return s;
}

std::string ShapeString(const ProblemShape& s) {
  return absl::StrCat("q_lens=", s.q_lens[0], ",", s.q_lens[1], " k_lens=", s.k_lens[0], ",",
                      s.k_lens[1], " hq=", s.num_q_heads, " hkv=", s.num_kv_heads,
                      " d=", s.head_dim, " dtype=", DTypeName(s.dtype));
}

std::vector<float> Reference(const HostProblem& hp, const ReferenceMasks& masks = {}) {
  std::vector<float> out;
  EXPECT_TRUE(ReferenceAttention(hp.problem(), {}, masks, &out, nullptr).ok());
  return out;
}

// The masks of a_shape(sink, local) over all heads, as the worker's index builder makes them.
ReferenceMasks AShapeMasks(const HostProblem& hp, int sink, int local, int block_m) {
  AShapeParams params;
  params.sink_tokens = sink;
  params.local_tokens = local;
  std::vector<int> heads(hp.problem().num_q_heads);
  for (int h = 0; h < hp.problem().num_q_heads; ++h) heads[h] = h;
  SparseIndex index;
  EXPECT_TRUE(BuildAShapeIndex(hp.problem(), params, heads, block_m, &index).ok());
  ReferenceMasks masks;
  for (int h = 0; h < hp.problem().num_q_heads; ++h) {
    for (int b = 0; b < hp.problem().batch(); ++b) {
      masks.push_back(DensifyMask(hp.problem(), index, h, b));
    }
  }
  return masks;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

std::string Scrape(WorkerServer& w) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, w.registry().Collect());
  return out.str();
}

// Value of the sample line that starts with `series` (e.g. `spattn_requests_total{...}`).
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// A gate the executor hook waits on, so tests can hold the worker busy.
class Gate {
 public:
  void Enter(const std::string& id) {
    std::unique_lock<std::mutex> lock(mu_);
    entered_.push_back(id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_ || id.rfind("free", 0) == 0; });
  }
  void WaitEntered(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_.size() >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> entered_;
  bool open_ = false;
};

class WorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    index_ = new FakeIndexServer();
    v1::Model model;
    model.set_model_id("tiny");
    model.set_num_layers(4);
    model.set_num_q_heads(4);
    model.set_num_kv_heads(2);
    model.set_head_dim(64);
    model.mutable_default_method()->set_method(v1::METHOD_DENSE);
    index_->service().PutModel(model);
    v1::HeadConfig c;
    c.set_layer(1);
    c.set_head(2);
    c.mutable_method()->set_method(v1::METHOD_A_SHAPE);
    c.mutable_method()->mutable_a_shape()->set_sink_tokens(4);
    c.mutable_method()->mutable_a_shape()->set_local_tokens(32);
    // Layer 2 (issue 11): head 1's config records its calibration length (50 keys; requests
    // here have 150), head 3 the same config written without it (an older version's row).
    v1::HeadConfig scaled = c;
    scaled.set_layer(2);
    scaled.set_head(1);
    scaled.mutable_method()->mutable_a_shape()->set_local_tokens(16);
    scaled.set_calibrated_tokens(50);
    v1::HeadConfig unscaled = scaled;
    unscaled.set_head(3);
    unscaled.clear_calibrated_tokens();
    index_->service().PutVersion("tiny", 1, {c, scaled, unscaled});
    index_->service().Publish("tiny", 1);

    WorkerOptions o;
    o.devices = "cpu";  // The CPU path, also on GPU machines (cuda_backend_test covers the GPU).
    o.metrics_address = "127.0.0.1:0";
    o.index_address = index_->address();
    o.max_inline_bytes = 1 << 20;
    o.executor_threads = 2;
    // Recall guard estimates only: these tests compare outputs with the configs as published
    // (pipeline_test and recall_guard_test cover widening).
    o.recall_target = 0;
    // Shared memory / CUDA IPC over loopback TCP (security_test covers the Unix-socket path).
    o.allow_tcp_shm = true;
    auto w = WorkerServer::Start(o);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = w->release();
    ClientOptions co;
    co.address = worker_->address();
    auto c2 = AttentionClient::Connect(co);
    ASSERT_TRUE(c2.ok()) << c2.status();
    client_ = c2->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete worker_;
    delete index_;
  }

  static FakeIndexServer* index_;
  static WorkerServer* worker_;
  static AttentionClient* client_;
};

FakeIndexServer* WorkerTest::index_ = nullptr;
WorkerServer* WorkerTest::worker_ = nullptr;
AttentionClient* WorkerTest::client_ = nullptr;

TEST_F(WorkerTest, MetadataListsRpcsMethodsAndDevice) {
  auto md = client_->Metadata();
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->name(), "spattn-worker");
  EXPECT_EQ(md->device(), "cpu");
  EXPECT_EQ(md->rpcs_size(), 7);
  for (const auto& rpc : md->rpcs()) EXPECT_TRUE(rpc.implemented()) << rpc.name();
  ASSERT_EQ(md->methods_size(), static_cast<int>(std::size(kAllMethods)));  // every method
  for (const auto& m : md->methods()) {
    auto method = ParseMethod(m.name());
    ASSERT_TRUE(method.ok()) << m.name();
    EXPECT_EQ(m.implemented_cpu(), CpuBuilderAvailable(*method)) << m.name();
    EXPECT_FALSE(m.implemented_cuda()) << m.name();
  }
  EXPECT_TRUE(md->methods(0).implemented_cpu());  // dense
  EXPECT_TRUE(md->methods(1).implemented_cpu());  // a_shape
  EXPECT_EQ(md->max_inline_bytes(), 1u << 20);
  EXPECT_EQ(md->index_service(), index_->address());
  EXPECT_EQ(md->dtypes_size(), 3);
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  EXPECT_EQ(*client_->Health("spattn.v1.AttentionService"), "SERVING");
}

TEST_F(WorkerTest, DenseInlineMatchesReference) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const ProblemShape shape = TestShape(dtype);
    HostProblem hp(shape);
    hp.FillRandom(11);
    v1::AttentionRequest req = InlineRequest(hp);
    req.set_causal(true);
    req.mutable_method_override()->set_method(v1::METHOD_DENSE);
    req.set_return_stats(true);
    req.set_return_lse(true);
    auto resp = client_->ComputeAttention(req);
    ASSERT_TRUE(resp.ok()) << ShapeString(shape) << ": " << Describe(resp.status());
    EXPECT_EQ(resp->device(), "cpu");
    EXPECT_EQ(resp->request_id(), "test");
    EXPECT_EQ(resp->config_version_used(), 0u);
    auto out = DecodeInlineOutput(*resp);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> want, want_lse;
    ASSERT_TRUE(ReferenceAttention(hp.problem(), {}, {}, &want, &want_lse).ok());
    ExpectClose(*out, want, dtype, ShapeString(shape));
    auto lse = DecodeInlineLse(*resp);
    ASSERT_TRUE(lse.ok());
    ExpectClose(*lse, want_lse, DType::kF32, "lse " + ShapeString(shape));
    ASSERT_EQ(resp->heads_size(), 4);
    for (const auto& h : resp->heads()) {
      EXPECT_EQ(h.method_name(), "dense");
      EXPECT_DOUBLE_EQ(h.density(), 1.0);
      EXPECT_EQ(h.recall(), 1);  // dense: recall 1 by definition
    }
    EXPECT_DOUBLE_EQ(resp->density(), 1.0);
    EXPECT_GT(resp->timings().total_seconds(), 0);
    EXPECT_GE(resp->timings().total_seconds(), resp->timings().kernel_seconds());
  }
}

TEST_F(WorkerTest, AShapeThroughSharedMemoryMatchesMaskedReference) {
  const ProblemShape shape = TestShape();
  HostProblem hp(shape);
  hp.FillRandom(21);
  const size_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
  // One region holds Q, K, V and O back to back, at offsets that are not page-aligned.
  const size_t q_off = 256, k_off = q_off + qb, v_off = k_off + kb, o_off = v_off + kb;
  const std::string key = testing_util::UniqueShmKey("wt");
  auto shm = SharedMemoryRegion::Create(key, o_off + qb);
  ASSERT_TRUE(shm.ok()) << shm.status();
  ASSERT_TRUE((*shm)->Write(q_off, hp.q_bytes().data(), qb).ok());
  ASSERT_TRUE((*shm)->Write(k_off, hp.k_bytes().data(), kb).ok());
  ASSERT_TRUE((*shm)->Write(v_off, hp.v_bytes().data(), kb).ok());
  ASSERT_TRUE(client_->RegisterSystemRegion("tensors", **shm).ok());

  const AttentionProblem& p = hp.problem();
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  *req.mutable_q() = RegionTensor(p.dtype, {p.total_q(), 4, 64}, "tensors", q_off, qb);
  *req.mutable_k() = RegionTensor(p.dtype, {p.total_k(), 2, 64}, "tensors", k_off, kb);
  *req.mutable_v() = RegionTensor(p.dtype, {p.total_k(), 2, 64}, "tensors", v_off, kb);
  *req.mutable_output() = RegionTensor(p.dtype, {p.total_q(), 4, 64}, "tensors", o_off, qb);
  req.mutable_method_override()->set_method(v1::METHOD_A_SHAPE);
  req.mutable_method_override()->mutable_a_shape()->set_sink_tokens(8);
  req.mutable_method_override()->mutable_a_shape()->set_local_tokens(40);
  req.set_return_stats(true);
  req.set_estimate_recall(true);

  const ReferenceMasks masks = AShapeMasks(hp, 8, 40, 64);
  const std::vector<float> want = Reference(hp, masks);
  for (int round = 0; round < 2; ++round) {  // The region is reused across requests.
    std::memset((*shm)->data() + o_off, 0, qb);
    auto resp = client_->ComputeAttention(req);
    ASSERT_TRUE(resp.ok()) << Describe(resp.status());
    EXPECT_EQ(resp->output().region().region_name(), "tensors");
    EXPECT_EQ(resp->output().region().offset(), o_off);
    std::vector<float> got(qb / 2);
    ToFloat((*shm)->data() + o_off, p.dtype, static_cast<int64_t>(got.size()), got.data());
    ExpectClose(got, want, p.dtype, "a_shape " + ShapeString(shape));
    ASSERT_EQ(resp->heads_size(), 4);
    // Density and recall match what the same index gives locally.
    AShapeParams params;
    params.sink_tokens = 8;
    params.local_tokens = 40;
    SparseIndex index;
    ASSERT_TRUE(BuildAShapeIndex(p, params, {0, 1, 2, 3}, 64, &index).ok());
    for (int h = 0; h < 4; ++h) {
      EXPECT_EQ(resp->heads(h).method(), v1::METHOD_A_SHAPE);
      const double density = static_cast<double>(ComputedPairs(p, index, h)) / AllowedPairs(p);
      EXPECT_DOUBLE_EQ(resp->heads(h).density(), density);
      EXPECT_LT(density, 1.0);
      auto recall = AttentionMassRecall(p, index, h, 64, 0x5eed);
      ASSERT_TRUE(recall.ok());
      EXPECT_DOUBLE_EQ(resp->heads(h).recall(), *recall);
      EXPECT_GT(*recall, 0.0);
      EXPECT_LT(*recall, 1.0);
    }
  }
  auto regions = client_->ListRegions();
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].name(), "tensors");
  auto n = client_->UnregisterRegion("tensors");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  // The region is gone: NOT_FOUND naming the field.
  auto gone = client_->ComputeAttention(req);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_NE(gone.status().message().find("q.region"), std::string::npos) << gone.status();
}

// Small parameters so that every method is really sparse on a few hundred keys.
MethodConfig SmallConfig(Method m) {
  MethodConfig c;
  c.method = m;
  c.a_shape.sink_tokens = 4;
  c.a_shape.local_tokens = 24;
  c.vertical_slash.last_q = 16;
  c.vertical_slash.vertical_size = 8;
  c.vertical_slash.slash_size = 8;
  c.vertical_slash.forced_columns = 2;
  c.vertical_slash.forced_diagonals = 4;
  c.block_sparse.block_size = 16;
  c.block_sparse.top_k = 3;
  c.flex_prefill.gamma = 0.5f;  // Random inputs spread attention: 0.9 keeps every block.
  c.flex_prefill.min_budget = 16;
  c.flex_prefill.max_budget = 64;
  c.flex_prefill.block_size = 16;
  c.sample_attention.alpha_c = 0.5f;  // As for flex_prefill: flat attention needs low alphas.
  c.sample_attention.alpha_s = 0.5f;
  c.sample_attention.block_size = 16;
  c.sample_attention.local_tokens = 16;
  c.anchor.block_size = 16;
  c.anchor.step = 2;
  c.anchor.init_tokens = 16;
  c.anchor.theta = 1.f;  // Random logits differ by a few units: theta 12 keeps every key.
  return c;
}

TEST_F(WorkerTest, EveryCpuMethodMatchesTheReferenceUnderItsMask) {
  const ProblemShape shape = TestShape();
  HostProblem hp(shape);
  hp.FillRandom(71);
  const AttentionProblem& p = hp.problem();
  int tested = 0;
  for (Method m : kAllMethods) {
    if (!CpuBuilderAvailable(m)) continue;
    const MethodConfig config = SmallConfig(m);
    // The same index, built here: the worker must compute attention under exactly its mask.
    SparseIndex index;
    BuildOptions build;
    build.block_m = 64;  // the worker's block_m; sampled_lines has its own (default 128)
    if (m == Method::kSampledLines) build.block_m = WorkerOptions().sampled_lines_block_m;
    const absl::Status built = BuildSparseIndex(p, config, {0, 1, 2, 3}, build, &index);
    if (built.code() == absl::StatusCode::kFailedPrecondition) continue;  // Needs assets.
    ASSERT_TRUE(built.ok()) << MethodName(m) << ": " << built;
    ReferenceMasks masks;
    for (int h = 0; h < 4; ++h) {
      for (int b = 0; b < p.batch(); ++b) masks.push_back(DensifyMask(p, index, h, b));
    }
    v1::AttentionRequest req = InlineRequest(hp);
    req.set_causal(true);
    req.set_return_stats(true);
    MethodConfigToProto(config, req.mutable_method_override());
    auto resp = client_->ComputeAttention(req);
    ASSERT_TRUE(resp.ok()) << config.DebugString() << ": " << Describe(resp.status());
    auto out = DecodeInlineOutput(*resp);
    ASSERT_TRUE(out.ok());
    ExpectClose(*out, Reference(hp, masks), p.dtype,
                absl::StrCat(config.DebugString(), " ", ShapeString(shape)));
    for (int h = 0; h < 4; ++h) {
      EXPECT_EQ(resp->heads(h).method_name(), MethodName(m));
      EXPECT_DOUBLE_EQ(resp->heads(h).density(),
                       static_cast<double>(ComputedPairs(p, index, h)) / AllowedPairs(p))
          << config.DebugString() << " head " << h;
    }
    if (m != Method::kDense) {
      EXPECT_LT(resp->density(), 1.0) << config.DebugString();
    }
    ++tested;
  }
  std::printf("methods compared with the masked reference: %d\n", tested);
  EXPECT_GE(tested, 2);  // dense and a_shape at least.
}

TEST_F(WorkerTest, StreamAnswersLayersInOrder) {
  const ProblemShape shape = TestShape();
  std::vector<std::unique_ptr<HostProblem>> layers;
  auto stream = client_->OpenStream();
  for (int layer = 0; layer < 4; ++layer) {
    layers.push_back(std::make_unique<HostProblem>(shape));
    layers.back()->FillRandom(100 + layer);
    v1::AttentionRequest req = InlineRequest(*layers.back());
    req.set_causal(true);
    req.set_layer(layer);
    req.set_request_id("prompt-1");
    req.mutable_method_override()->set_method(v1::METHOD_DENSE);
    ASSERT_TRUE(stream->Send(req).ok());
  }
  for (int layer = 0; layer < 4; ++layer) {
    auto resp = stream->Receive();
    ASSERT_TRUE(resp.ok()) << "layer " << layer << ": " << Describe(resp.status());
    EXPECT_EQ(resp->layer(), static_cast<uint32_t>(layer));
    auto out = DecodeInlineOutput(*resp);
    ASSERT_TRUE(out.ok());
    ExpectClose(*out, Reference(*layers[layer]), shape.dtype, absl::StrCat("stream layer ", layer));
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(WorkerTest, StreamEndsWithTheFirstFailingMessage) {
  HostProblem hp(TestShape());
  hp.FillRandom(5);
  auto stream = client_->OpenStream();
  v1::AttentionRequest good = InlineRequest(hp);
  good.set_causal(true);
  v1::AttentionRequest bad = good;
  bad.set_layer(1);
  bad.mutable_q()->mutable_desc()->set_shape(2, 32);
  ASSERT_TRUE(stream->Send(good).ok());
  ASSERT_TRUE(stream->Send(bad).ok());
  auto first = stream->Receive();
  ASSERT_TRUE(first.ok()) << Describe(first.status());
  auto second = stream->Receive();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find("stream message 2 (layer 1): q.desc.shape[2]"),
            std::string::npos)
      << second.status();
}

TEST_F(WorkerTest, HeadConfigsComeFromTheIndexService) {
  HostProblem hp(TestShape());
  hp.FillRandom(31);
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  req.set_model_id("tiny");
  req.set_layer(1);
  req.set_return_stats(true);
  auto resp = client_->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  EXPECT_EQ(resp->config_version_used(), 1u);
  ASSERT_EQ(resp->heads_size(), 4);
  EXPECT_EQ(resp->heads(0).method_name(), "dense");
  EXPECT_EQ(resp->heads(2).method_name(), "a_shape");
  EXPECT_LT(resp->heads(2).density(), 1.0);
  // Every head's recall estimate, without estimate_recall.
  EXPECT_EQ(resp->heads(0).recall(), 1.0);
  EXPECT_GT(resp->heads(2).recall(), 0.0);
  EXPECT_LT(resp->heads(2).recall(), 1.0);
  EXPECT_GT(resp->timings().recall_seconds(), 0.0);
  // Heads 0, 1, 3 are dense, head 2 runs a_shape(4, 32): compare against per-head masks.
  ReferenceMasks masks = AShapeMasks(hp, 4, 32, 64);
  for (int h : {0, 1, 3}) {
    for (int b = 0; b < 2; ++b) {
      masks[h * 2 + b].assign(static_cast<size_t>(hp.problem().q_len(b)) * hp.problem().k_len(b),
                              1);
    }
  }
  auto out = DecodeInlineOutput(*resp);
  ASSERT_TRUE(out.ok());
  ExpectClose(*out, Reference(hp, masks), DType::kBF16, "model tiny layer 1");

  // A per-request override beats the config; a head override beats both.
  req.mutable_method_override()->set_method(v1::METHOD_DENSE);
  auto* ho = req.add_head_overrides();
  ho->set_head(1);
  ho->mutable_method()->set_method(v1::METHOD_A_SHAPE);
  resp = client_->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  EXPECT_EQ(resp->heads(1).method_name(), "a_shape");
  EXPECT_EQ(resp->heads(2).method_name(), "dense");

  // Model mismatches and unknown models.
  v1::AttentionRequest wrong_layer = InlineRequest(hp);
  wrong_layer.set_model_id("tiny");
  wrong_layer.set_layer(9);
  auto r1 = client_->ComputeAttention(wrong_layer);
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kInvalidArgument) << r1.status();
  EXPECT_EQ(r1.status().message().rfind("layer:", 0), 0u) << r1.status();
  v1::AttentionRequest unknown = InlineRequest(hp);
  unknown.set_model_id("nope");
  auto r2 = client_->ComputeAttention(unknown);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kNotFound) << r2.status();
  EXPECT_NE(r2.status().message().find("model_id"), std::string::npos) << r2.status();
  v1::AttentionRequest bad_version = InlineRequest(hp);
  bad_version.set_model_id("tiny");
  bad_version.set_config_version(5);
  auto r3 = client_->ComputeAttention(bad_version);
  EXPECT_EQ(r3.status().code(), absl::StatusCode::kNotFound) << r3.status();
}

// Issue 11: a head config that records its calibration length runs its key-count budgets scaled
// to the request's longest sequence (150 keys = 3x the 50 it was calibrated on: a_shape local
// 16 x 3^0.68 = 34); the same config without the field runs as published.
TEST_F(WorkerTest, HeadConfigsScaleFromTheirCalibrationLength) {
  HostProblem hp(TestShape());
  hp.FillRandom(37);
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  req.set_model_id("tiny");
  req.set_layer(2);
  req.set_return_stats(true);
  auto resp = client_->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  ASSERT_EQ(resp->heads_size(), 4);
  EXPECT_EQ(resp->heads(1).method_name(), "a_shape");
  EXPECT_EQ(resp->heads(3).method_name(), "a_shape");
  MethodConfig published;
  published.method = Method::kAShape;
  published.a_shape.sink_tokens = 4;
  published.a_shape.local_tokens = 16;
  const MethodConfig served =
      ScaleConfigToLength(published, 50, 150, RecallGuardOptions::kLengthExponent);
  ASSERT_EQ(served.a_shape.local_tokens, 34);
  EXPECT_GT(resp->heads(1).density(), resp->heads(3).density());
  // Outputs under exactly those masks: head 1 a_shape(4, 34), head 3 a_shape(4, 16), 0 and 2
  // dense.
  ReferenceMasks wide = AShapeMasks(hp, 4, 34, 64);
  ReferenceMasks masks = AShapeMasks(hp, 4, 16, 64);
  for (int b = 0; b < 2; ++b) masks[1 * 2 + b] = wide[1 * 2 + b];
  for (int h : {0, 2}) {
    for (int b = 0; b < 2; ++b) {
      masks[h * 2 + b].assign(static_cast<size_t>(hp.problem().q_len(b)) * hp.problem().k_len(b),
                              1);
    }
  }
  auto out = DecodeInlineOutput(*resp);
  ASSERT_TRUE(out.ok());
  ExpectClose(*out, Reference(hp, masks), DType::kBF16, "model tiny layer 2");
}

TEST_F(WorkerTest, BadRequestsGetPreciseCodesAndTheWorkerKeepsServing) {
  HostProblem hp(TestShape());
  hp.FillRandom(41);
  const v1::AttentionRequest good = InlineRequest(hp);
  struct Case {
    const char* what;
    std::function<void(v1::AttentionRequest*)> mutate;
    absl::StatusCode code;
    const char* prefix;
  };
  const std::vector<Case> cases = {
      {"shape", [](auto* r) { r->mutable_k()->mutable_desc()->set_shape(1, 3); },
       absl::StatusCode::kInvalidArgument, "k.desc.shape[1]"},
      {"bytes", [](auto* r) { r->mutable_v()->mutable_inline_data()->mutable_data()->pop_back(); },
       absl::StatusCode::kInvalidArgument, "v.inline_data"},
      {"region",
       [](auto* r) {
         r->mutable_q()->mutable_region()->set_region_name("missing");
         r->mutable_q()->mutable_region()->set_byte_size(201 * 4 * 64 * 2);
       },
       absl::StatusCode::kNotFound, "q.region.region_name"},
      {"method param",
       [](auto* r) {
         r->mutable_method_override()->set_method(v1::METHOD_VERTICAL_SLASH);
         r->mutable_method_override()->mutable_vertical_slash()->set_last_q(-5);
       },
       absl::StatusCode::kInvalidArgument, "method_override.vertical_slash.last_q"},
      {"cuda ipc on cpu",
       [](auto* r) {
         auto* c = r->mutable_q()->mutable_cuda_ipc();
         c->set_ipc_handle(std::string(64, '\x02'));
         c->set_byte_size(201 * 4 * 64 * 2);
       },
       absl::StatusCode::kFailedPrecondition, "q.cuda_ipc"},
      {"version without model", [](auto* r) { r->set_config_version(3); },
       absl::StatusCode::kInvalidArgument, "config_version"},
  };
  for (const Case& c : cases) {
    v1::AttentionRequest r = good;
    c.mutate(&r);
    auto resp = client_->ComputeAttention(r);
    ASSERT_FALSE(resp.ok()) << c.what;
    EXPECT_EQ(resp.status().code(), c.code) << c.what << ": " << Describe(resp.status());
    EXPECT_EQ(resp.status().message().rfind(c.prefix, 0), 0u)
        << c.what << ": " << Describe(resp.status());
  }
  auto ok = client_->ComputeAttention(good);
  EXPECT_TRUE(ok.ok()) << Describe(ok.status());

  // A registered region referenced past its end: INVALID_ARGUMENT naming the field.
  const std::string key = testing_util::UniqueShmKey("wt_small");
  auto shm = SharedMemoryRegion::Create(key, 4096);
  ASSERT_TRUE(shm.ok()) << shm.status();
  ASSERT_TRUE(client_->RegisterSystemRegion("small", **shm).ok());
  EXPECT_EQ(client_->RegisterSystemRegion("small", **shm).code(), absl::StatusCode::kAlreadyExists);
  v1::AttentionRequest past = good;
  const uint64_t kb = hp.k_bytes().size();
  *past.mutable_k() = RegionTensor(DType::kBF16, {hp.problem().total_k(), 2, 64}, "small", 0, kb);
  auto out_of_bounds = client_->ComputeAttention(past);
  EXPECT_EQ(out_of_bounds.status().code(), absl::StatusCode::kInvalidArgument)
      << out_of_bounds.status();
  EXPECT_EQ(out_of_bounds.status().message().rfind("k.region: offset 0 + byte_size", 0), 0u)
      << out_of_bounds.status();
  EXPECT_EQ(*client_->UnregisterRegion("small"), 1);
  EXPECT_EQ(client_->UnregisterRegion("small").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkerTest, MetricsScrapeHasEveryFamily) {
  HostProblem hp(TestShape());
  hp.FillRandom(51);
  ASSERT_TRUE(client_->ComputeAttention(InlineRequest(hp)).ok());
  ASSERT_GT(worker_->metrics_port(), 0);
  const std::string body = HttpGet(worker_->metrics_port(), "/metrics");
  for (const char* family :
       {"spattn_requests_total", "spattn_request_duration_seconds", "spattn_stage_duration_seconds",
        "spattn_requests_in_flight", "spattn_queue_depth", "spattn_prefill_tokens_total",
        "spattn_attention_density_ratio", "spattn_attention_recall_ratio",
        "spattn_method_selected_total", "spattn_transfer_bytes_total",
        "spattn_gpu_memory_used_bytes", "spattn_errors_total", "spattn_build_info",
        "spattn_index_service_up"}) {
    EXPECT_NE(body.find(absl::StrCat("# TYPE ", family, " ")), std::string::npos) << family;
  }
  EXPECT_GE(Sample(body, "spattn_requests_total{code=\"OK\",rpc=\"ComputeAttention\"}"), 1);
  EXPECT_GE(Sample(body, "spattn_prefill_tokens_total"), 201);
  EXPECT_GE(Sample(body, "spattn_stage_duration_seconds_count{stage=\"kernel\"}"), 1);
  EXPECT_GE(Sample(body, "spattn_transfer_bytes_total{direction=\"in\",handle_kind=\"inline\"}"),
            hp.q_bytes().size());
  EXPECT_EQ(Sample(body, "spattn_requests_in_flight"), 0);
  EXPECT_EQ(Sample(body, "spattn_index_service_up"), 1);
}

// A worker whose single executor thread the test can hold, for queue, deadline and drain tests.
class HeldWorker {
 public:
  explicit HeldWorker(int queue_capacity) {
    WorkerOptions o;
    o.devices = "cpu";
    o.queue_capacity = queue_capacity;
    o.executor_threads = 1;
    o.drain_timeout = absl::Seconds(20);
    o.before_execute = [this](const std::string& id) { gate_.Enter(id); };
    auto w = WorkerServer::Start(o);
    EXPECT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    ClientOptions co;
    co.address = worker_->address();
    client_ = std::move(*AttentionClient::Connect(co));
    hp_ = std::make_unique<HostProblem>(TestShape());
    hp_->FillRandom(61);
  }
  v1::AttentionRequest Request(const std::string& id) {
    v1::AttentionRequest r = InlineRequest(*hp_);
    r.set_request_id(id);
    return r;
  }
  std::future<absl::StatusOr<v1::AttentionResponse>> Async(const std::string& id,
                                                           absl::Duration timeout = {}) {
    v1::AttentionRequest r = Request(id);
    return std::async(std::launch::async,
                      [this, r, timeout] { return client_->ComputeAttention(r, timeout); });
  }
  Gate& gate() { return gate_; }
  WorkerServer& worker() { return *worker_; }
  AttentionClient& client() { return *client_; }

 private:
  Gate gate_;
  std::unique_ptr<WorkerServer> worker_;
  std::unique_ptr<AttentionClient> client_;
  std::unique_ptr<HostProblem> hp_;
};

// Option checks answer before anything starts, naming the option.
TEST(WorkerOptionsTest, NegativeSaapAssetsBytesIsRefused) {
  WorkerOptions o;
  o.devices = "cpu";
  o.listen_address = "127.0.0.1:0";
  o.metrics_address = "";
  o.saap_assets_bytes = -1;
  auto w = WorkerServer::Start(o);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("saap_assets_bytes must be >= 0, got -1"), std::string::npos)
      << w.status();
  o.saap_assets_bytes = 0;  // Only the layer in use stays cached: allowed.
  auto ok = WorkerServer::Start(o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  (*ok)->Shutdown();
}

// The worker's guard options reach its request pipeline: the adaptive tries (spattn-worker
// --recall_adaptive, default auto), target, probe rows and length exponent.
TEST(WorkerOptionsTest, GuardOptionsReachThePipeline) {
  WorkerOptions o;
  PipelineOptions po = WorkerPipelineOptions(o);
  EXPECT_TRUE(po.guard.adaptive_auto);  // the default: per head by its published method
  EXPECT_EQ(po.guard.adaptive.DebugString(), RecallGuardOptions::DefaultAdaptive().DebugString());
  EXPECT_EQ(po.guard.adaptive_also.method, Method::kDense);
  RecallGuardOptions tries;
  ASSERT_TRUE(SetAdaptiveTries("sampled_lines,flex_prefill", &tries).ok());
  o.recall_adaptive = tries.adaptive;
  o.recall_adaptive_also = tries.adaptive_also;
  o.recall_adaptive_auto = tries.adaptive_auto;
  o.recall_target = 0.9;
  o.recall_probe_rows = 48;
  o.recall_length_exponent = 0.5;
  o.sampled_lines_block_m = 64;
  po = WorkerPipelineOptions(o);
  EXPECT_EQ(po.guard.adaptive.method, Method::kSampledLines);
  EXPECT_EQ(po.guard.adaptive_also.method, Method::kFlexPrefill);
  EXPECT_FALSE(po.guard.adaptive_auto);
  EXPECT_EQ(po.guard.target, 0.9);
  EXPECT_EQ(po.guard.probe_rows, 48);
  EXPECT_EQ(po.guard.length_exponent, 0.5);
  EXPECT_EQ(po.sampled_lines_block_m, 64);
}

TEST(WorkerQueueTest, QueueFullIsResourceExhausted) {
  HeldWorker held(/*queue_capacity=*/1);
  auto running = held.Async("a");  // Runs and blocks in the gate.
  held.gate().WaitEntered(1);
  auto queued = held.Async("b");  // Waits in the queue.
  // Two admitted (one running, one waiting): the queue of capacity 1 is full.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (Sample(Scrape(held.worker()), "spattn_requests_in_flight") < 2 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto third = held.client().ComputeAttention(held.Request("c"), absl::Seconds(5));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find("queue full"), std::string::npos);
  held.gate().Open();
  EXPECT_TRUE(running.get().ok());
  EXPECT_TRUE(queued.get().ok());
  const std::string text = Scrape(held.worker());
  EXPECT_GE(Sample(text, "spattn_errors_total{kind=\"queue_full\"}"), 1);
  EXPECT_GE(
      Sample(text, "spattn_requests_total{code=\"RESOURCE_EXHAUSTED\",rpc=\"ComputeAttention\"}"),
      1);
}

TEST(WorkerQueueTest, DeadlinePassedInTheQueueIsDeadlineExceeded) {
  HeldWorker held(/*queue_capacity=*/4);
  auto running = held.Async("a");
  held.gate().WaitEntered(1);
  auto late = held.Async("free-late", absl::Milliseconds(300));
  const auto late_status = late.get().status();
  EXPECT_EQ(late_status.code(), absl::StatusCode::kDeadlineExceeded) << late_status;
  held.gate().Open();
  EXPECT_TRUE(running.get().ok());
  // The worker itself saw the deadline (it checks before each stage) and said so.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  double seen = 0;
  while (absl::Now() < end) {
    seen = Sample(Scrape(held.worker()),
                  "spattn_requests_total{code=\"DEADLINE_EXCEEDED\",rpc=\"ComputeAttention\"}");
    if (seen >= 1) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(seen, 1);
}

TEST(WorkerDrainTest, DrainFinishesInFlightAndRefusesNewWork) {
  HeldWorker held(/*queue_capacity=*/4);
  auto in_flight = held.Async("a");
  held.gate().WaitEntered(1);
  std::thread shutdown([&] { held.worker().Shutdown(); });
  // Health flips to NOT_SERVING, and new calls are refused with UNAVAILABLE.
  absl::StatusOr<std::string> health;
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    health = held.client().Health();
    if (health.ok() && *health == "NOT_SERVING") break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "NOT_SERVING");
  absl::StatusOr<v1::AttentionResponse> refused = absl::UnknownError("not sent");
  while (absl::Now() < end) {
    // Short timeout: a request admitted just before draining began waits behind "a".
    refused = held.client().ComputeAttention(held.Request("free-b"), absl::Milliseconds(200));
    if (refused.status().code() == absl::StatusCode::kUnavailable) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  held.gate().Open();
  auto done = in_flight.get();
  EXPECT_TRUE(done.ok()) << Describe(done.status());
  shutdown.join();
}

TEST(WorkerDrainTest, OpenStreamsKeepBeingServedDuringDrain) {
  HeldWorker held(/*queue_capacity=*/4);
  auto stream = held.client().OpenStream();
  v1::AttentionRequest layer0 = held.Request("free-0");
  ASSERT_TRUE(stream->Send(layer0).ok());
  ASSERT_TRUE(stream->Receive().ok());
  std::thread shutdown([&] { held.worker().Shutdown(); });
  // New calls are refused, but the prompt already streaming gets its remaining layers.
  absl::StatusOr<v1::AttentionResponse> refused = absl::UnknownError("not sent");
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    refused = held.client().ComputeAttention(held.Request("free-x"), absl::Milliseconds(200));
    if (refused.status().code() == absl::StatusCode::kUnavailable) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  v1::AttentionRequest layer1 = held.Request("free-1");
  layer1.set_layer(1);
  ASSERT_TRUE(stream->Send(layer1).ok());
  auto answer = stream->Receive();
  ASSERT_TRUE(answer.ok()) << Describe(answer.status());
  EXPECT_EQ(answer->layer(), 1u);
  EXPECT_TRUE(stream->Finish().ok());
  shutdown.join();
}

TEST(WorkerStreamTest, CancelledStreamStopsAndTheWorkerCarriesOn) {
  HeldWorker held(/*queue_capacity=*/4);
  {
    auto stream = held.client().OpenStream();
    ASSERT_TRUE(stream->Send(held.Request("blocked")).ok());
    held.gate().WaitEntered(1);
    stream->Cancel();
    EXPECT_EQ(stream->Finish().code(), absl::StatusCode::kCancelled);
  }
  // The client gives up at once; give the cancellation time to reach the worker over loopback.
  absl::SleepFor(absl::Seconds(1));
  held.gate().Open();
  // The held message sees the cancellation when it resumes; the worker keeps serving.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  double cancelled = 0;
  while (absl::Now() < end && cancelled < 1) {
    cancelled = Sample(Scrape(held.worker()),
                       "spattn_requests_total{code=\"CANCELLED\",rpc=\"ComputeAttentionStream\"}");
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(cancelled, 1);
  auto ok = held.client().ComputeAttention(held.Request("after"));
  EXPECT_TRUE(ok.ok()) << Describe(ok.status());
}

}  // namespace
}  // namespace spattn
