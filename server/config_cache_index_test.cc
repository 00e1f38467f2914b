// The worker's head-config cache and the worker itself against the real index service
// (index/index_server.h, RocksDB in $TEST_TMPDIR): published configs and learned tensors arrive,
// a new publish reaches a running worker through WatchPublished, pinned versions keep working,
// and a worker keeps serving from its cache while the index service is stopped.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/attention_client.h"
#include "index/index_server.h"
#include "index/tensor_client.h"
#include "index/test_util.h"
#include "kernels/host_problem.h"
#include "proto/grpc_status.h"
#include "server/config_cache.h"
#include "server/convert.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time end = absl::Now() + absl::Seconds(15);
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

class RealIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IndexServerOptions o;
    const char* tmp = getenv("TEST_TMPDIR");
    o.data_dir = absl::StrCat(tmp ? tmp : "/tmp", "/index_",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    o.sync_writes = false;
    auto index = IndexServer::Start(o);
    ASSERT_TRUE(index.ok()) << index.status();
    index_ = std::move(*index);
    stub_ = v1::IndexService::NewStub(
        grpc::CreateChannel(index_->address(), grpc::InsecureChannelCredentials()));
    model_ = testing_util::MakeModel("llama-mini", 2, 4, 2, 64);
    model_.mutable_default_method()->set_method(v1::METHOD_DENSE);
    grpc::ClientContext ctx;
    v1::PutModelRequest req;
    *req.mutable_model() = model_;
    v1::PutModelResponse resp;
    ASSERT_TRUE(stub_->PutModel(&ctx, req, &resp).ok());
  }

  // Creates, fills, seals and publishes a version; returns its number.
  uint64_t Publish(const std::vector<v1::HeadConfig>& configs,
                   const std::vector<TensorUpload>& tensors, uint64_t expected_current) {
    v1::VersionInfo info;
    {
      grpc::ClientContext ctx;
      v1::CreateVersionRequest req;
      req.set_model_id(model_.model_id());
      EXPECT_TRUE(stub_->CreateVersion(&ctx, req, &info).ok());
    }
    {
      grpc::ClientContext ctx;
      v1::PutHeadConfigsRequest req;
      req.set_model_id(model_.model_id());
      req.set_version(info.version());
      for (const auto& c : configs) *req.add_configs() = c;
      v1::PutHeadConfigsResponse resp;
      const grpc::Status s = stub_->PutHeadConfigs(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    if (!tensors.empty()) {
      auto up = UploadTensors(*stub_, model_.model_id(), info.version(), tensors, 4096);
      EXPECT_TRUE(up.ok()) << up.status();
    }
    {
      grpc::ClientContext ctx;
      v1::SealVersionRequest req;
      req.set_model_id(model_.model_id());
      req.set_version(info.version());
      v1::VersionInfo sealed;
      const grpc::Status s = stub_->SealVersion(&ctx, req, &sealed);
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    grpc::ClientContext ctx;
    v1::PublishVersionRequest req;
    req.set_model_id(model_.model_id());
    req.set_version(info.version());
    req.set_expected_current_version(expected_current);
    v1::PublishVersionResponse resp;
    const grpc::Status s = stub_->PublishVersion(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.version();
  }

  static v1::HeadConfig Config(int layer, int head, v1::Method method) {
    v1::HeadConfig c;
    c.set_layer(layer);
    c.set_head(head);
    c.mutable_method()->set_method(method);
    if (method == v1::METHOD_A_SHAPE) {
      c.mutable_method()->mutable_a_shape()->set_sink_tokens(4);
      c.mutable_method()->mutable_a_shape()->set_local_tokens(32);
    }
    return c;
  }

  std::unique_ptr<IndexServer> index_;
  std::unique_ptr<v1::IndexService::Stub> stub_;
  v1::Model model_;
};

TEST_F(RealIndexTest, CacheReadsConfigsAndTensorsAndFollowsPublishes) {
  const std::vector<v1::HeadConfig> configs = testing_util::MakeHeadConfigs(model_, 1);
  std::vector<TensorUpload> tensors = testing_util::MakeCentroids(model_, 8, 2);
  for (uint32_t h = 0; h < 4; ++h) {
    for (TensorUpload& t : testing_util::MakeClassifier(model_, 1, h, 16, 8, 3 + h)) {
      tensors.push_back(std::move(t));
    }
  }
  const uint64_t v1 = Publish(configs, tensors, 0);

  ConfigCacheOptions o;
  o.index_address = index_->address();
  o.retry_min = absl::Milliseconds(20);
  o.retry_max = absl::Milliseconds(200);
  ConfigCache cache(o);
  auto m = cache.Get(model_.model_id(), 0, absl::InfiniteFuture());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->version, v1);
  EXPECT_EQ((*m)->num_layers, 2);
  for (const v1::HeadConfig& c : configs) {
    auto want = ParseMethodConfig(c.method(), "want");
    ASSERT_TRUE(want.ok());
    EXPECT_EQ((*m)->For(c.layer(), c.head()).DebugString(), want->DebugString())
        << "layer " << c.layer() << " head " << c.head();
  }
  auto assets = cache.GetAssets(**m, 1, absl::InfiniteFuture());
  ASSERT_TRUE(assets.ok()) << assets.status();
  EXPECT_EQ((*assets)->num_centroids, 8);
  ASSERT_EQ((*assets)->centroids.size(), 2u);
  EXPECT_EQ((*assets)->centroids[1].size(), 8u * 64);
  ASSERT_EQ((*assets)->classifiers.size(), 4u);
  EXPECT_EQ((*assets)->classifiers[2].size(), 2u);
  EXPECT_EQ((*assets)->classifiers[2][1].out, 8);

  const uint64_t v2 = Publish({Config(0, 1, v1::METHOD_A_SHAPE)}, {}, v1);
  ASSERT_TRUE(Eventually([&] { return cache.PublishedVersions()[model_.model_id()] == v2; }));
  auto m2 = cache.Get(model_.model_id(), 0, absl::InfiniteFuture());
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ((*m2)->For(0, 1).method, Method::kAShape);
  EXPECT_EQ((*m2)->For(0, 2).method, Method::kDense);  // model default
  // The retired version stays readable when pinned.
  auto pinned = cache.Get(model_.model_id(), v1, absl::InfiniteFuture());
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ((*pinned)->version, v1);
}

TEST_F(RealIndexTest, WorkerUsesPublishedConfigsAndServesFromCacheWhileIndexIsDown) {
  const uint64_t v1 = Publish({Config(1, 2, v1::METHOD_A_SHAPE)}, {}, 0);
  WorkerOptions wo;
  wo.index_address = index_->address();
  // Estimate recall but serve the published configs as they are: this test is about them.
  wo.recall_target = 0;
  auto worker = WorkerServer::Start(wo);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ClientOptions co;
  co.address = (*worker)->address();
  auto client = AttentionClient::Connect(co);
  ASSERT_TRUE(client.ok());

  ProblemShape shape;
  shape.q_lens = {150};
  shape.num_q_heads = 4;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  HostProblem hp(shape);
  hp.FillRandom(8);
  v1::AttentionRequest req = testing_util::InlineRequest(hp);
  req.set_causal(true);
  req.set_model_id(model_.model_id());
  req.set_layer(1);
  req.set_return_stats(true);
  auto r = (*client)->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config_version_used(), v1);
  EXPECT_EQ(r->heads(2).method_name(), "a_shape");
  EXPECT_EQ(r->heads(1).method_name(), "dense");

  // Publish v2: the running worker picks it up without a restart.
  const uint64_t v2 = Publish({Config(1, 1, v1::METHOD_A_SHAPE)}, {}, v1);
  ASSERT_TRUE(Eventually([&] {
    auto again = (*client)->ComputeAttention(req);
    return again.ok() && again->config_version_used() == v2;
  }));
  r = (*client)->ComputeAttention(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->heads(1).method_name(), "a_shape");
  EXPECT_EQ(r->heads(2).method_name(), "dense");

  // Index service gone: the worker notices, says so, and keeps serving the cached config.
  index_->Shutdown();
  ASSERT_TRUE(Eventually([&] {
    auto h = (*client)->Health("spattn.worker.index_link");
    return h.ok() && *h == "NOT_SERVING";
  }));
  EXPECT_EQ(*(*client)->Health(), "SERVING");
  auto md = (*client)->Metadata();
  ASSERT_TRUE(md.ok());
  EXPECT_FALSE(md->index_service_reachable());
  r = (*client)->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config_version_used(), v2);
  v1::AttentionRequest other = req;
  other.set_model_id("never-seen");
  auto refused = (*client)->ComputeAttention(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
}

}  // namespace
}  // namespace spattn
