// `spattnctl calibrate` end to end against an in-process index server on loopback (port 0):
// search, publish, read back; --out JSON through `spattnctl index configs import`; captured
// tensors with a {layer} placeholder; Saap tensors; usage and service errors.
#include "client/calibrate_command.h"

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/index_commands.h"
#include "index/index_server.h"
#include "index/tensor_client.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/io/tensor_io.h"
#include "kernels/workload/tensor_problem.h"
#include "kernels/workload/workload.h"
#include "proto/grpc_status.h"
#include "proto/method_config_convert.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

std::string TmpDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The small synthetic model of these tests: 4 q heads / 2 kv heads, head_dim 64, 1024 tokens.
constexpr int kSeqLen = 1024;
const std::vector<std::string> kShape = {"--workload=llm_mix", "--seq_len=1024",
                                         "--q_heads=4",        "--kv_heads=2",
                                         "--head_dim=64",      "--sample_rows=128"};

Workload Prompt(uint64_t seed, int seq_len = kSeqLen) {
  WorkloadOptions o;
  o.shape.q_lens = {seq_len};
  o.shape.num_q_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 64;
  o.seed = seed;
  o.model_seed = seed;
  absl::StatusOr<Workload> w = GenerateWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(*w);
}

// The search of the default --candidates=auto up to 128K: sampled_lines alone at margin 0.01,
// on calibrate's sampled_lines block rows (128, the worker's).
PatternSearchOptions AutoOptions() {
  PatternSearchOptions o;
  o.sampled_lines_block_m = 128;
  o.sampled_lines_margin = kAutoSampledLinesMargin;
  return o;
}
std::vector<MethodConfig> SampledLinesCandidates() {
  absl::StatusOr<std::vector<MethodConfig>> sl =
      CandidatesForMethods({Method::kSampledLines}, nullptr);
  EXPECT_TRUE(sl.ok()) << sl.status();
  return sl.ok() ? *sl : std::vector<MethodConfig>();
}

// What the command must have chosen for one layer: the search run directly (by default the
// default candidates' search, auto's below 128K).
std::vector<v1::HeadConfig> Expected(const AttentionProblem& p, int layer,
                                     PatternSearchOptions o = AutoOptions(),
                                     const std::vector<MethodConfig>& candidates =
                                         SampledLinesCandidates()) {
  o.sample_rows = 128;
  absl::StatusOr<PatternSearchResult> r = SearchHeadPatterns({&p}, candidates, o);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<v1::HeadConfig> out;
  for (const HeadSearchResult& h : r->heads) {
    v1::HeadConfig c;
    c.set_layer(layer);
    c.set_head(h.head);
    MethodConfigToProto(h.chosen.config, c.mutable_method());
    c.set_search_score(static_cast<float>(h.chosen.recall));
    int calibrated = 0;
    for (int b = 0; b < p.batch(); ++b) calibrated = std::max(calibrated, p.k_len(b));
    c.set_calibrated_tokens(calibrated);  // issue 11: the length the configs were searched at
    out.push_back(c);
  }
  return out;
}

void ExpectSameConfigs(const std::vector<v1::HeadConfig>& got,
                       const std::vector<v1::HeadConfig>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got[i], want[i]))
        << "got " << got[i].ShortDebugString() << "\nwant " << want[i].ShortDebugString();
  }
}

class CalibrateCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    IndexServerOptions options;
    options.data_dir = TmpDir("calibrate_db");
    auto server = IndexServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    stub_ = v1::IndexService::NewStub(
                grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()))
                .release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete server_;
  }

  // Runs `spattnctl calibrate words...`; returns the exit code, fills out_/err_.
  int Calibrate(std::vector<std::string> words) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = RunCalibrateCommand(static_cast<int>(argv.size()), argv.data());
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return rc;
  }
  int Index(std::vector<std::string> words) {
    words.insert(words.begin(), "--server=" + server_->address());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = RunIndexCommand(static_cast<int>(argv.size()), argv.data());
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return rc;
  }
  std::vector<std::string> With(std::vector<std::string> extra) {
    std::vector<std::string> words = kShape;
    words.insert(words.end(), extra.begin(), extra.end());
    return words;
  }
  std::string Server() { return "--server=" + server_->address(); }

  static void PutModel(const std::string& id, int layers, int head_dim = 64) {
    v1::PutModelRequest req;
    v1::Model* m = req.mutable_model();
    m->set_model_id(id);
    m->set_num_layers(layers);
    m->set_num_q_heads(4);
    m->set_num_kv_heads(2);
    m->set_head_dim(head_dim);
    m->set_rope_theta(500000);
    m->mutable_default_method()->set_method(v1::METHOD_DENSE);
    grpc::ClientContext ctx;
    v1::PutModelResponse resp;
    ASSERT_TRUE(stub_->PutModel(&ctx, req, &resp).ok());
  }
  static v1::GetHeadConfigsResponse Configs(const std::string& id, uint64_t version,
                                            std::optional<uint32_t> layer = std::nullopt) {
    v1::GetHeadConfigsRequest req;
    req.set_model_id(id);
    req.set_version(version);
    if (layer) req.set_layer(*layer);
    grpc::ClientContext ctx;
    v1::GetHeadConfigsResponse resp;
    grpc::Status s = stub_->GetHeadConfigs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  static std::vector<v1::HeadConfig> Layer(const v1::GetHeadConfigsResponse& r, uint32_t layer) {
    std::vector<v1::HeadConfig> out;
    for (const v1::HeadConfig& c : r.configs()) {
      if (c.layer() == layer) out.push_back(c);
    }
    return out;
  }
  static v1::ListVersionsResponse Versions(const std::string& id) {
    v1::ListVersionsRequest req;
    req.set_model_id(id);
    grpc::ClientContext ctx;
    v1::ListVersionsResponse resp;
    EXPECT_TRUE(stub_->ListVersions(&ctx, req, &resp).ok());
    return resp;
  }

  static IndexServer* server_;
  static v1::IndexService::Stub* stub_;
  std::string out_, err_;
};

IndexServer* CalibrateCommandTest::server_ = nullptr;
v1::IndexService::Stub* CalibrateCommandTest::stub_ = nullptr;

TEST_F(CalibrateCommandTest, PublishesTheSearchChoicesAndKeepsOtherLayers) {
  PutModel("cal-a", 2);
  const std::string dir = TmpDir("cal_a");
  ASSERT_EQ(Calibrate(With({"--seed=3", "--layers=2", "--publish", "--model=cal-a", Server(),
                            "--out=" + dir + "/configs.json"})),
            0)
      << err_ << out_;
  EXPECT_TRUE(absl::StrContains(out_, "published version 1 of cal-a (previous 0)")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "runner-up")) << out_;

  v1::GetHeadConfigsResponse published = Configs("cal-a", 0);
  EXPECT_EQ(published.version(), 1u);
  ASSERT_EQ(published.configs_size(), 8);
  // Layer l is prompt seed + l of model seed + l.
  Workload l0 = Prompt(3), l1 = Prompt(4);
  ExpectSameConfigs(Layer(published, 0), Expected(l0.problem(), 0));
  ExpectSameConfigs(Layer(published, 1), Expected(l1.problem(), 1));
  // --out wrote the same configs in the spattn JSON format.
  absl::StatusOr<v1::PutHeadConfigsRequest> file =
      ParseSpattnConfig(ReadText(dir + "/configs.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectSameConfigs({file->configs().begin(), file->configs().end()},
                    {published.configs().begin(), published.configs().end()});

  // Recalibrating layer 1 alone: version 2 is based on version 1, so layer 0 keeps its configs.
  ASSERT_EQ(Calibrate(With({"--seed=9", "--model_seed=9", "--layers=1-1", "--publish",
                            "--model=cal-a", Server(), "--description=layer 1 again"})),
            0)
      << err_ << out_;
  EXPECT_TRUE(absl::StrContains(out_, "created version 2 of cal-a (base 1)")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "published version 2 of cal-a (previous 1)")) << out_;
  v1::GetHeadConfigsResponse second = Configs("cal-a", 0);
  EXPECT_EQ(second.version(), 2u);
  ExpectSameConfigs(Layer(second, 0), Layer(published, 0));
  Workload again = Prompt(10);  // seed 9 + layer 1
  ExpectSameConfigs(Layer(second, 1), Expected(again.problem(), 1));
}

TEST_F(CalibrateCommandTest, LostPublishRaceIsAborted) {
  PutModel("cal-race", 1);
  ASSERT_EQ(Calibrate(With({"--seed=3", "--publish", "--model=cal-race", Server()})), 0) << err_;
  // Expecting nothing published (0) while version 1 is: compare-and-set fails.
  EXPECT_EQ(Calibrate(With({"--seed=5", "--publish", "--model=cal-race", Server(), "--expect=0"})),
            1);
  EXPECT_TRUE(absl::StrContains(err_, "ABORTED")) << err_;
  EXPECT_TRUE(absl::StrContains(err_, "Version 2 stays sealed")) << err_;
  const v1::ListVersionsResponse v = Versions("cal-race");
  EXPECT_EQ(v.published_version(), 1u);
  ASSERT_EQ(v.versions_size(), 2);
  EXPECT_EQ(v.versions(1).state(), v1::VERSION_STATE_STAGED);
}

TEST_F(CalibrateCommandTest, OutJsonImportsWithTheIndexCli) {
  PutModel("cal-json", 1);
  const std::string dir = TmpDir("cal_json");
  ASSERT_EQ(Calibrate(With({"--seed=6", "--out=" + dir + "/c.json"})), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "wrote 4 head configs")) << out_;
  ASSERT_EQ(Index({"create-version", "cal-json"}), 0) << err_;
  ASSERT_EQ(Index({"configs", "import", "cal-json", "1", dir + "/c.json"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "(spattn format)")) << out_;
  Workload w = Prompt(6);
  ExpectSameConfigs(Layer(Configs("cal-json", 1), 0), Expected(w.problem(), 0));
}

// --candidates=all: the search over every method (the default before session 27), margin 0.
TEST_F(CalibrateCommandTest, CandidatesAllIsTheSearchOverEveryMethod) {
  const std::string dir = TmpDir("cal_all");
  ASSERT_EQ(Calibrate(With({"--seed=6", "--candidates=all", "--out=" + dir + "/c.json"})), 0)
      << err_;
  EXPECT_FALSE(absl::StrContains(out_, "candidates auto")) << out_;
  absl::StatusOr<v1::PutHeadConfigsRequest> file = ParseSpattnConfig(ReadText(dir + "/c.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  Workload w = Prompt(6);
  ExpectSameConfigs({file->configs().begin(), file->configs().end()},
                    Expected(w.problem(), 0, PatternSearchOptions(), DefaultCandidates()));
  // The default (auto at 1024 tokens): sampled_lines alone at the guard's gamma 0.96 or more.
  ASSERT_EQ(Calibrate(With({"--seed=6", "--out=" + dir + "/auto.json"})), 0) << err_;
  EXPECT_TRUE(absl::StrContains(
      out_, "layer 0: candidates auto at 1024 tokens: sampled_lines (sampled_lines_margin 0.01)"))
      << out_;
  absl::StatusOr<v1::PutHeadConfigsRequest> dflt = ParseSpattnConfig(ReadText(dir + "/auto.json"));
  ASSERT_TRUE(dflt.ok()) << dflt.status();
  ExpectSameConfigs({dflt->configs().begin(), dflt->configs().end()}, Expected(w.problem(), 0));
  for (const v1::HeadConfig& c : dflt->configs()) {
    const v1::Method m = c.method().method();
    EXPECT_TRUE(m == v1::METHOD_SAMPLED_LINES || m == v1::METHOD_DENSE) << c.ShortDebugString();
    if (m == v1::METHOD_SAMPLED_LINES) {
      EXPECT_GE(c.method().sampled_lines().gamma(), 0.96f - 1e-6f) << c.ShortDebugString();
    }
  }
}

// --sampled_lines_margin: the search tries sampled_lines at the guard's gamma or above only
// (0.96 at 0.95 + 0.01): the configs are the search's with PatternSearchOptions::
// sampled_lines_margin, and no sampled_lines config below 0.96 is chosen or runner-up.
TEST_F(CalibrateCommandTest, SampledLinesMarginSearchesAtTheGuardsGamma) {
  const std::string dir = TmpDir("cal_margin");
  ASSERT_EQ(Calibrate(With({"--seed=6", "--candidates=sampled_lines", "--sampled_lines_margin=0.01",
                            "--out=" + dir + "/c.json"})),
            0)
      << err_;
  absl::StatusOr<v1::PutHeadConfigsRequest> file = ParseSpattnConfig(ReadText(dir + "/c.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  PatternSearchOptions o;
  o.sampled_lines_block_m = 128;  // calibrate's default, the worker's
  o.sampled_lines_margin = 0.01;
  absl::StatusOr<std::vector<MethodConfig>> sl =
      CandidatesForMethods({Method::kSampledLines}, nullptr);
  ASSERT_TRUE(sl.ok()) << sl.status();
  Workload w = Prompt(6);
  ExpectSameConfigs({file->configs().begin(), file->configs().end()},
                    Expected(w.problem(), 0, o, *sl));
  EXPECT_TRUE(absl::StrContains(out_, "gamma=0.96")) << out_;
  for (const char* below : {"gamma=0.85", "gamma=0.9)", "gamma=0.95"}) {
    EXPECT_FALSE(absl::StrContains(out_, below)) << below << "\n" << out_;
  }
}

// --candidates=auto: each search's candidates follow its own calibration length. With
// --length_buckets=512,1024 and --auto_max_len=512 the 512 bucket is the sampled_lines-only
// search at margin 0.01 and the 1024 bucket the default search; each bucket's configs equal that
// search run directly on the bucket's prompt (min_tokens 0 and sqrt(512 * 1024) = 724).
TEST_F(CalibrateCommandTest, AutoCandidatesFollowEachBucketsLength) {
  const std::string dir = TmpDir("cal_auto");
  ASSERT_EQ(Calibrate({"--workload=llm_mix", "--q_heads=4", "--kv_heads=2", "--head_dim=64",
                       "--sample_rows=128", "--seed=6", "--length_buckets=512,1024",
                       "--candidates=auto", "--auto_max_len=512", "--out=" + dir + "/c.json"}),
            0)
      << err_;
  EXPECT_TRUE(absl::StrContains(
      out_, "layer 0: candidates auto at 512 tokens: sampled_lines (sampled_lines_margin 0.01)"))
      << out_;
  EXPECT_TRUE(absl::StrContains(out_, "layer 0: candidates auto at 1024 tokens: all")) << out_;
  absl::StatusOr<v1::PutHeadConfigsRequest> file = ParseSpattnConfig(ReadText(dir + "/c.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->configs_size(), 8);
  std::vector<v1::HeadConfig> got(file->configs().begin(), file->configs().end());

  PatternSearchOptions sl_options;
  sl_options.sampled_lines_block_m = 128;  // calibrate's default, the worker's
  sl_options.sampled_lines_margin = 0.01;
  absl::StatusOr<std::vector<MethodConfig>> sl =
      CandidatesForMethods({Method::kSampledLines}, nullptr);
  ASSERT_TRUE(sl.ok()) << sl.status();
  Workload short_prompt = Prompt(6, 512);
  std::vector<v1::HeadConfig> want = Expected(short_prompt.problem(), 0, sl_options, *sl);
  PatternSearchOptions all_options;
  all_options.sampled_lines_block_m = 128;
  Workload long_prompt = Prompt(6, 1024);
  for (v1::HeadConfig c : Expected(long_prompt.problem(), 0, all_options, DefaultCandidates())) {
    c.set_min_tokens(724);
    want.push_back(c);
  }
  ExpectSameConfigs(got, want);
  // The 512 bucket: sampled_lines at 0.96 or more, or the dense fallback; the 1024 bucket: the
  // default search, here other methods too.
  int other = 0;
  for (int i = 0; i < 8; ++i) {
    const v1::Method m = got[i].method().method();
    if (i < 4) {
      EXPECT_TRUE(m == v1::METHOD_SAMPLED_LINES || m == v1::METHOD_DENSE)
          << got[i].ShortDebugString();
      if (m == v1::METHOD_SAMPLED_LINES) {
        EXPECT_GE(got[i].method().sampled_lines().gamma(), 0.96f - 1e-6f)
            << got[i].ShortDebugString();
      }
    } else {
      other += m != v1::METHOD_SAMPLED_LINES && m != v1::METHOD_DENSE;
    }
  }
  EXPECT_GT(other, 0) << out_;

  // The default boundary (128K): one 512-token search is the sampled_lines-only one.
  const std::string dir2 = TmpDir("cal_auto_default");
  ASSERT_EQ(Calibrate({"--workload=llm_mix", "--q_heads=4", "--kv_heads=2", "--head_dim=64",
                       "--sample_rows=128", "--seed=6", "--seq_len=512", "--candidates=AUTO",
                       "--out=" + dir2 + "/c.json"}),
            0)
      << err_;
  EXPECT_TRUE(absl::StrContains(out_, "candidates auto at 512 tokens: sampled_lines")) << out_;
  absl::StatusOr<v1::PutHeadConfigsRequest> file2 = ParseSpattnConfig(ReadText(dir2 + "/c.json"));
  ASSERT_TRUE(file2.ok()) << file2.status();
  ExpectSameConfigs({file2->configs().begin(), file2->configs().end()},
                    Expected(short_prompt.problem(), 0, sl_options, *sl));
}

TEST_F(CalibrateCommandTest, CapturedTensorsPerLayer) {
  const std::string dir = TmpDir("cal_captured");
  Workload l0 = Prompt(21), l1 = Prompt(22);
  for (int l = 0; l < 2; ++l) {
    absl::StatusOr<NamedTensors> t = ProblemToTensors((l == 0 ? l0 : l1).problem());
    ASSERT_TRUE(t.ok()) << t.status();
    for (const char* name : {"q", "k", "v"}) {
      ASSERT_TRUE(WriteNpy(absl::StrCat(dir, "/", name, l, ".npy"), t->at(name)).ok());
    }
  }
  ASSERT_EQ(Calibrate({"--q=" + dir + "/q{layer}.npy", "--k=" + dir + "/k{layer}.npy",
                       "--v=" + dir + "/v{layer}.npy", "--layers=2", "--sample_rows=128",
                       "--out=" + dir + "/c.json"}),
            0)
      << err_;
  absl::StatusOr<v1::PutHeadConfigsRequest> file = ParseSpattnConfig(ReadText(dir + "/c.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<v1::HeadConfig> want = Expected(l0.problem(), 0);
  for (const v1::HeadConfig& c : Expected(l1.problem(), 1)) want.push_back(c);
  ExpectSameConfigs({file->configs().begin(), file->configs().end()}, want);
  // A missing layer file names the path.
  EXPECT_EQ(Calibrate({"--q=" + dir + "/q{layer}.npy", "--k=" + dir + "/k{layer}.npy",
                       "--v=" + dir + "/v{layer}.npy", "--layers=3"}),
            1);
  EXPECT_TRUE(absl::StrContains(err_, "q2.npy")) << err_;
}

TEST_F(CalibrateCommandTest, SaapChoicesCarryTheirTensors) {
  PutModel("cal-saap", 1);
  ASSERT_EQ(Calibrate({"--workload=llm_mix", "--seq_len=4096", "--q_heads=4", "--kv_heads=2",
                       "--head_dim=64", "--seed=3", "--sample_rows=64", "--candidates=saap",
                       "--target_recall=0.9", "--saap_centroids=16", "--saap_hidden=32",
                       "--saap_steps=40", "--publish", "--model=cal-saap", Server()}),
            0)
      << err_ << out_;
  v1::GetHeadConfigsResponse c = Configs("cal-saap", 0);
  std::set<uint32_t> saap_heads, kv_heads;
  for (const v1::HeadConfig& h : c.configs()) {
    if (h.method().method() == v1::METHOD_SAAP) {
      saap_heads.insert(h.head());
      kv_heads.insert(h.head() / 2);
      EXPECT_EQ(h.method().saap().num_centroids(), 16);
    } else {
      EXPECT_EQ(h.method().method(), v1::METHOD_DENSE);
    }
  }
  ASSERT_FALSE(saap_heads.empty()) << out_;
  v1::GetTensorsRequest req;
  req.set_model_id("cal-saap");
  req.set_version(0);
  absl::StatusOr<std::vector<DownloadedTensor>> tensors = DownloadTensors(*stub_, req);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::set<uint32_t> got_centroids, got_classifiers;
  for (const DownloadedTensor& t : *tensors) {
    const v1::TensorKey& k = t.header.key();
    const auto& shape = t.header.desc().shape();
    if (k.kind() == v1::TENSOR_KIND_CENTROIDS) {
      got_centroids.insert(k.head());
      ASSERT_EQ(shape.size(), 2);
      EXPECT_EQ(shape[0], 16);
      EXPECT_EQ(shape[1], 64);
    } else {
      got_classifiers.insert(k.head());
      // w0 [64, 32], b0 [32], w1 [32, 16], b1 [16] (what the worker's asset loader expects).
      const std::vector<int64_t> dims(shape.begin(), shape.end());
      if (k.name() == "w0") {
        EXPECT_EQ(dims, (std::vector<int64_t>{64, 32}));
      } else if (k.name() == "w1") {
        EXPECT_EQ(dims, (std::vector<int64_t>{32, 16}));
      } else if (k.name() == "b1") {
        EXPECT_EQ(dims, (std::vector<int64_t>{16}));
      }
    }
  }
  EXPECT_EQ(got_centroids, kv_heads);
  EXPECT_EQ(got_classifiers, saap_heads);

  // Issue 11 item 6: the default candidates (auto: at 4096 tokens sampled_lines alone) include
  // Saap on the heads whose assets the published version holds (no Saap calibration in this
  // run), and the new version keeps their tensors; the other heads are sampled_lines or dense.
  out_.clear();
  err_.clear();
  ASSERT_EQ(Calibrate({"--workload=llm_mix", "--seq_len=4096", "--q_heads=4", "--kv_heads=2",
                       "--head_dim=64", "--seed=3", "--sample_rows=64", "--target_recall=0.9",
                       "--publish", "--model=cal-saap", Server()}),
            0)
      << err_ << out_;
  EXPECT_NE(out_.find("saap joins the search with the published assets (16 centroids, "
                      "classifiers for " +
                      std::to_string(saap_heads.size()) + " of 4 heads)"),
            std::string::npos)
      << out_;
  EXPECT_EQ(out_.find("saap calibrated"), std::string::npos) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "candidates auto at 4096 tokens: sampled_lines")) << out_;
  v1::GetHeadConfigsResponse again = Configs("cal-saap", 0);
  for (const v1::HeadConfig& h : again.configs()) {
    const v1::Method m = h.method().method();
    if (m == v1::METHOD_SAAP) {
      EXPECT_TRUE(saap_heads.count(h.head())) << h.head();
    } else {
      EXPECT_TRUE(m == v1::METHOD_SAMPLED_LINES || m == v1::METHOD_DENSE) << h.ShortDebugString();
    }
  }
  auto kept = DownloadTensors(*stub_, req);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->empty());
}

TEST_F(CalibrateCommandTest, UsageAndServiceErrors) {
  struct Case {
    std::vector<std::string> words;
    int rc;
    std::string expect;
  };
  PutModel("cal-small", 1, /*head_dim=*/32);
  const std::vector<Case> cases = {
      {With({"--bogus=1"}), 2, "unknown flag --bogus"},
      {With({"--target_recall=1.5"}), 2, "--target_recall"},
      {With({"--sampled_lines_margin=-0.01"}), 2, "--sampled_lines_margin: must be finite"},
      {With({"--sampled_lines_margin=nan"}), 2, "--sampled_lines_margin: must be finite"},
      {With({"--sampled_lines_margin=inf"}), 2, "--sampled_lines_margin: must be finite"},
      {With({"--sampled_lines_margin=x"}), 2, "--sampled_lines_margin"},
      {With({"--candidates=a_shape,nope"}), 2, "'nope'"},
      {With({"--candidates=auto", "--sampled_lines_margin=0.01"}), 2,
       "--sampled_lines_margin: not with --candidates=auto"},
      {With({"--candidates=auto", "--auto_max_len=0"}), 2, "--auto_max_len: must be >= 1"},
      {With({"--candidates=auto", "--auto_max_len=x"}), 2, "--auto_max_len"},
      {With({"--candidates=all", "--auto_max_len=1024"}), 2,
       "--auto_max_len: only with --candidates=auto"},
      {With({"--sampled_lines_margin=0.01"}), 2,
       "--sampled_lines_margin: not with --candidates=auto (the default)"},
      {With({"--layers=0"}), 2, "--layers"},
      {With({"--layers=3-1"}), 2, "--layers"},
      {With({"--publish"}), 2, "--model"},
      {With({"--expect=3"}), 2, "--publish"},
      {{"--q=a.npy"}, 2, "--q, --k and --v"},
      {{"--q=a.npy", "--k=b.npy", "--v=c.npy", "--seed=3"}, 2, "--seed"},
      {{"extra"}, 2, "unexpected argument"},
      {With({"--publish", "--model=no-such-model", Server()}), 1, "NOT_FOUND"},
      {With({"--publish", "--model=cal-small", Server()}), 1, "head_dim 32"},
      {With({"--publish", "--model=cal-small", Server(), "--head_dim=32", "--layers=2"}), 1,
       "layer 1 is past"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Calibrate(c.words), c.rc) << c.words.back() << "\n" << err_;
    EXPECT_TRUE(absl::StrContains(err_, c.expect)) << c.words.back() << ": " << err_;
  }
  EXPECT_EQ(Calibrate({"help"}), 0);
  EXPECT_TRUE(absl::StrContains(out_, "--target_recall")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "--sampled_lines_margin")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "--auto_max_len")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "--candidates=auto        auto (default)")) << out_;
}

}  // namespace
}  // namespace spattn
