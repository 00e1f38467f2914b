// `spattnctl index` against an in-process index server on loopback (port 0).
#include "client/index_commands.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index/index_server.h"
#include "index/tensor_client.h"
#include "index/test_util.h"
#include "kernels/io/tensor_io.h"

namespace spattn {
namespace {

std::string TmpDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

absl::Status WriteF32(const std::string& path, std::vector<int64_t> shape,
                      const std::string& bytes) {
  HostTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.bytes.assign(bytes.begin(), bytes.end());
  return WriteNpy(path, t);
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr char kMInference[] = R"([
  {"0": ["vertical_and_slash", 1000, 6096, 336], "1": ["stream_llm", 100, 800, 12.5],
   "2": ["block_sparse", 8, 1, 0], "3": ["vertical_and_slash", 30, 800, 26473]},
  {"3": ["vertical_and_slash", 3500, 100, 4777248], "2": ["vertical_and_slash", 100, 750, 1],
   "1": ["stream_llm", 64, 2048, 0], "0": ["block_sparse", 100, 0, 3]}
])";

TEST(MInferenceConfigTest, MapsPatternsToMethods) {
  absl::StatusOr<v1::PutHeadConfigsRequest> r = ParseMInferenceConfig(kMInference);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->configs_size(), 8);
  const v1::HeadConfig& vs = r->configs(0);
  EXPECT_EQ(vs.layer(), 0u);
  EXPECT_EQ(vs.head(), 0u);
  EXPECT_EQ(vs.method().method(), v1::METHOD_VERTICAL_SLASH);
  EXPECT_EQ(vs.method().vertical_slash().vertical_size(), 1000);
  EXPECT_EQ(vs.method().vertical_slash().slash_size(), 6096);
  EXPECT_FLOAT_EQ(vs.search_score(), 336.f);
  const v1::HeadConfig& stream = r->configs(1);
  EXPECT_EQ(stream.method().method(), v1::METHOD_A_SHAPE);
  EXPECT_EQ(stream.method().a_shape().sink_tokens(), 100);
  EXPECT_EQ(stream.method().a_shape().local_tokens(), 800);
  EXPECT_FLOAT_EQ(stream.search_score(), 12.5f);
  const v1::HeadConfig& block = r->configs(2);
  EXPECT_EQ(block.method().method(), v1::METHOD_BLOCK_SPARSE);
  EXPECT_EQ(block.method().block_sparse().top_k(), 8);
  // Heads come out in numeric order whatever the JSON order.
  EXPECT_EQ(r->configs(4).layer(), 1u);
  EXPECT_EQ(r->configs(4).head(), 0u);
  EXPECT_EQ(r->configs(7).head(), 3u);
  EXPECT_EQ(r->configs(7).method().vertical_slash().vertical_size(), 3500);

  for (const char* bad : {
           R"([{"0": ["diagonal", 1, 2, 3]}])",    // Unknown pattern.
           R"([{"x": ["stream_llm", 1, 2, 3]}])",  // Head is not a number.
           R"([{"0": ["stream_llm", "1", 2, 3]}])",
           R"([{"0": ["stream_llm", 1]}])",
           R"([["stream_llm", 1, 2, 3]])",
           R"({"0": 1})",
           R"(not json)",
       }) {
    EXPECT_EQ(ParseMInferenceConfig(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  absl::Status s = ParseMInferenceConfig(R"([{}, {"5": ["diagonal", 1, 2, 3]}])").status();
  EXPECT_TRUE(absl::StrContains(s.message(), "layer 1 head 5")) << s;
}

class IndexCommandsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    IndexServerOptions options;
    options.data_dir = TmpDir("cli_db");
    options.backup_root = TmpDir("cli_backups");
    auto server = IndexServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() { delete server_; }

  // Runs `spattnctl index --server=... words...`; returns the exit code, fills out/err.
  int Run(std::vector<std::string> words) {
    words.insert(words.begin(), absl::StrCat("--server=", server_->address()));
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = RunIndexCommand(static_cast<int>(argv.size()), argv.data());
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return rc;
  }

  static IndexServer* server_;
  std::string out_, err_;
};

IndexServer* IndexCommandsTest::server_ = nullptr;

TEST_F(IndexCommandsTest, ModelsPutGetListDelete) {
  ASSERT_EQ(Run({"models", "put", "--model=cli-a", "--layers=2", "--q_heads=4", "--kv_heads=2",
                 "--head_dim", "16", "--rope_theta=10000", "--default_method=vertical_slash",
                 "--description=from flags"}),
            0)
      << err_;
  EXPECT_TRUE(absl::StrContains(out_, "created model cli-a")) << out_;
  const std::string dir = TmpDir("cli_models");
  WriteText(dir + "/m.json",
            R"({"model_id": "cli-b", "num_layers": 3, "num_q_heads": 8, "num_kv_heads": 8,
                "head_dim": 32, "rope_theta": 500000,
                "default_method": {"method": "METHOD_A_SHAPE", "a_shape": {"sink_tokens": 64}}})");
  ASSERT_EQ(Run({"models", "put", "--json=" + dir + "/m.json"}), 0) << err_;
  ASSERT_EQ(Run({"models", "get", "cli-b"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "layers 3, q heads 8, kv heads 8, head_dim 32")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "default method a_shape")) << out_;
  ASSERT_EQ(Run({"models", "list"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "cli-a")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "vertical_slash")) << out_;
  ASSERT_EQ(Run({"models", "delete", "cli-b"}), 0) << err_;
  EXPECT_EQ(Run({"models", "get", "cli-b"}), 1);
  EXPECT_TRUE(absl::StrContains(err_, "NOT_FOUND")) << err_;
}

TEST_F(IndexCommandsTest, ConfigsImportExportMInferenceAndOwnFormat) {
  ASSERT_EQ(Run({"models", "put", "--model=cli-cfg", "--layers=2", "--q_heads=4", "--kv_heads=2",
                 "--head_dim=16"}),
            0)
      << err_;
  ASSERT_EQ(Run({"create-version", "cli-cfg", "--description=minference import"}), 0) << err_;
  const std::string dir = TmpDir("cli_cfg");
  WriteText(dir + "/best_pattern.json", kMInference);
  ASSERT_EQ(Run({"configs", "import", "cli-cfg", "1", dir + "/best_pattern.json"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "imported 8 head configs (minference format)")) << out_;
  ASSERT_EQ(Run({"configs", "export", "cli-cfg", "--version=1", "--out=" + dir + "/ours.json"}), 0)
      << err_;
  const std::string exported = ReadText(dir + "/ours.json");
  EXPECT_TRUE(absl::StrContains(exported, "METHOD_VERTICAL_SLASH")) << exported;
  // Our format round-trips into a new version unchanged.
  ASSERT_EQ(Run({"create-version", "cli-cfg"}), 0) << err_;
  ASSERT_EQ(Run({"configs", "import", "cli-cfg", "2", dir + "/ours.json"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "(spattn format)")) << out_;
  ASSERT_EQ(Run({"configs", "export", "cli-cfg", "--version=2", "--out=" + dir + "/again.json"}),
            0);
  std::string again = ReadText(dir + "/again.json");
  absl::StatusOr<v1::PutHeadConfigsRequest> a = ParseSpattnConfig(exported);
  absl::StatusOr<v1::PutHeadConfigsRequest> b = ParseSpattnConfig(again);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
  // Issue 11: a config's calibration length and length bucket go in and come out.
  WriteText(dir + "/calibrated.json",
            R"({"configs": [{"layer": 1, "head": 2, "min_tokens": 23170,
                "calibrated_tokens": 32768, "method": {"method": "METHOD_A_SHAPE"}}]})");
  ASSERT_EQ(Run({"create-version", "cli-cfg"}), 0) << err_;
  ASSERT_EQ(Run({"configs", "import", "cli-cfg", "3", dir + "/calibrated.json"}), 0) << err_;
  ASSERT_EQ(Run({"configs", "export", "cli-cfg", "--version=3"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "\"calibrated_tokens\": 32768")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "\"min_tokens\": 23170")) << out_;
  // The server validates: a MInference file for a bigger model is refused with the field named.
  WriteText(dir + "/too_many.json", R"([{"9": ["stream_llm", 1, 2, 3]}])");
  EXPECT_EQ(Run({"configs", "import", "cli-cfg", "2", dir + "/too_many.json"}), 1);
  EXPECT_TRUE(absl::StrContains(err_, "INVALID_ARGUMENT")) << err_;
  EXPECT_TRUE(absl::StrContains(err_, "configs[0].head")) << err_;
}

TEST_F(IndexCommandsTest, TensorsSealPublishWatchBackup) {
  const v1::Model m = testing_util::MakeModel("cli-t", 2, 4, 2, 8);
  ASSERT_EQ(Run({"models", "put", "--model=cli-t", "--layers=2", "--q_heads=4", "--kv_heads=2",
                 "--head_dim=8"}),
            0);
  ASSERT_EQ(Run({"create-version", "cli-t"}), 0);
  const std::string dir = TmpDir("cli_tensors");
  // Centroids: one [L, kv, C, D] array.
  std::vector<float> all = testing_util::RandomFloats(3, 2 * 2 * 5 * 8);
  ASSERT_TRUE(WriteF32(dir + "/centroids.npy", {2, 2, 5, 8}, FloatsToBytes(all)).ok());
  ASSERT_EQ(Run({"centroids", "upload", "cli-t", "1", dir + "/centroids.npy"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "uploaded 4 centroid tensors")) << out_;
  // Classifier parameters from a directory of l{L}_h{H}_{param}.npy files.
  std::filesystem::create_directories(dir + "/clf");
  for (const TensorUpload& t : testing_util::MakeClassifier(m, 1, 2, 6, 5, 9)) {
    ASSERT_TRUE(
        WriteF32(absl::StrCat(dir, "/clf/l1_h2_", t.key.name(), ".npy"), t.shape, t.bytes).ok());
  }
  ASSERT_EQ(Run({"classifier", "upload", "cli-t", "1", "--dir=" + dir + "/clf"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "uploaded 4 classifier parameters")) << out_;
  ASSERT_EQ(Run({"seal", "cli-t", "1"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "is STAGED")) << out_;
  EXPECT_EQ(Run({"publish", "cli-t", "1"}), 2);  // --expect is required.
  EXPECT_EQ(Run({"publish", "cli-t", "1", "--expect=4"}), 1);
  EXPECT_TRUE(absl::StrContains(err_, "ABORTED")) << err_;
  ASSERT_EQ(Run({"publish", "cli-t", "1", "--expect", "0"}), 0) << err_;
  ASSERT_EQ(Run({"versions", "cli-t"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "published version: 1")) << out_;
  EXPECT_TRUE(absl::StrContains(out_, "PUBLISHED")) << out_;

  // Downloads of the published version give the same arrays back.
  ASSERT_EQ(Run({"centroids", "download", "cli-t", "--out=" + dir + "/back.npy"}), 0) << err_;
  EXPECT_EQ(ReadText(dir + "/back.npy"), ReadText(dir + "/centroids.npy"));
  ASSERT_EQ(Run({"centroids", "download", "cli-t", "--layer=1", "--kv_head=0",
                 "--out=" + dir + "/one.npy"}),
            0)
      << err_;
  absl::StatusOr<HostTensor> one = ReadNpy(dir + "/one.npy");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(std::string(one->bytes.begin(), one->bytes.end()),
            FloatsToBytes(all).substr((1 * 2 + 0) * 5 * 8 * 4, 5 * 8 * 4));
  // bf16 files are widened to fp32 on upload: a [C, head_dim] set from .safetensors.
  {
    std::vector<float> v = testing_util::RandomFloats(8, 5 * 8);
    absl::StatusOr<HostTensor> bf16 = HostTensor::FromFloats(v, {5, 8}, DType::kBF16);
    ASSERT_TRUE(bf16.ok());
    ASSERT_TRUE(WriteSafetensors(dir + "/c.safetensors", {{"centroids", *bf16}}).ok());
    ASSERT_EQ(Run({"create-version", "cli-t", "--base=1"}), 0) << err_;
    ASSERT_EQ(Run({"centroids", "upload", "cli-t", "2", dir + "/c.safetensors:centroids",
                   "--layer=0", "--kv_head=1"}),
              0)
        << err_;
    ASSERT_EQ(Run({"centroids", "download", "cli-t", "--version=2", "--layer=0", "--kv_head=1",
                   "--out=" + dir + "/widened.npy"}),
              0)
        << err_;
    absl::StatusOr<HostTensor> widened = ReadNpy(dir + "/widened.npy");
    ASSERT_TRUE(widened.ok());
    EXPECT_EQ(widened->dtype, DType::kF32);
    EXPECT_EQ(widened->ToFloats(), bf16->ToFloats());
  }
  ASSERT_EQ(Run({"classifier", "download", "cli-t", "--dir=" + dir + "/clf_back"}), 0) << err_;
  for (const char* p : {"w0", "b0", "w1", "b1"}) {
    EXPECT_EQ(ReadText(absl::StrCat(dir, "/clf_back/l1_h2_", p, ".npy")),
              ReadText(absl::StrCat(dir, "/clf/l1_h2_", p, ".npy")))
        << p;
  }

  ASSERT_EQ(Run({"watch", "cli-t", "--count=1"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "cli-t version 1 published")) << out_;

  ASSERT_EQ(Run({"backup", "nightly"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "backup 1 written")) << out_;
  ASSERT_EQ(Run({"list-backups", "nightly"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "     1  ")) << out_;
  ASSERT_EQ(Run({"health"}), 0) << err_;
  EXPECT_TRUE(absl::StrContains(out_, "SERVING")) << out_;

  // Bad input files and arguments.
  WriteText(dir + "/bad.npy", "not an npy");
  EXPECT_EQ(Run({"centroids", "upload", "cli-t", "1", dir + "/bad.npy"}), 1);
  EXPECT_EQ(Run({"centroids", "upload", "cli-t", "1", dir + "/back.npy", "--layer=0"}), 2);
  EXPECT_EQ(Run({"seal", "cli-t"}), 2);
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_EQ(Run({"versions", "cli-t", "--typo=1"}), 2);
  EXPECT_TRUE(absl::StrContains(err_, "unknown flag --typo")) << err_;
}

}  // namespace
}  // namespace spattn
