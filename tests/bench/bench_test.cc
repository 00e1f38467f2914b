#include "tests/bench/bench_lib.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda/cuda_runtime.h"

namespace spattn {
namespace {

// A flat JSON object -> key: raw value (strings unquoted, numbers and arrays as text). Fails
// the test on anything that is not a well-formed flat object.
std::map<std::string, std::string> ParseFlatJson(const std::string& line) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  auto fail = [&](const char* what) {
    ADD_FAILURE() << what << " at " << i << " in " << line;
    return std::map<std::string, std::string>();
  };
  auto str = [&](std::string* s) {
    if (line[i] != '"') return false;
    ++i;
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\') ++i;
      s->push_back(line[i++]);
    }
    return i++ < line.size();
  };
  if (line.empty() || line[i++] != '{') return fail("no '{'");
  while (i < line.size() && line[i] != '}') {
    std::string key, value;
    if (!str(&key)) return fail("bad key");
    if (line[i++] != ':') return fail("no ':'");
    if (line[i] == '"') {
      if (!str(&value)) return fail("bad string");
    } else if (line[i] == '[') {
      while (i < line.size() && line[i] != ']') value.push_back(line[i++]);
      value.push_back(line[i++]);
    } else {
      while (i < line.size() && line[i] != ',' && line[i] != '}') value.push_back(line[i++]);
    }
    if (out.count(key)) return fail("duplicate key");
    out[key] = value;
    if (line[i] == ',') ++i;
  }
  if (i + 1 != line.size()) return fail("text after '}'");
  return out;
}

struct BenchRun {
  int code = 0;
  std::string out, err;
  std::vector<std::map<std::string, std::string>> lines;
};

BenchRun RunWith(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  BenchRun r;
  r.code = RunBench(args, out, err);
  r.out = out.str();
  r.err = err.str();
  for (absl::string_view l : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    if (l[0] == '{') r.lines.push_back(ParseFlatJson(std::string(l)));
  }
  return r;
}

double Num(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "missing " << key;
  return it == m.end() ? -1 : std::atof(it->second.c_str());
}

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

TEST(BenchTest, SmallRunOfDenseAndAShapeGivesValidLines) {
  const std::vector<std::string> args = {
      "--seq_len=512", "--methods=dense,a_shape", "--a_shape.sink_tokens=16",
      "--param",       "a_shape.local_tokens=64", "--threads=2",
      "--recall_rows=64", "--warmup=0", "--repeat=2"};
  const BenchRun r = RunWith(args);
  ASSERT_EQ(r.code, 0) << r.err;
  // llm_mix with 8 heads: 6 kind groups + "all", for each method.
  ASSERT_EQ(r.lines.size(), 14u) << r.out;
  std::map<std::string, int> per_method;
  for (const auto& l : r.lines) {
    const std::string what = absl::StrCat(l.at("method"), "/", l.at("group"));
    per_method[l.at("method")]++;
    EXPECT_EQ(l.count("error"), 0u) << what << ": " << l.at("error");
    EXPECT_EQ(l.at("seq_len"), "512");
    EXPECT_EQ(l.at("q_len"), "512");
    EXPECT_EQ(l.at("num_heads"), "8");
    EXPECT_EQ(l.at("kv_heads"), "2");
    EXPECT_EQ(l.at("head_dim"), "128");
    EXPECT_EQ(l.at("dtype"), "bf16");
    EXPECT_EQ(l.at("device"), "cpu");
    EXPECT_EQ(l.at("repeat"), "2");
    EXPECT_GE(Num(l, "index_build_ms"), 0) << what;
    EXPECT_GT(Num(l, "kernel_ms"), 0) << what;
    EXPECT_NEAR(Num(l, "total_ms"), Num(l, "index_build_ms") + Num(l, "kernel_ms"),
                1e-3 * Num(l, "total_ms") + 1e-5)
        << what;
    EXPECT_GT(Num(l, "tflops"), 0) << what;
    EXPECT_GT(Num(l, "pairs"), 0) << what;
    EXPECT_EQ(l.at("recall_rows"), "64");
    if (l.at("method") == "dense") {
      EXPECT_EQ(l.at("params"), "dense");
      EXPECT_DOUBLE_EQ(Num(l, "density"), 1.0) << what;
      EXPECT_NEAR(Num(l, "recall"), 1.0, 1e-5) << what;
      EXPECT_NEAR(Num(l, "recall_min"), 1.0, 1e-5) << what;
      // bf16 output rounding only.
      EXPECT_LT(Num(l, "rel_l2_error"), 0.01) << what;
    } else {
      EXPECT_EQ(l.at("params"), "a_shape(sink_tokens=16, local_tokens=64)");
      EXPECT_LT(Num(l, "density"), 0.5) << what;
      EXPECT_GT(Num(l, "density"), 0.2) << what;
      EXPECT_LT(Num(l, "recall"), 1.0) << what;
      EXPECT_LE(Num(l, "recall_min"), Num(l, "recall")) << what;
      if (l.at("group") == "sink_local") {
        EXPECT_GT(Num(l, "recall"), 0.8) << what;
      }
      if (l.at("group") == "retrieval") {
        EXPECT_LT(Num(l, "recall"), 0.8) << what;
      }
    }
  }
  EXPECT_EQ(per_method["dense"], 7);
  EXPECT_EQ(per_method["a_shape"], 7);
  EXPECT_EQ(r.lines.back().at("group"), "all");
  EXPECT_EQ(r.lines.back().at("heads"), "[0,1,2,3,4,5,6,7]");
}

TEST(BenchTest, FailingMethodGetsAnErrorLineAndTheRunGoesOn) {
  const BenchRun r = RunWith({"--seq_len=256", "--heads=2", "--kv_heads=1", "--group_by=all",
                         "--methods=block_sparse,dense", "--block_sparse.top_k=0",
                         "--recall_rows=16", "--threads=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 2u) << r.out;
  EXPECT_EQ(r.lines[0].at("method"), "block_sparse");
  ASSERT_EQ(r.lines[0].count("error"), 1u);
  EXPECT_TRUE(absl::StrContains(r.lines[0].at("error"), "block_sparse.top_k")) << r.out;
  EXPECT_EQ(r.lines[0].count("density"), 0u);
  EXPECT_EQ(r.lines[1].at("method"), "dense");
  EXPECT_EQ(r.lines[1].count("error"), 0u);
  EXPECT_DOUBLE_EQ(Num(r.lines[1], "density"), 1.0);
}

TEST(BenchTest, EveryMethodGetsALineAtSmallSize) {
  // Whatever is implemented runs; the rest says why not. Never a crash or a missing line.
  const BenchRun r = RunWith({"--seq_len=300", "--heads=2", "--kv_heads=1", "--head_dim=64",
                         "--group_by=all", "--recall_rows=16", "--threads=2", "--warmup=0",
                         "--repeat=1"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 8u) << r.out;
  for (const auto& l : r.lines) {
    if (l.count("error")) continue;
    EXPECT_GT(Num(l, "density"), 0) << l.at("method");
    EXPECT_LE(Num(l, "density"), 1.0) << l.at("method");
    EXPECT_GE(Num(l, "recall"), 0) << l.at("method");
    EXPECT_LE(Num(l, "recall"), 1.0 + 1e-6) << l.at("method");
  }
}

// Saap has no assets unless --calibrate makes them from a prefix of the workload.
TEST(BenchTest, CalibrateGivesSaapItsAssets) {
  const std::vector<std::string> base = {
      "--seq_len=1024", "--heads=2",          "--kv_heads=1",           "--head_dim=64",
      "--group_by=all", "--methods=saap",     "--saap.num_centroids=16", "--saap.top_l=2",
      "--saap.local_tokens=64", "--recall_rows=16", "--threads=2", "--warmup=0", "--repeat=1"};
  const BenchRun without = RunWith(base);
  ASSERT_EQ(without.code, 0) << without.err;
  ASSERT_EQ(without.lines.size(), 1u) << without.out;
  ASSERT_EQ(without.lines[0].count("error"), 1u) << without.out;
  EXPECT_TRUE(absl::StrContains(without.lines[0].at("error"), "no layer assets"));
  std::vector<std::string> with = base;
  for (const char* a : {"--calibrate", "--calibrate_len=512", "--calibrate_steps=5",
                        "--calibrate_hidden=32"}) {
    with.push_back(a);
  }
  const BenchRun r = RunWith(with);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 1u) << r.out;
  EXPECT_EQ(r.lines[0].count("error"), 0u) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "saap assets calibrated on 512 queries")) << r.err;
  EXPECT_GT(Num(r.lines[0], "density"), 0);
  EXPECT_LT(Num(r.lines[0], "density"), 1);
}

TEST(BenchTest, ChunkedPrefillAndBatch) {
  const BenchRun r = RunWith({"--seq_len=400", "--q_len=100", "--batch=2", "--heads=4",
                         "--kv_heads=1", "--methods=dense", "--group_by=all",
                         "--recall_rows=32", "--threads=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0].at("q_len"), "100");
  EXPECT_EQ(r.lines[0].at("batch"), "2");
  EXPECT_DOUBLE_EQ(Num(r.lines[0], "density"), 1.0);
  // Each of the 100 queries sees 301..400 keys, two sequences, four heads.
  EXPECT_EQ(Num(r.lines[0], "pairs"), 4.0 * 2 * (100 * 300 + 100 * 101 / 2));
}

TEST(BenchTest, TensorFilesGiveTheSameNumbersAsTheWorkloadTheyCameFrom) {
  const std::string path = TmpPath("bench_qkv.safetensors");
  const std::vector<std::string> common = {"--methods=dense,a_shape", "--a_shape.local_tokens=32",
                                           "--a_shape.sink_tokens=4", "--group_by=all",
                                           "--recall_rows=32", "--threads=2"};
  std::vector<std::string> a = {"--seq_len=256", "--heads=4", "--kv_heads=2",
                                "--dump=" + path};
  a.insert(a.end(), common.begin(), common.end());
  const BenchRun synth = RunWith(a);
  ASSERT_EQ(synth.code, 0) << synth.err;
  std::vector<std::string> b = {"--q=" + path + ":q", "--k=" + path + ":k",
                                "--v=" + path + ":v"};
  b.insert(b.end(), common.begin(), common.end());
  const BenchRun files = RunWith(b);
  ASSERT_EQ(files.code, 0) << files.err;
  ASSERT_EQ(synth.lines.size(), 2u);
  ASSERT_EQ(files.lines.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(files.lines[i].at("workload"), "files");
    for (const char* key : {"density", "recall", "recall_min", "rel_l2_error", "pairs"}) {
      EXPECT_EQ(synth.lines[i].at(key), files.lines[i].at(key)) << key;
    }
  }
  // Missing files fail to start.
  const BenchRun missing = RunWith({"--q=" + TmpPath("nope.npy"), "--k=" + TmpPath("nope.npy"),
                               "--v=" + TmpPath("nope.npy")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(absl::StrContains(missing.err, "nope.npy")) << missing.err;
}

TEST(BenchTest, TableModePrintsMarkdown) {
  const BenchRun r = RunWith({"--seq_len=256", "--heads=2", "--kv_heads=1", "--group_by=all",
                         "--methods=dense,a_shape", "--a_shape.local_tokens=32", "--table",
                         "--recall_rows=16", "--threads=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "| method | group | density | recall (mean / min) |"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "| dense | all | 1.000 | 1.000 / 1.000 |")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "| a_shape | all | 0.")) << r.out;
}

TEST(BenchTest, BadFlagsAreRefusedWithTheirName) {
  struct Bad {
    std::vector<std::string> args;
    int code;
    const char* needle;
  };
  std::vector<Bad> bad = {
      {{"--sequence=5"}, 2, "unknown flag --sequence"},
      {{"--methods=dense,nope"}, 2, "unknown 'nope'"},
      {{"--vertical_slash.nope=1"}, 2, "known: last_q, vertical_size"},
      {{"--flex_prefill.gamma=abc"}, 2, "flex_prefill.gamma: not a number"},
      {{"--seq_len=abc"}, 2, "--seq_len: not an integer"},
      {{"--q=a.npy"}, 2, "--q, --k and --v"},
      {{"--q_len=9", "--seq_len=8"}, 2, "--q_len"},
      {{"--dtype=int8"}, 2, "dtype"},
      {{"--workload=nope", "--seq_len=64"}, 2, "unknown head kind 'nope'"},
      {{"--device=tpu", "--seq_len=64"}, 1, "unknown 'tpu'"},
      {{"--seq_len"}, 2, "needs a value"},
      {{"--calibrate_len=0"}, 2, "--calibrate_len"},
      {{"--calibrate_steps=-1"}, 2, "--calibrate_steps"},
  };
  if (ListCudaDevices().empty()) {  // with a GPU, --device=cuda runs
    bad.push_back({{"--device=cuda", "--seq_len=64"}, 1, "device cuda"});
  }
  for (const Bad& b : bad) {
    const BenchRun r = RunWith(b.args);
    EXPECT_EQ(r.code, b.code) << absl::StrJoin(b.args, " ") << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, b.needle)) << absl::StrJoin(b.args, " ") << ": "
                                                    << r.err;
    EXPECT_TRUE(r.lines.empty());
  }
}

TEST(BenchTest, HelpExplainsEveryFlag) {
  const BenchRun r = RunWith({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--workload", "--seq_len", "--q_len", "--batch", "--heads", "--kv_heads", "--head_dim",
        "--dtype", "--causal", "--rope_theta", "--concentration", "--seed", "--dump", "--q=",
        "--layout", "--methods", "--METHOD.PARAM", "--param", "--block_m", "--device",
        "--warmup", "--repeat", "--recall_rows", "--threads", "--group_by", "--table",
        "--help"}) {
    EXPECT_TRUE(absl::StrContains(r.out, flag)) << flag;
  }
}

TEST(BenchTest, SetMethodParamCoversIntsAndFloats) {
  MethodConfig c;
  ASSERT_TRUE(SetMethodParam("vertical_slash.last_q", "32", &c).ok());
  EXPECT_EQ(c.vertical_slash.last_q, 32);
  ASSERT_TRUE(SetMethodParam("anchor.theta", "9.5", &c).ok());
  EXPECT_FLOAT_EQ(c.anchor.theta, 9.5f);
  ASSERT_TRUE(SetMethodParam("sample_attention.alpha_c", "0.9", &c).ok());
  EXPECT_FLOAT_EQ(c.sample_attention.alpha_c, 0.9f);
  ASSERT_TRUE(SetMethodParam("flex_prefill.flatten", "false", &c).ok());
  EXPECT_FALSE(c.flex_prefill.flatten);
  EXPECT_EQ(SetMethodParam("flex_prefill.flatten", "2", &c).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetMethodParam("dense.x", "1", &c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetMethodParam("nodot", "1", &c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetMethodParam("block_sparse.top_k", "1.5", &c).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
