// IndexService through the real gRPC server on loopback (port 0): round trips of every kind,
// publish races, watch ordering/resume, bad input, metrics, health, backup/restore, retention.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "index/crc32c.h"
#include "index/index_server.h"
#include "index/tensor_client.h"
#include "index/test_util.h"
#include "proto/grpc_status.h"

namespace spattn {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing_util::MakeCentroids;
using testing_util::MakeClassifier;
using testing_util::MakeHeadConfigs;
using testing_util::MakeModel;

std::string TmpDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// A client for one server, with one helper per RPC (each with a 60 s deadline).
class Client {
 public:
  explicit Client(const std::string& address, int max_message_bytes = 4 << 20) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(max_message_bytes);
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = v1::IndexService::NewStub(channel_);
  }

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::IndexService::Stub::*method)(grpc::ClientContext*,
                                                                           const Req&, Resp*),
                            const Req& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Resp response;
    grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  absl::StatusOr<v1::PutModelResponse> PutModel(const v1::Model& m) {
    v1::PutModelRequest r;
    *r.mutable_model() = m;
    return Call(&v1::IndexService::Stub::PutModel, r);
  }
  absl::StatusOr<v1::Model> GetModel(const std::string& id) {
    v1::GetModelRequest r;
    r.set_model_id(id);
    return Call(&v1::IndexService::Stub::GetModel, r);
  }
  absl::StatusOr<v1::VersionInfo> CreateVersion(const std::string& id, uint64_t base = 0) {
    v1::CreateVersionRequest r;
    r.set_model_id(id);
    r.set_base_version(base);
    r.set_description("test version");
    return Call(&v1::IndexService::Stub::CreateVersion, r);
  }
  absl::StatusOr<v1::PutHeadConfigsResponse> PutConfigs(const std::string& id, uint64_t version,
                                                        const std::vector<v1::HeadConfig>& cs) {
    v1::PutHeadConfigsRequest r;
    r.set_model_id(id);
    r.set_version(version);
    for (const auto& c : cs) *r.add_configs() = c;
    return Call(&v1::IndexService::Stub::PutHeadConfigs, r);
  }
  absl::StatusOr<v1::GetHeadConfigsResponse> GetConfigs(const std::string& id, uint64_t version,
                                                        std::optional<uint32_t> layer = {}) {
    v1::GetHeadConfigsRequest r;
    r.set_model_id(id);
    r.set_version(version);
    if (layer.has_value()) r.set_layer(*layer);
    return Call(&v1::IndexService::Stub::GetHeadConfigs, r);
  }
  absl::StatusOr<v1::VersionInfo> Seal(const std::string& id, uint64_t version) {
    v1::SealVersionRequest r;
    r.set_model_id(id);
    r.set_version(version);
    return Call(&v1::IndexService::Stub::SealVersion, r);
  }
  absl::StatusOr<v1::PublishVersionResponse> Publish(const std::string& id, uint64_t version,
                                                     uint64_t expected) {
    v1::PublishVersionRequest r;
    r.set_model_id(id);
    r.set_version(version);
    r.set_expected_current_version(expected);
    return Call(&v1::IndexService::Stub::PublishVersion, r);
  }
  absl::StatusOr<v1::ListVersionsResponse> ListVersions(const std::string& id) {
    v1::ListVersionsRequest r;
    r.set_model_id(id);
    return Call(&v1::IndexService::Stub::ListVersions, r);
  }
  absl::StatusOr<v1::PutTensorsResponse> Upload(const std::string& id, uint64_t version,
                                                const std::vector<TensorUpload>& ts,
                                                int chunk = 1 << 20) {
    return UploadTensors(*stub_, id, version, ts, chunk);
  }
  absl::StatusOr<std::vector<DownloadedTensor>> Download(const std::string& id, uint64_t version,
                                                         v1::TensorKind kind,
                                                         std::optional<uint32_t> layer = {}) {
    v1::GetTensorsRequest r;
    r.set_model_id(id);
    r.set_version(version);
    r.set_kind(kind);
    if (layer.has_value()) r.set_layer(*layer);
    return DownloadTensors(*stub_, r);
  }
  // Sends raw chunks (for malformed streams).
  absl::Status PutRaw(const std::vector<v1::TensorChunk>& chunks) {
    grpc::ClientContext ctx;
    v1::PutTensorsResponse response;
    auto writer = stub_->PutTensors(&ctx, &response);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  // Model + version with configs, centroids (C=16) and one classifier, sealed; returns version.
  absl::StatusOr<uint64_t> Stage(const v1::Model& model, uint64_t seed) {
    absl::StatusOr<v1::VersionInfo> v = CreateVersion(model.model_id());
    if (!v.ok()) return v.status();
    absl::StatusOr<v1::PutHeadConfigsResponse> c =
        PutConfigs(model.model_id(), v->version(), MakeHeadConfigs(model, seed));
    if (!c.ok()) return c.status();
    absl::StatusOr<v1::PutTensorsResponse> t =
        Upload(model.model_id(), v->version(), MakeCentroids(model, 16, seed));
    if (!t.ok()) return t.status();
    absl::StatusOr<v1::VersionInfo> s = Seal(model.model_id(), v->version());
    if (!s.ok()) return s.status();
    return v->version();
  }

  v1::IndexService::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::IndexService::Stub> stub_;
};

// One server (with a metrics exposer) shared by the suite: the exposer takes ~2 s to stop.
class IndexServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    IndexServerOptions options;
    options.data_dir = TmpDir("suite_db");
    options.metrics_address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<IndexServer>> server = IndexServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    client_ = new Client(server_->address());
  }
  static void TearDownTestSuite() {
    delete client_;
    delete server_;
  }

  static IndexServer* server_;
  static Client* client_;
};

IndexServer* IndexServiceTest::server_ = nullptr;
Client* IndexServiceTest::client_ = nullptr;

absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

#define ASSERT_OK(expr)                                          \
  do {                                                           \
    const absl::Status spattn_s_ = StatusOf(expr);               \
    ASSERT_TRUE(spattn_s_.ok()) << #expr << " -> " << spattn_s_; \
  } while (0)

#define EXPECT_CODE(expr, code_value)                                                          \
  do {                                                                                         \
    absl::Status spattn_s_ = StatusOf(expr);                                                   \
    EXPECT_EQ(spattn_s_.code(), absl::StatusCode::code_value) << #expr << " -> " << spattn_s_; \
  } while (0)

TEST_F(IndexServiceTest, ModelRoundTrip) {
  v1::Model m = MakeModel("llama-3.1-8b_instruct", 32, 32, 8, 128);
  m.mutable_default_method()->set_method(v1::METHOD_VERTICAL_SLASH);
  m.mutable_default_method()->mutable_vertical_slash()->set_vertical_size(1000);
  absl::StatusOr<v1::PutModelResponse> put = client_->PutModel(m);
  ASSERT_OK(put);
  EXPECT_TRUE(put->created());
  EXPECT_GT(put->model().created_unix_ms(), 0);

  absl::StatusOr<v1::Model> got = client_->GetModel(m.model_id());
  ASSERT_OK(got);
  v1::Model expected = m;
  expected.set_created_unix_ms(got->created_unix_ms());
  EXPECT_TRUE(MessageDifferencer::Equals(*got, expected)) << got->DebugString();

  // Update keeps the creation time.
  m.set_description("updated");
  absl::StatusOr<v1::PutModelResponse> again = client_->PutModel(m);
  ASSERT_OK(again);
  EXPECT_FALSE(again->created());
  EXPECT_EQ(again->model().created_unix_ms(), got->created_unix_ms());
  EXPECT_EQ(client_->GetModel(m.model_id())->description(), "updated");

  absl::StatusOr<v1::ListModelsResponse> list =
      client_->Call(&v1::IndexService::Stub::ListModels, v1::ListModelsRequest());
  ASSERT_OK(list);
  bool found = false;
  for (const auto& x : list->models()) found = found || x.model_id() == m.model_id();
  EXPECT_TRUE(found);

  v1::DeleteModelRequest del;
  del.set_model_id(m.model_id());
  ASSERT_OK(client_->Call(&v1::IndexService::Stub::DeleteModel, del));
  EXPECT_CODE(client_->GetModel(m.model_id()), kNotFound);
}

TEST_F(IndexServiceTest, HeadConfigRoundTripAndPublishedResolution) {
  const v1::Model m = MakeModel("configs-model", 4, 8, 2, 64);
  ASSERT_OK(client_->PutModel(m));
  absl::StatusOr<v1::VersionInfo> v = client_->CreateVersion(m.model_id());
  ASSERT_OK(v);
  EXPECT_EQ(v->version(), 1u);
  EXPECT_EQ(v->state(), v1::VERSION_STATE_OPEN);
  const std::vector<v1::HeadConfig> configs = MakeHeadConfigs(m, 3);
  absl::StatusOr<v1::PutHeadConfigsResponse> put = client_->PutConfigs(m.model_id(), 1, configs);
  ASSERT_OK(put);
  EXPECT_EQ(put->written(), configs.size());

  absl::StatusOr<v1::GetHeadConfigsResponse> got = client_->GetConfigs(m.model_id(), 1);
  ASSERT_OK(got);
  EXPECT_EQ(got->version(), 1u);
  EXPECT_EQ(got->model().num_layers(), 4u);
  ASSERT_EQ(got->configs_size(), static_cast<int>(configs.size()));
  for (size_t i = 0; i < configs.size(); ++i) {  // Key order = (layer, head) order.
    EXPECT_TRUE(MessageDifferencer::Equals(got->configs(i), configs[i]))
        << "i=" << i << " got " << got->configs(i).DebugString();
  }
  absl::StatusOr<v1::GetHeadConfigsResponse> layer2 = client_->GetConfigs(m.model_id(), 1, 2);
  ASSERT_OK(layer2);
  ASSERT_EQ(layer2->configs_size(), 8);
  for (const auto& c : layer2->configs()) EXPECT_EQ(c.layer(), 2u);

  // Nothing published yet: version 0 is NOT_FOUND; after publishing it resolves.
  EXPECT_CODE(client_->GetConfigs(m.model_id(), 0), kNotFound);
  ASSERT_OK(client_->Seal(m.model_id(), 1));
  absl::StatusOr<v1::PublishVersionResponse> pub = client_->Publish(m.model_id(), 1, 0);
  ASSERT_OK(pub);
  EXPECT_EQ(pub->previous_version(), 0u);
  EXPECT_EQ(pub->published().state(), v1::VERSION_STATE_PUBLISHED);
  absl::StatusOr<v1::GetHeadConfigsResponse> published = client_->GetConfigs(m.model_id(), 0);
  ASSERT_OK(published);
  EXPECT_EQ(published->version(), 1u);
  EXPECT_EQ(published->configs_size(), static_cast<int>(configs.size()));

  // Overwriting one head in a new version based on v1 leaves the others.
  absl::StatusOr<v1::VersionInfo> v2 = client_->CreateVersion(m.model_id(), 1);
  ASSERT_OK(v2);
  EXPECT_EQ(v2->num_head_configs(), configs.size());
  v1::HeadConfig changed = configs[5];
  changed.mutable_method()->Clear();
  changed.mutable_method()->set_method(v1::METHOD_DENSE);
  ASSERT_OK(client_->PutConfigs(m.model_id(), v2->version(), {changed}));
  absl::StatusOr<v1::GetHeadConfigsResponse> got2 =
      client_->GetConfigs(m.model_id(), v2->version());
  ASSERT_OK(got2);
  ASSERT_EQ(got2->configs_size(), static_cast<int>(configs.size()));
  EXPECT_TRUE(MessageDifferencer::Equals(got2->configs(5), changed));
  EXPECT_TRUE(MessageDifferencer::Equals(got2->configs(4), configs[4]));
}

TEST_F(IndexServiceTest, TensorRoundTripWithOddChunks) {
  const v1::Model m = MakeModel("tensor-model", 3, 8, 2, 64);
  ASSERT_OK(client_->PutModel(m));
  ASSERT_OK(client_->CreateVersion(m.model_id()));
  std::vector<TensorUpload> centroids = MakeCentroids(m, 32, 11);
  std::vector<TensorUpload> classifier = MakeClassifier(m, 1, 5, 48, 32, 12);
  std::vector<TensorUpload> all = centroids;
  all.insert(all.end(), classifier.begin(), classifier.end());
  // 10001-byte chunks: never aligned to floats or tensors.
  absl::StatusOr<v1::PutTensorsResponse> put = client_->Upload(m.model_id(), 1, all, 10001);
  ASSERT_OK(put);
  EXPECT_EQ(put->tensors_written(), all.size());
  uint64_t bytes = 0;
  for (const auto& t : all) bytes += t.bytes.size();
  EXPECT_EQ(put->bytes_written(), bytes);

  absl::StatusOr<std::vector<DownloadedTensor>> c =
      client_->Download(m.model_id(), 1, v1::TENSOR_KIND_CENTROIDS);
  ASSERT_OK(c);
  ASSERT_EQ(c->size(), centroids.size());
  for (size_t i = 0; i < centroids.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals((*c)[i].header.key(), centroids[i].key));
    EXPECT_EQ((*c)[i].header.desc().dtype(), v1::DATA_TYPE_FP32);
    EXPECT_EQ((*c)[i].header.desc().shape(0), 32);
    EXPECT_EQ((*c)[i].header.desc().shape(1), 64);
    EXPECT_EQ((*c)[i].header.version(), 1u);
    EXPECT_EQ((*c)[i].bytes, centroids[i].bytes) << "centroid tensor " << i;
  }
  absl::StatusOr<std::vector<DownloadedTensor>> k =
      client_->Download(m.model_id(), 1, v1::TENSOR_KIND_CLASSIFIER);
  ASSERT_OK(k);
  ASSERT_EQ(k->size(), 4u);
  // Key order sorts parameter names: b0, b1, w0, w1.
  std::map<std::string, std::string> by_name;
  for (const auto& t : *k) by_name[t.header.key().name()] = t.bytes;
  for (const auto& t : classifier) EXPECT_EQ(by_name[t.key.name()], t.bytes) << t.key.name();

  absl::StatusOr<std::vector<DownloadedTensor>> layer1 =
      client_->Download(m.model_id(), 1, v1::TENSOR_KIND_UNSPECIFIED, 1);
  ASSERT_OK(layer1);
  EXPECT_EQ(layer1->size(), 2u + 4u);  // Two kv heads' centroids + the classifier of layer 1.

  absl::StatusOr<v1::VersionInfo> sealed = client_->Seal(m.model_id(), 1);
  ASSERT_OK(sealed);
  EXPECT_EQ(sealed->num_tensors(), all.size());
  EXPECT_EQ(sealed->tensor_bytes(), bytes);
  absl::StatusOr<v1::ListVersionsResponse> list = client_->ListVersions(m.model_id());
  ASSERT_OK(list);
  ASSERT_EQ(list->versions_size(), 1);
  EXPECT_EQ(list->versions(0).state(), v1::VERSION_STATE_STAGED);
  EXPECT_EQ(list->versions(0).tensor_bytes(), bytes);
}

// 32 layers x 8 kv heads x [1024, 128] fp32 = 128 MiB through a server with gRPC's default 4 MiB
// message limit: chunking carries it.
TEST(IndexServiceLargeTest, FullCentroidSetWithDefaultMessageLimit) {
  IndexServerOptions options;
  options.data_dir = TmpDir("large_db");
  options.max_message_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<IndexServer>> server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  const v1::Model m = MakeModel("large", 32, 32, 8, 128);
  ASSERT_OK(client.PutModel(m));
  ASSERT_OK(client.CreateVersion(m.model_id()));
  std::vector<uint32_t> crcs;
  {
    std::vector<TensorUpload> centroids = MakeCentroids(m, 1024, 5);
    for (const auto& t : centroids) crcs.push_back(Crc32c(t.bytes));
    absl::StatusOr<v1::PutTensorsResponse> put = client.Upload(m.model_id(), 1, centroids);
    ASSERT_OK(put);
    EXPECT_EQ(put->bytes_written(), uint64_t{128} << 20);
  }
  absl::StatusOr<std::vector<DownloadedTensor>> got =
      client.Download(m.model_id(), 1, v1::TENSOR_KIND_CENTROIDS);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), crcs.size());
  for (size_t i = 0; i < crcs.size(); ++i) {
    EXPECT_EQ(Crc32c((*got)[i].bytes), crcs[i]) << "tensor " << i;
    EXPECT_EQ((*got)[i].bytes.size(), 1024u * 128 * 4);
  }
}

TEST_F(IndexServiceTest, PublishRaceHasExactlyOneWinnerPerExpectedVersion) {
  const v1::Model m = MakeModel("race-model", 2, 4, 2, 32);
  ASSERT_OK(client_->PutModel(m));
  constexpr int kThreads = 8;
  constexpr int kRounds = 4;
  uint64_t current = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<uint64_t> versions;
    for (int t = 0; t < kThreads; ++t) {
      absl::StatusOr<uint64_t> v = client_->Stage(m, round * kThreads + t);
      ASSERT_OK(v);
      versions.push_back(*v);
    }
    absl::Barrier* barrier = new absl::Barrier(kThreads);
    std::vector<absl::Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        Client own(server_->address());  // One channel per thread: real concurrency.
        if (barrier->Block()) delete barrier;
        results[t] = own.Publish(m.model_id(), versions[t], current).status();
      });
    }
    for (auto& th : threads) th.join();
    int winners = 0;
    uint64_t winner = 0;
    for (int t = 0; t < kThreads; ++t) {
      if (results[t].ok()) {
        ++winners;
        winner = versions[t];
      } else {
        EXPECT_EQ(results[t].code(), absl::StatusCode::kAborted)
            << "round " << round << " thread " << t << ": " << results[t];
      }
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    absl::StatusOr<v1::ListVersionsResponse> list = client_->ListVersions(m.model_id());
    ASSERT_OK(list);
    EXPECT_EQ(list->published_version(), winner);
    int published = 0;
    for (const auto& v : list->versions()) published += v.state() == v1::VERSION_STATE_PUBLISHED;
    EXPECT_EQ(published, 1);
    current = winner;
  }
}

// Reads events from a watch stream (with a deadline) on its own thread.
class WatchReader {
 public:
  WatchReader(v1::IndexService::Stub& stub, const std::string& model, uint64_t after) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WatchPublishedRequest r;
    r.set_model_id(model);
    r.set_after_version(after);
    reader_ = stub.WatchPublished(&ctx_, r);
  }
  ~WatchReader() {
    ctx_.TryCancel();
    Finish();
  }
  // Next event's version, or 0 when the stream ended.
  uint64_t Next() {
    v1::PublishedEvent e;
    if (!reader_->Read(&e)) return 0;
    EXPECT_GT(e.published_unix_ms(), 0);
    return e.version();
  }
  // Drains and finishes the stream (once).
  grpc::Status Finish() {
    if (!finished_) {
      v1::PublishedEvent e;
      while (reader_->Read(&e)) {
      }
      status_ = reader_->Finish();
      finished_ = true;
    }
    return status_;
  }

 private:
  bool finished_ = false;
  grpc::Status status_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::PublishedEvent>> reader_;
};

TEST_F(IndexServiceTest, WatchDeliversEveryPublishInOrderAndResumes) {
  const v1::Model m = MakeModel("watch-model", 2, 4, 2, 32);
  ASSERT_OK(client_->PutModel(m));
  std::vector<uint64_t> staged;
  for (int i = 0; i < 12; ++i) {
    absl::StatusOr<uint64_t> v = client_->Stage(m, 100 + i);
    ASSERT_OK(v);
    staged.push_back(*v);
  }
  ASSERT_OK(client_->Publish(m.model_id(), staged[0], 0));

  // Four watchers see the current version first (that proves they are registered), then every
  // publish in order while a publisher runs.
  constexpr int kWatchers = 4;
  std::vector<std::unique_ptr<WatchReader>> watchers;
  for (int w = 0; w < kWatchers; ++w) {
    watchers.push_back(std::make_unique<WatchReader>(client_->stub(), m.model_id(), 0));
    ASSERT_EQ(watchers.back()->Next(), staged[0]) << "watcher " << w;
  }
  std::thread publisher([&] {
    for (size_t i = 1; i < 10; ++i) {
      ASSERT_OK(client_->Publish(m.model_id(), staged[i], staged[i - 1]));
    }
  });
  for (int w = 0; w < kWatchers; ++w) {
    for (size_t i = 1; i < 10; ++i) {
      EXPECT_EQ(watchers[w]->Next(), staged[i]) << "watcher " << w << " event " << i;
    }
  }
  publisher.join();

  // Resume: a watcher that saw staged[5] gets every version it missed, in order, ending with
  // the current one.
  WatchReader resumed(client_->stub(), m.model_id(), staged[5]);
  for (size_t i = 6; i < 10; ++i) EXPECT_EQ(resumed.Next(), staged[i]) << "missed event " << i;
  // A watcher that is up to date gets nothing until the next publish.
  WatchReader up_to_date(client_->stub(), m.model_id(), staged[9]);
  ASSERT_OK(client_->Publish(m.model_id(), staged[10], staged[9]));
  EXPECT_EQ(up_to_date.Next(), staged[10]);
  EXPECT_EQ(resumed.Next(), staged[10]);
  // Rolling back to a retired version is an event too.
  ASSERT_OK(client_->Publish(m.model_id(), staged[3], staged[10]));
  EXPECT_EQ(up_to_date.Next(), staged[3]);
  for (auto& w : watchers) {
    EXPECT_EQ(w->Next(), staged[10]);
    EXPECT_EQ(w->Next(), staged[3]);
  }

  // Unknown model: NOT_FOUND.
  WatchReader unknown(client_->stub(), "no-such-model", 0);
  EXPECT_EQ(unknown.Next(), 0u);
  EXPECT_EQ(unknown.Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

v1::TensorChunk HeaderChunk(const std::string& model, uint64_t version, v1::TensorKind kind,
                            uint32_t layer, uint32_t head, std::vector<int64_t> shape,
                            uint64_t total_bytes, uint32_t crc,
                            v1::DataType dtype = v1::DATA_TYPE_FP32) {
  v1::TensorChunk c;
  v1::TensorHeader* h = c.mutable_header();
  h->set_model_id(model);
  h->set_version(version);
  h->mutable_key()->set_kind(kind);
  h->mutable_key()->set_layer(layer);
  h->mutable_key()->set_head(head);
  if (kind == v1::TENSOR_KIND_CLASSIFIER) h->mutable_key()->set_name("w0");
  h->mutable_desc()->set_dtype(dtype);
  for (int64_t d : shape) h->mutable_desc()->add_shape(d);
  h->set_total_bytes(total_bytes);
  h->set_crc32c(crc);
  return c;
}

v1::TensorChunk DataChunk(const std::string& bytes) {
  v1::TensorChunk c;
  c.set_data(bytes);
  return c;
}

TEST_F(IndexServiceTest, BadInputGetsSpecificCodesAndTheServerKeepsServing) {
  const std::string id = "bad-input";
  const v1::Model m = MakeModel(id, 4, 8, 2, 16);
  ASSERT_OK(client_->PutModel(m));
  ASSERT_OK(client_->CreateVersion(id));  // v1, OPEN.

  // Models.
  EXPECT_CODE(client_->GetModel("unknown-model"), kNotFound);
  EXPECT_CODE(client_->GetModel("bad/id"), kInvalidArgument);
  EXPECT_CODE(client_->GetModel(std::string(200, 'a')), kInvalidArgument);
  {
    absl::Status s = client_->GetModel(std::string("x\x01y", 3)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(absl::StrContains(s.message(), "\x01")) << "raw bytes echoed: " << s;
  }
  v1::Model bad = m;
  bad.set_num_layers(0);
  EXPECT_CODE(client_->PutModel(bad), kInvalidArgument);
  bad = m;
  bad.set_num_layers(5000);
  EXPECT_CODE(client_->PutModel(bad), kInvalidArgument);
  bad = m;
  bad.set_num_kv_heads(3);
  EXPECT_CODE(client_->PutModel(bad), kInvalidArgument);
  bad = m;
  bad.set_head_dim(4096);
  EXPECT_CODE(client_->PutModel(bad), kInvalidArgument);
  bad = m;
  bad.set_rope_theta(std::nan(""));
  EXPECT_CODE(client_->PutModel(bad), kInvalidArgument);
  bad = m;
  bad.set_num_layers(8);  // Shape change while versions exist.
  EXPECT_CODE(client_->PutModel(bad), kFailedPrecondition);

  // Head configs.
  v1::HeadConfig c;
  c.set_layer(4);
  c.set_head(0);
  c.mutable_method()->set_method(v1::METHOD_DENSE);
  {
    absl::Status s = client_->PutConfigs(id, 1, {c}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), "configs[0].layer")) << s;
  }
  c.set_layer(0);
  c.set_head(8);
  EXPECT_CODE(client_->PutConfigs(id, 1, {c}), kInvalidArgument);
  c.set_head(0);
  c.mutable_method()->set_method(v1::METHOD_UNSPECIFIED);
  EXPECT_CODE(client_->PutConfigs(id, 1, {c}), kInvalidArgument);
  c.mutable_method()->set_method(v1::METHOD_DENSE);
  c.mutable_method()->mutable_vertical_slash()->set_last_q(8);  // Params of another method.
  EXPECT_CODE(client_->PutConfigs(id, 1, {c}), kInvalidArgument);
  c.mutable_method()->set_method(v1::METHOD_VERTICAL_SLASH);
  c.mutable_method()->mutable_vertical_slash()->set_last_q(-1);
  {
    absl::Status s = client_->PutConfigs(id, 1, {c}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), "last_q")) << s;
  }
  c.mutable_method()->Clear();
  c.mutable_method()->set_method(static_cast<v1::Method>(77));
  EXPECT_CODE(client_->PutConfigs(id, 1, {c}), kInvalidArgument);
  c.mutable_method()->set_method(v1::METHOD_DENSE);
  EXPECT_CODE(client_->PutConfigs(id, 99, {c}), kNotFound);
  EXPECT_CODE(client_->PutConfigs(id, 0, {c}), kInvalidArgument);
  EXPECT_CODE(client_->PutConfigs("unknown-model", 1, {c}), kNotFound);
  EXPECT_CODE(client_->GetConfigs(id, 1, 4), kInvalidArgument);
  EXPECT_CODE(client_->GetConfigs(id, 99), kNotFound);

  // Tensors.
  const std::string good = FloatsToBytes(std::vector<float>(4 * 16, 0.5f));
  const uint32_t good_crc = Crc32c(good);
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size(), good_crc, v1::DATA_TYPE_FP16),
                               DataChunk(good)}),
              kInvalidArgument);
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 17},
                                           4 * 17 * 4, good_crc)}),
              kInvalidArgument);  // Shape [C, head_dim + 1].
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size() + 4, good_crc)}),
              kInvalidArgument);  // Byte size != shape x 4.
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {1 << 20, 16},
                                           uint64_t{1} << 26, 0)}),
              kInvalidArgument);  // Oversized.
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 2, {4, 16},
                                           good.size(), good_crc)}),
              kInvalidArgument);  // kv head out of range.
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_UNSPECIFIED, 0, 0, {4, 16},
                                           good.size(), good_crc)}),
              kInvalidArgument);
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 99, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size(), good_crc)}),
              kNotFound);
  EXPECT_CODE(client_->PutRaw({HeaderChunk("unknown-model", 1, v1::TENSOR_KIND_CENTROIDS, 0, 0,
                                           {4, 16}, good.size(), good_crc)}),
              kNotFound);
  {
    std::vector<float> values(4 * 16, 0.25f);
    values[37] = std::numeric_limits<float>::quiet_NaN();
    const std::string nan = FloatsToBytes(values);
    absl::Status s = client_->PutRaw(
        {HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16}, nan.size(), Crc32c(nan)),
         DataChunk(nan)});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "element 37 is NaN")) << s;
    values[37] = std::numeric_limits<float>::infinity();
    const std::string inf = FloatsToBytes(values);
    EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                             inf.size(), Crc32c(inf)),
                                 DataChunk(inf)}),
                kInvalidArgument);
  }
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size(), good_crc ^ 1),
                               DataChunk(good)}),
              kDataLoss);                                             // Corrupted in transfer.
  EXPECT_CODE(client_->PutRaw({DataChunk(good)}), kInvalidArgument);  // Data before header.
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size(), good_crc),
                               DataChunk(good.substr(0, 100))}),
              kInvalidArgument);  // Stream ends inside the tensor.
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16},
                                           good.size(), good_crc),
                               DataChunk(good + "extra")}),
              kInvalidArgument);                                        // More bytes than declared.
  EXPECT_CODE(client_->PutRaw({v1::TensorChunk()}), kInvalidArgument);  // Empty chunk.
  // None of the refused tensors was stored.
  absl::StatusOr<std::vector<DownloadedTensor>> none =
      client_->Download(id, 1, v1::TENSOR_KIND_UNSPECIFIED);
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
  EXPECT_CODE(client_->Download(id, 1, v1::TENSOR_KIND_CENTROIDS, 9), kInvalidArgument);
  EXPECT_CODE(client_->Download(id, 0, v1::TENSOR_KIND_CENTROIDS), kNotFound);
  EXPECT_CODE(client_->Download("unknown-model", 1, v1::TENSOR_KIND_CENTROIDS), kNotFound);

  // Version life: publish OPEN, writes to sealed, wrong expected, delete published.
  EXPECT_CODE(client_->Publish(id, 1, 0), kFailedPrecondition);
  ASSERT_OK(client_->PutRaw(
      {HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 0, {4, 16}, good.size(), good_crc),
       DataChunk(good)}));
  ASSERT_OK(client_->Seal(id, 1));
  ASSERT_OK(client_->Seal(id, 1));  // Idempotent.
  c.mutable_method()->set_method(v1::METHOD_DENSE);
  EXPECT_CODE(client_->PutConfigs(id, 1, {c}), kFailedPrecondition);
  EXPECT_CODE(client_->PutRaw({HeaderChunk(id, 1, v1::TENSOR_KIND_CENTROIDS, 0, 1, {4, 16},
                                           good.size(), good_crc),
                               DataChunk(good)}),
              kFailedPrecondition);
  EXPECT_CODE(client_->Publish(id, 1, 5), kAborted);
  EXPECT_CODE(client_->Publish(id, 99, 0), kNotFound);
  EXPECT_CODE(client_->Publish(id, 0, 0), kInvalidArgument);
  ASSERT_OK(client_->Publish(id, 1, 0));
  ASSERT_OK(client_->Publish(id, 1, 1));  // Idempotent republish.
  v1::DeleteVersionRequest dv;
  dv.set_model_id(id);
  dv.set_version(1);
  EXPECT_CODE(client_->Call(&v1::IndexService::Stub::DeleteVersion, dv), kFailedPrecondition);
  v1::DeleteModelRequest dm;
  dm.set_model_id(id);
  EXPECT_CODE(client_->Call(&v1::IndexService::Stub::DeleteModel, dm), kFailedPrecondition);
  EXPECT_CODE(client_->CreateVersion(id, 42), kNotFound);  // Unknown base.

  // Saap heads cannot be sealed without their centroids and classifier.
  absl::StatusOr<v1::VersionInfo> v2 = client_->CreateVersion(id);
  ASSERT_OK(v2);
  v1::HeadConfig saap;
  saap.set_layer(1);
  saap.set_head(3);
  saap.mutable_method()->set_method(v1::METHOD_SAAP);
  saap.mutable_method()->mutable_saap()->set_num_centroids(4);
  ASSERT_OK(client_->PutConfigs(id, v2->version(), {saap}));
  EXPECT_CODE(client_->Seal(id, v2->version()), kFailedPrecondition);
  TensorUpload cent;
  cent.key.set_kind(v1::TENSOR_KIND_CENTROIDS);
  cent.key.set_layer(1);
  cent.key.set_head(3 / 4);
  cent.shape = {4, 16};
  cent.bytes = good;
  ASSERT_OK(client_->Upload(id, v2->version(), {cent}));
  EXPECT_CODE(client_->Seal(id, v2->version()), kFailedPrecondition);  // No classifier yet.
  ASSERT_OK(client_->Upload(id, v2->version(), MakeClassifier(m, 1, 3, 8, 4, 1)));
  ASSERT_OK(client_->Seal(id, v2->version()));

  // Still serving.
  ASSERT_OK(client_->Call(&v1::IndexService::Stub::ListModels, v1::ListModelsRequest()));
  ASSERT_OK(client_->GetConfigs(id, 0));
  dm.set_force(true);
  ASSERT_OK(client_->Call(&v1::IndexService::Stub::DeleteModel, dm));
}

TEST_F(IndexServiceTest, MetricsScrapeHasEveryFamily) {
  const v1::Model m = MakeModel("metrics-model", 1, 2, 1, 16);
  ASSERT_OK(client_->PutModel(m));
  absl::StatusOr<uint64_t> v = client_->Stage(m, 1);
  ASSERT_OK(v);
  ASSERT_OK(client_->Publish(m.model_id(), *v, 0));
  EXPECT_CODE(client_->GetModel("nope"), kNotFound);
  WatchReader watcher(client_->stub(), m.model_id(), 0);
  ASSERT_EQ(watcher.Next(), *v);

  ASSERT_GT(server_->metrics_port(), 0);
  absl::StatusOr<std::string> body = testing_util::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_OK(body);
  for (const char* expected : {
           "spattn_index_rpc_requests_total{code=\"OK\",rpc=\"PutModel\"}",
           "spattn_index_rpc_requests_total{code=\"NOT_FOUND\",rpc=\"GetModel\"}",
           "spattn_index_rpc_duration_seconds_bucket{rpc=\"PublishVersion\",le=",
           "spattn_index_rpc_duration_seconds_count{rpc=\"PutTensors\"}",
           "spattn_index_rocksdb_ops_total{cf=\"publish\",op=\"write\",result=\"ok\"}",
           "spattn_index_rocksdb_ops_total{cf=\"models\",op=\"get\",result=\"not_found\"}",
           "spattn_index_published_version{model=\"metrics-model\"} 1",
           "spattn_index_watchers 1",
           "spattn_build_info{component=\"index\"",
       }) {
    EXPECT_TRUE(absl::StrContains(*body, expected)) << "missing: " << expected << "\n" << *body;
  }
}

TEST_F(IndexServiceTest, HealthIsNotServingWhileTheDatabaseIsClosed) {
  const v1::Model m = MakeModel("health-model", 1, 2, 1, 16);
  ASSERT_OK(client_->PutModel(m));
  for (const char* service : {"spattn.v1.IndexService", ""}) {
    absl::StatusOr<int> h = CheckHealth(client_->channel(), service);
    ASSERT_OK(h);
    EXPECT_EQ(*h, 1) << "service '" << service << "'";
  }
  ASSERT_TRUE(server_->CloseStore().ok());
  for (const char* service : {"spattn.v1.IndexService", ""}) {
    absl::StatusOr<int> h = CheckHealth(client_->channel(), service);
    ASSERT_OK(h);
    EXPECT_EQ(*h, 2) << "service '" << service << "'";
  }
  EXPECT_CODE(client_->GetModel(m.model_id()), kUnavailable);
  EXPECT_CODE(client_->Download(m.model_id(), 0, v1::TENSOR_KIND_CENTROIDS), kUnavailable);
  ASSERT_TRUE(server_->OpenStore().ok());
  EXPECT_EQ(*CheckHealth(client_->channel(), "spattn.v1.IndexService"), 1);
  ASSERT_OK(client_->GetModel(m.model_id()));
}

TEST_F(IndexServiceTest, ReflectionIsOn) {
  // The reflection service answers (its method exists; an empty stream just ends).
  grpc::GenericStub stub(client_->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  call->WritesDone(reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// Everything of one model, for comparing databases.
struct Snapshot {
  v1::Model model;
  v1::ListVersionsResponse versions;
  std::vector<v1::GetHeadConfigsResponse> configs;
  std::vector<std::vector<DownloadedTensor>> tensors;
};

Snapshot Capture(Client& client, const std::string& id) {
  Snapshot s;
  s.model = client.GetModel(id).value();
  s.versions = client.ListVersions(id).value();
  for (const auto& v : s.versions.versions()) {
    s.configs.push_back(client.GetConfigs(id, v.version()).value());
    s.tensors.push_back(client.Download(id, v.version(), v1::TENSOR_KIND_UNSPECIFIED).value());
  }
  return s;
}

void ExpectSame(const Snapshot& a, const Snapshot& b) {
  EXPECT_TRUE(MessageDifferencer::Equals(a.model, b.model));
  EXPECT_TRUE(MessageDifferencer::Equals(a.versions, b.versions))
      << a.versions.DebugString() << " vs " << b.versions.DebugString();
  ASSERT_EQ(a.configs.size(), b.configs.size());
  for (size_t i = 0; i < a.configs.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(a.configs[i], b.configs[i])) << "version index " << i;
    ASSERT_EQ(a.tensors[i].size(), b.tensors[i].size());
    for (size_t j = 0; j < a.tensors[i].size(); ++j) {
      EXPECT_TRUE(MessageDifferencer::Equals(a.tensors[i][j].header, b.tensors[i][j].header));
      EXPECT_EQ(a.tensors[i][j].bytes, b.tensors[i][j].bytes);
    }
  }
}

// Publishes v1 and v2 (configs, centroids, a classifier), stages v3, leaves v4 OPEN.
void Populate(Client& client, const v1::Model& m) {
  ASSERT_OK(client.PutModel(m));
  absl::StatusOr<uint64_t> v1 = client.Stage(m, 1);
  ASSERT_OK(v1);
  ASSERT_OK(client.Publish(m.model_id(), *v1, 0));
  absl::StatusOr<uint64_t> v2 = client.Stage(m, 2);
  ASSERT_OK(v2);
  ASSERT_OK(client.Publish(m.model_id(), *v2, *v1));
  ASSERT_OK(client.Stage(m, 3));
  absl::StatusOr<v1::VersionInfo> v4 = client.CreateVersion(m.model_id(), *v2);
  ASSERT_OK(v4);
  ASSERT_OK(client.Upload(m.model_id(), v4->version(), MakeClassifier(m, 0, 1, 8, 16, 4)));
}

TEST(IndexServerRestartTest, DataSurvivesARestart) {
  const std::string dir = TmpDir("restart_db");
  const v1::Model m = MakeModel("durable", 3, 4, 2, 32);
  Snapshot before;
  {
    IndexServerOptions options;
    options.data_dir = dir;
    auto server = IndexServer::Start(options);
    ASSERT_OK(server);
    Client client((*server)->address());
    Populate(client, m);
    before = Capture(client, m.model_id());
    EXPECT_EQ(before.versions.published_version(), 2u);
    ASSERT_EQ(before.versions.versions_size(), 4);
  }
  IndexServerOptions options;
  options.data_dir = dir;
  auto server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  ExpectSame(before, Capture(client, m.model_id()));
  // Version numbers are not reused after a restart.
  absl::StatusOr<v1::VersionInfo> v5 = client.CreateVersion(m.model_id());
  ASSERT_OK(v5);
  EXPECT_EQ(v5->version(), 5u);
}

TEST(IndexServerBackupTest, BackupWipeRestoreGivesTheSameData) {
  const std::string dir = TmpDir("backup_db");
  const std::string root = TmpDir("backups");
  const std::string backups = root + "/b1";
  const v1::Model m = MakeModel("backed-up", 2, 4, 2, 32);
  Snapshot before;
  {
    IndexServerOptions options;
    options.data_dir = dir;
    options.backup_root = root;
    auto server = IndexServer::Start(options);
    ASSERT_OK(server);
    Client client((*server)->address());
    Populate(client, m);
    before = Capture(client, m.model_id());
    v1::BackupRequest b;
    b.set_backup_dir("b1");  // A name under --backup_root.
    absl::StatusOr<v1::BackupResponse> r = client.Call(&v1::IndexService::Stub::Backup, b);
    ASSERT_OK(r);
    EXPECT_EQ(r->backup_id(), 1u);
    EXPECT_GT(r->size_bytes(), 0u);
    v1::ListBackupsRequest l;
    l.set_backup_dir("b1");
    absl::StatusOr<v1::ListBackupsResponse> list =
        client.Call(&v1::IndexService::Stub::ListBackups, l);
    ASSERT_OK(list);
    ASSERT_EQ(list->backups_size(), 1);
    EXPECT_EQ(list->backups(0).backup_id(), 1u);
    l.set_backup_dir("missing");
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::ListBackups, l), kNotFound);
    b.set_backup_dir("");
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::Backup, b), kInvalidArgument);
    b.set_backup_dir("relative/dir");  // Names, not paths.
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::Backup, b), kInvalidArgument);
  }
  std::filesystem::remove_all(dir);
  IndexServerOptions options;
  options.data_dir = dir;
  options.restore_from = backups;
  {
    auto server = IndexServer::Start(options);
    ASSERT_OK(server);
    Client client((*server)->address());
    ExpectSame(before, Capture(client, m.model_id()));
    // A change after the restore...
    ASSERT_OK(client.Publish(m.model_id(), 3, 2));
  }
  // ...survives a restart with the same --restore_from (an existing database is kept).
  auto server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  EXPECT_EQ(client.ListVersions(m.model_id())->published_version(), 3u);

  IndexServerOptions bad;
  bad.data_dir = TmpDir("restore_missing");
  bad.restore_from = backups + "/missing";
  EXPECT_CODE(IndexServer::Start(bad), kNotFound);
}

TEST(IndexServerBackupTest, BackupRootConfinesBackupDirectories) {
  const std::string root = TmpDir("backup_root");
  IndexServerOptions options;
  options.data_dir = TmpDir("backup_root_db");
  options.backup_root = root;
  auto server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  ASSERT_OK(client.PutModel(MakeModel("rooted", 1, 1, 1, 4)));
  v1::BackupRequest b;
  b.set_backup_dir("nightly");
  ASSERT_OK(client.Call(&v1::IndexService::Stub::Backup, b));
  EXPECT_TRUE(std::filesystem::is_directory(root + "/nightly"));
  v1::ListBackupsRequest l;
  l.set_backup_dir("nightly");
  absl::StatusOr<v1::ListBackupsResponse> list =
      client.Call(&v1::IndexService::Stub::ListBackups, l);
  ASSERT_OK(list);
  EXPECT_EQ(list->backups_size(), 1);
  for (const char* bad :
       {"../escape", "a/../../escape", "/tmp/absolute", "..", ".", "a/b", "/", "nightly/../../x"}) {
    b.set_backup_dir(bad);
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::Backup, b), kInvalidArgument);
    l.set_backup_dir(bad);
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::ListBackups, l), kInvalidArgument);
  }
}

TEST(IndexServerBackupTest, WithoutBackupRootBackupsAreOff) {
  IndexServerOptions options;
  options.data_dir = TmpDir("no_backup_root_db");
  auto server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  v1::BackupRequest b;
  for (const char* dir : {"/tmp/anywhere", "name"}) {
    b.set_backup_dir(dir);
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::Backup, b), kFailedPrecondition);
    v1::ListBackupsRequest l;
    l.set_backup_dir(dir);
    EXPECT_CODE(client.Call(&v1::IndexService::Stub::ListBackups, l), kFailedPrecondition);
  }
}

TEST(IndexServerRetentionTest, KeepsTheNewestVersionsAndThePublishedOne) {
  IndexServerOptions options;
  options.data_dir = TmpDir("retention_db");
  options.keep_versions = 2;
  auto server = IndexServer::Start(options);
  ASSERT_OK(server);
  Client client((*server)->address());
  const v1::Model m = MakeModel("retained", 2, 4, 2, 32);
  ASSERT_OK(client.PutModel(m));
  ASSERT_OK(client.Stage(m, 1));
  ASSERT_OK(client.Publish(m.model_id(), 1, 0));
  for (int i = 2; i <= 5; ++i) ASSERT_OK(client.Stage(m, i));
  absl::StatusOr<v1::VersionInfo> open = client.CreateVersion(m.model_id());  // v6, OPEN.
  ASSERT_OK(open);
  absl::StatusOr<v1::ListVersionsResponse> list = client.ListVersions(m.model_id());
  ASSERT_OK(list);
  std::vector<uint64_t> kept;
  for (const auto& v : list->versions()) kept.push_back(v.version());
  // v1 published (kept), v4 and v5 newest sealed; v6 is OPEN (never deleted).
  EXPECT_EQ(kept, (std::vector<uint64_t>{1, 4, 5, 6}));
  EXPECT_CODE(client.GetConfigs(m.model_id(), 2), kNotFound);
  EXPECT_CODE(client.Download(m.model_id(), 3, v1::TENSOR_KIND_CENTROIDS), kNotFound);
  ASSERT_OK(client.GetConfigs(m.model_id(), 0));
  ASSERT_OK(client.Publish(m.model_id(), 5, 1));
  list = client.ListVersions(m.model_id());
  kept.clear();
  for (const auto& v : list->versions()) kept.push_back(v.version());
  EXPECT_EQ(kept, (std::vector<uint64_t>{4, 5, 6}));
}

}  // namespace
}  // namespace spattn
