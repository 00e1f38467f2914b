// End to end on loopback: a real index service (RocksDB in a temp dir) and a real worker, both
// in-process, driven only through their gRPC clients. A model's per-head configs are published
// through the IndexService; a request through shared memory must then use exactly those methods,
// produce the right numbers, survive an index-service restart, show up in both servers' metrics,
// and bad requests must get precise codes while both servers keep serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/attention_client.h"
#include "index/index_server.h"
#include "index/test_util.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/host_problem.h"
#include "kernels/reference/reference_attention.h"
#include "proto/grpc_status.h"
#include "server/test_util.h"
#include "server/worker_server.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

using testing_util::HttpGet;
using testing_util::UniqueShmKey;

constexpr char kModel[] = "e2e-model";
constexpr int kHeads = 4, kKvHeads = 2, kDim = 64;

// FlashAttention's tolerance: twice the output dtype's rounding of the exact value, plus fp32
// accumulation noise.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, int num_heads,
                 int head_dim, int head, double unit_roundoff, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<int>((i / head_dim) % num_heads) != head) continue;
    const double tol = 2 * unit_roundoff * std::fabs(want[i]) + 1e-5;
    if (!(std::fabs(double{got[i]} - want[i]) <= tol) && bad++ < 3) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = absl::StrCat(getenv("TEST_TMPDIR"), "/index-",
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    StartIndex();
    WorkerOptions w;
    w.metrics_address = "127.0.0.1:0";
    w.index_address = index_->address();
    // The recall guard estimates only: outputs are compared with the configs as published on
    // random tensors (server/pipeline_test and recall_guard_test cover widening).
    w.recall_target = 0;
    // Shared memory / CUDA IPC over loopback TCP (security_test covers the Unix-socket path).
    w.allow_tcp_shm = true;
    auto worker = WorkerServer::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    ClientOptions c;
    c.address = worker_->address();
    auto client = AttentionClient::Connect(c);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void TearDown() override {
    client_.reset();
    if (worker_) worker_->Shutdown();
    if (index_) index_->Shutdown();
  }

  void StartIndex() {
    IndexServerOptions o;
    o.data_dir = data_dir_;
    o.listen_address = index_port_ ? absl::StrCat("127.0.0.1:", index_port_) : "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    auto index = IndexServer::Start(o);
    ASSERT_TRUE(index.ok()) << index.status();
    index_ = std::move(*index);
    index_port_ = index_->port();
    index_stub_ = v1::IndexService::NewStub(
        grpc::CreateChannel(index_->address(), grpc::InsecureChannelCredentials()));
  }

  // Publishes version 1 of the model: head 0 dense, head 1 A-shape (sink 4, local 40), heads 2
  // and 3 the model default (vertical-slash with small sizes).
  void PublishConfigs() {
    v1::PutModelRequest put;
    v1::Model* m = put.mutable_model();
    m->set_model_id(kModel);
    m->set_num_layers(2);
    m->set_num_q_heads(kHeads);
    m->set_num_kv_heads(kKvHeads);
    m->set_head_dim(kDim);
    m->set_rope_theta(10000);
    m->mutable_default_method()->set_method(v1::METHOD_VERTICAL_SLASH);
    v1::VerticalSlashParams* vs = m->mutable_default_method()->mutable_vertical_slash();
    vs->set_last_q(16);
    vs->set_vertical_size(16);
    vs->set_slash_size(16);
    vs->set_forced_columns(2);
    vs->set_forced_diagonals(4);
    grpc::ClientContext c1;
    v1::PutModelResponse put_resp;
    ASSERT_TRUE(index_stub_->PutModel(&c1, put, &put_resp).ok());

    grpc::ClientContext c2;
    v1::CreateVersionRequest create;
    create.set_model_id(kModel);
    v1::VersionInfo version;
    ASSERT_TRUE(index_stub_->CreateVersion(&c2, create, &version).ok());
    ASSERT_EQ(version.version(), 1u);

    v1::PutHeadConfigsRequest configs;
    configs.set_model_id(kModel);
    configs.set_version(1);
    v1::HeadConfig* dense = configs.add_configs();
    dense->set_layer(0);
    dense->set_head(0);
    dense->mutable_method()->set_method(v1::METHOD_DENSE);
    v1::HeadConfig* ashape = configs.add_configs();
    ashape->set_layer(0);
    ashape->set_head(1);
    ashape->mutable_method()->set_method(v1::METHOD_A_SHAPE);
    ashape->mutable_method()->mutable_a_shape()->set_sink_tokens(4);
    ashape->mutable_method()->mutable_a_shape()->set_local_tokens(40);
    grpc::ClientContext c3;
    v1::PutHeadConfigsResponse written;
    ASSERT_TRUE(index_stub_->PutHeadConfigs(&c3, configs, &written).ok());
    EXPECT_EQ(written.written(), 2u);

    grpc::ClientContext c4;
    v1::SealVersionRequest seal;
    seal.set_model_id(kModel);
    seal.set_version(1);
    ASSERT_TRUE(index_stub_->SealVersion(&c4, seal, &version).ok());
    grpc::ClientContext c5;
    v1::PublishVersionRequest publish;
    publish.set_model_id(kModel);
    publish.set_version(1);
    publish.set_expected_current_version(0);
    v1::PublishVersionResponse published;
    ASSERT_TRUE(index_stub_->PublishVersion(&c5, publish, &published).ok());
  }

  // A request for layer 0 of the model whose tensors sit in a shared-memory region: Q, K, V,
  // then room for O.
  v1::AttentionRequest ShmRequest(HostProblem& hp, const std::string& region) {
    const AttentionProblem& p = hp.problem();
    const size_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
    shm_ = SharedMemoryRegion::Create(UniqueShmKey("e2e"), 2 * qb + 2 * kb).value();
    EXPECT_TRUE(shm_->Write(0, hp.q_bytes().data(), qb).ok());
    EXPECT_TRUE(shm_->Write(qb, hp.k_bytes().data(), kb).ok());
    EXPECT_TRUE(shm_->Write(qb + kb, hp.v_bytes().data(), kb).ok());
    EXPECT_TRUE(client_->RegisterSystemRegion(region, *shm_).ok());
    const std::vector<int64_t> q_shape = {p.total_q(), p.num_q_heads, p.head_dim};
    const std::vector<int64_t> kv_shape = {p.total_k(), p.num_kv_heads, p.head_dim};
    v1::AttentionRequest r;
    r.set_request_id("e2e");
    r.set_model_id(kModel);
    r.set_layer(0);
    r.set_num_q_heads(p.num_q_heads);
    r.set_num_kv_heads(p.num_kv_heads);
    r.set_head_dim(p.head_dim);
    r.set_causal(true);
    for (int32_t x : p.cu_seqlens_q) r.add_cu_seqlens_q(x);
    for (int32_t x : p.cu_seqlens_k) r.add_cu_seqlens_k(x);
    *r.mutable_q() = RegionTensor(p.dtype, q_shape, region, 0, qb);
    *r.mutable_k() = RegionTensor(p.dtype, kv_shape, region, qb, kb);
    *r.mutable_v() = RegionTensor(p.dtype, kv_shape, region, qb + kb, kb);
    *r.mutable_output() = RegionTensor(p.dtype, q_shape, region, qb + 2 * kb, qb);
    r.set_return_stats(true);
    return r;
  }

  // The output slice of the region written by ShmRequest.
  std::vector<float> ShmOutput(HostProblem& hp) {
    const size_t elements = hp.problem().total_q() * size_t{kHeads} * kDim;
    std::vector<float> out(elements);
    ToFloat(shm_->data() + hp.q_bytes().size() + 2 * hp.k_bytes().size(), hp.problem().dtype,
            static_cast<int64_t>(elements), out.data());
    return out;
  }

  std::string data_dir_;
  int index_port_ = 0;
  std::unique_ptr<IndexServer> index_;
  std::unique_ptr<v1::IndexService::Stub> index_stub_;
  std::unique_ptr<WorkerServer> worker_;
  std::unique_ptr<AttentionClient> client_;
  std::unique_ptr<SharedMemoryRegion> shm_;
};

ProblemShape Shape() {
  ProblemShape s;
  s.q_lens = {300, 131};  // two sequences, neither a multiple of the block size
  s.num_q_heads = kHeads;
  s.num_kv_heads = kKvHeads;
  s.head_dim = kDim;
  s.dtype = DType::kBF16;
  return s;
}

TEST_F(EndToEndTest, PublishedConfigsDriveEachHeadAndOutputsAreExact) {
  PublishConfigs();
  HostProblem hp(Shape());
  hp.FillRandom(5);
  auto resp = client_->ComputeAttention(ShmRequest(hp, "tensors"));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->config_version_used(), 1u);
  EXPECT_EQ(resp->device(), "cpu");
  ASSERT_EQ(resp->heads_size(), kHeads);
  EXPECT_EQ(resp->heads(0).method_name(), "dense");
  EXPECT_EQ(resp->heads(1).method_name(), "a_shape");
  EXPECT_EQ(resp->heads(2).method_name(), "vertical_slash");  // the model's default
  EXPECT_EQ(resp->heads(3).method_name(), "vertical_slash");
  EXPECT_DOUBLE_EQ(resp->heads(0).density(), 1.0);
  EXPECT_LT(resp->heads(1).density(), 1.0);
  const std::vector<float> got = ShmOutput(hp);

  // Head 0 (dense) equals plain attention.
  std::vector<float> dense;
  ASSERT_TRUE(ReferenceAttention(hp.problem(), {0}, {}, &dense, nullptr).ok());
  ExpectClose(got, dense, kHeads, kDim, 0, 1.0 / 256, "dense head");

  // Head 1 (A-shape) equals attention under exactly the A-shape mask.
  SparseIndex ashape;
  AShapeParams params;
  params.sink_tokens = 4;
  params.local_tokens = 40;
  ASSERT_TRUE(BuildAShapeIndex(hp.problem(), params, {1}, 64, &ashape).ok());
  ReferenceMasks masks(kHeads * hp.problem().batch());
  for (int b = 0; b < hp.problem().batch(); ++b) {
    masks[1 * hp.problem().batch() + b] = DensifyMask(hp.problem(), ashape, 0, b);
    masks[0 * hp.problem().batch() + b].assign(masks[1 * hp.problem().batch() + b].size(), 1);
    masks[2 * hp.problem().batch() + b] = masks[0 * hp.problem().batch() + b];
    masks[3 * hp.problem().batch() + b] = masks[0 * hp.problem().batch() + b];
  }
  std::vector<float> masked;
  ASSERT_TRUE(ReferenceAttention(hp.problem(), {1}, masks, &masked, nullptr).ok());
  ExpectClose(got, masked, kHeads, kDim, 1, 1.0 / 256, "a_shape head");
  EXPECT_DOUBLE_EQ(
      resp->heads(1).density(),
      static_cast<double>(ComputedPairs(hp.problem(), ashape, 0)) / AllowedPairs(hp.problem()));
}

TEST_F(EndToEndTest, ConfigsRoundTripAndSurviveAnIndexRestart) {
  PublishConfigs();
  auto read = [&](v1::GetHeadConfigsResponse* out) {
    grpc::ClientContext ctx;
    v1::GetHeadConfigsRequest req;
    req.set_model_id(kModel);
    return index_stub_->GetHeadConfigs(&ctx, req, out);
  };
  v1::GetHeadConfigsResponse before;
  ASSERT_TRUE(read(&before).ok());
  EXPECT_EQ(before.version(), 1u);
  ASSERT_EQ(before.configs_size(), 2);
  EXPECT_EQ(before.configs(1).method().a_shape().local_tokens(), 40);

  HostProblem hp(Shape());
  hp.FillRandom(6);
  v1::AttentionRequest req = ShmRequest(hp, "tensors");
  ASSERT_TRUE(client_->ComputeAttention(req).ok());

  // Index service down: the worker keeps serving from its cached configs.
  index_->Shutdown();
  index_.reset();
  auto cached = client_->ComputeAttention(req);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->config_version_used(), 1u);
  EXPECT_EQ(cached->heads(1).method_name(), "a_shape");

  // Back on the same port and data: everything published is still there.
  StartIndex();
  v1::GetHeadConfigsResponse after;
  ASSERT_TRUE(read(&after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  auto again = client_->ComputeAttention(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config_version_used(), 1u);
}

TEST_F(EndToEndTest, MetricsOfBothServersHaveTheirFamilies) {
  PublishConfigs();
  HostProblem hp(Shape());
  hp.FillRandom(7);
  ASSERT_TRUE(client_->ComputeAttention(ShmRequest(hp, "tensors")).ok());
  auto worker_metrics = HttpGet(worker_->metrics_port(), "/metrics");
  ASSERT_TRUE(worker_metrics.ok()) << worker_metrics.status();
  for (const char* family :
       {"spattn_requests_total", "spattn_request_duration_seconds", "spattn_stage_duration_seconds",
        "spattn_requests_in_flight", "spattn_prefill_tokens_total",
        "spattn_attention_density_ratio", "spattn_method_selected_total",
        "spattn_transfer_bytes_total", "spattn_errors_total", "spattn_build_info",
        "spattn_index_service_up"}) {
    EXPECT_NE(worker_metrics->find(absl::StrCat("# TYPE ", family, " ")), std::string::npos)
        << family;
  }
  EXPECT_NE(worker_metrics->find("spattn_method_selected_total{method=\"a_shape\"} 1"),
            std::string::npos);
  auto index_metrics = HttpGet(index_->metrics_port(), "/metrics");
  ASSERT_TRUE(index_metrics.ok()) << index_metrics.status();
  for (const char* family : {"spattn_index_rpc_requests_total", "spattn_index_rpc_duration_seconds",
                             "spattn_index_rocksdb_ops_total", "spattn_index_published_version",
                             "spattn_index_watchers"}) {
    EXPECT_NE(index_metrics->find(absl::StrCat("# TYPE ", family, " ")), std::string::npos)
        << family;
  }
  EXPECT_NE(index_metrics->find("spattn_index_published_version{model=\"e2e-model\"} 1"),
            std::string::npos);
}

TEST_F(EndToEndTest, BadRequestsGetPreciseCodesAndBothServersKeepServing) {
  PublishConfigs();
  HostProblem hp(Shape());
  hp.FillRandom(8);
  const v1::AttentionRequest good = ShmRequest(hp, "tensors");
  struct Case {
    const char* what;
    std::function<void(v1::AttentionRequest*)> mutate;
    absl::StatusCode code;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"wrong shape",
       [](v1::AttentionRequest* r) { r->mutable_q()->mutable_desc()->set_shape(1, 3); },
       absl::StatusCode::kInvalidArgument, "q.desc.shape"},
      {"byte size not shape x dtype",
       [](v1::AttentionRequest* r) {
         r->mutable_k()->mutable_region()->set_byte_size(r->k().region().byte_size() - 2);
       },
       absl::StatusCode::kInvalidArgument, "k."},
      {"region slice out of bounds",
       [](v1::AttentionRequest* r) {
         r->mutable_v()->mutable_region()->set_offset(r->v().region().offset() + (1u << 30));
       },
       absl::StatusCode::kInvalidArgument, "v.region"},
      {"unknown region",
       [](v1::AttentionRequest* r) { r->mutable_q()->mutable_region()->set_region_name("nope"); },
       absl::StatusCode::kNotFound, "q.region"},
      {"unknown model", [](v1::AttentionRequest* r) { r->set_model_id("no-such-model"); },
       absl::StatusCode::kNotFound, "model_id"},
      {"unknown method",
       [](v1::AttentionRequest* r) {
         r->mutable_method_override()->set_method(static_cast<v1::Method>(42));
       },
       absl::StatusCode::kInvalidArgument, "method_override.method"},
      {"unknown config version", [](v1::AttentionRequest* r) { r->set_config_version(9); },
       absl::StatusCode::kNotFound, "config_version"},
  };
  for (const Case& c : cases) {
    v1::AttentionRequest bad = good;
    c.mutate(&bad);
    auto resp = client_->ComputeAttention(bad);
    EXPECT_EQ(resp.status().code(), c.code) << c.what << ": " << resp.status();
    EXPECT_NE(resp.status().message().find(c.field), std::string::npos)
        << c.what << ": " << resp.status();
  }
  // Bad input on the index service side too.
  grpc::ClientContext ctx;
  v1::GetHeadConfigsRequest unknown;
  unknown.set_model_id("no-such-model");
  v1::GetHeadConfigsResponse ignored;
  EXPECT_EQ(index_stub_->GetHeadConfigs(&ctx, unknown, &ignored).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Both still serve.
  auto ok = client_->ComputeAttention(good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->config_version_used(), 1u);
  EXPECT_EQ(client_->Health().value_or(""), "SERVING");
}

}  // namespace
}  // namespace spattn
