#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/builders/build_index.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/fidelity.h"
#include "kernels/workload/workload.h"
#include "server/recall_guard.h"
#include "tests/bench/backend.h"
#include "tests/bench/bench_lib.h"

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
  const std::vector<std::string> args = {"--seq_len=512",
                                         "--methods=dense,a_shape",
                                         "--a_shape.sink_tokens=16",
                                         "--param",
                                         "a_shape.local_tokens=64",
                                         "--threads=2",
                                         "--recall_rows=64",
                                         "--warmup=0",
                                         "--repeat=2"};
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
  const BenchRun r =
      RunWith({"--seq_len=300", "--heads=2", "--kv_heads=1", "--head_dim=64", "--group_by=all",
               "--recall_rows=16", "--threads=2", "--warmup=0", "--repeat=1"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 9u) << r.out;  // every method of kAllMethods
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
  const std::vector<std::string> base = {"--seq_len=1024",
                                         "--heads=2",
                                         "--kv_heads=1",
                                         "--head_dim=64",
                                         "--group_by=all",
                                         "--methods=saap",
                                         "--saap.num_centroids=16",
                                         "--saap.top_l=2",
                                         "--saap.local_tokens=64",
                                         "--recall_rows=16",
                                         "--threads=2",
                                         "--warmup=0",
                                         "--repeat=1"};
  const BenchRun without = RunWith(base);
  ASSERT_EQ(without.code, 0) << without.err;
  ASSERT_EQ(without.lines.size(), 1u) << without.out;
  ASSERT_EQ(without.lines[0].count("error"), 1u) << without.out;
  EXPECT_TRUE(absl::StrContains(without.lines[0].at("error"), "no layer assets"));
  std::vector<std::string> with = base;
  for (const char* a :
       {"--calibrate", "--calibrate_len=512", "--calibrate_steps=5", "--calibrate_hidden=32"}) {
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
  const BenchRun r =
      RunWith({"--seq_len=400", "--q_len=100", "--batch=2", "--heads=4", "--kv_heads=1",
               "--methods=dense", "--group_by=all", "--recall_rows=32", "--threads=2"});
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
                                           "--recall_rows=32",        "--threads=2"};
  std::vector<std::string> a = {"--seq_len=256", "--heads=4", "--kv_heads=2", "--dump=" + path};
  a.insert(a.end(), common.begin(), common.end());
  const BenchRun synth = RunWith(a);
  ASSERT_EQ(synth.code, 0) << synth.err;
  std::vector<std::string> b = {"--q=" + path + ":q", "--k=" + path + ":k", "--v=" + path + ":v"};
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
  // searched needs another prompt of the same model: captured tensors have none.
  std::vector<std::string> c = b;
  c.push_back("--methods=searched");
  const BenchRun searched = RunWith(c);
  ASSERT_EQ(searched.code, 0) << searched.err;
  ASSERT_EQ(searched.lines.size(), 1u) << searched.out;
  ASSERT_EQ(searched.lines[0].count("error"), 1u) << searched.out;
  EXPECT_TRUE(absl::StrContains(searched.lines[0].at("error"), "synthetic workload"))
      << searched.out;
  // Missing files fail to start.
  const BenchRun missing = RunWith(
      {"--q=" + TmpPath("nope.npy"), "--k=" + TmpPath("nope.npy"), "--v=" + TmpPath("nope.npy")});
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
      {{"--methods=searched,nope"}, 2, "unknown 'nope'"},
      {{"--search_target_recall=0"}, 2, "--search_target_recall"},
      {{"--search_target_recall=1.5"}, 2, "--search_target_recall"},
      {{"--search_len=-1"}, 2, "--search_len"},
      {{"--search_sampled_lines_margin=-0.01"}, 2, "--search_sampled_lines_margin"},
      {{"--search_sampled_lines_margin=nan"}, 2, "--search_sampled_lines_margin"},
      {{"--search_sampled_lines_margin=inf"}, 2, "--search_sampled_lines_margin"},
      {{"--search_sampled_lines_margin=x"}, 2, "--search_sampled_lines_margin: not a number"},
      {{"--promise_min_len=-1"}, 2, "--promise_min_len"},
      {{"--search_candidates=a_shape,nope"}, 2, "--search_candidates"},
      {{"--search_candidates=autox"}, 2, "--search_candidates: candidates: unknown method 'autox'"},
      {{"--search_candidates=auto", "--search_sampled_lines_margin=0.01"},
       2,
       "--search_sampled_lines_margin: not with --search_candidates=auto"},
      {{"--search_candidates=auto", "--search_sampled_lines_margin=0"},
       2,
       "--search_sampled_lines_margin: not with --search_candidates=auto"},
      {{"--search_candidates=auto", "--search_auto_max_len=0"},
       2,
       "--search_auto_max_len must be >= 1"},
      {{"--search_candidates=auto", "--search_auto_max_len=x"}, 2, "--search_auto_max_len"},
      {{"--search_candidates=all", "--search_auto_max_len=1024"},
       2,
       "--search_auto_max_len: only with --search_candidates=auto"},
      {{"--search_sampled_lines_margin=0.01"},
       2,
       "--search_sampled_lines_margin: not with --search_candidates=auto (the default)"},
      {{"--guard_adaptive=auto,flex_prefill"},
       2,
       "--guard_adaptive: recall guard: 'auto' picks the adaptive tries per head"},
      {{"--guard_adaptive=sampled_lines,flex_prefill,none"},
       2,
       "--guard_adaptive: recall guard: at most two adaptive methods"},
      {{"--guard_adaptive=anchor"}, 2, "--guard_adaptive: recall guard: adaptive method 'anchor'"},
      {{"--gpu_workspace_bytes=-1"}, 2, "--gpu_workspace_bytes: -1 is negative"},
      {{"--gpu_workspace_bytes=8G"}, 2, "--gpu_workspace_bytes: not an integer"},
      {{"--block_m=0"}, 2, "--block_m must be > 0"},
      {{"--sampled_lines_block_m=-16"}, 2, "--sampled_lines_block_m must be >= 0"},
  };
  if (ListCudaDevices().empty()) {  // with a GPU, --device=cuda runs
    bad.push_back({{"--device=cuda", "--seq_len=64"}, 1, "device cuda"});
  }
  for (const Bad& b : bad) {
    const BenchRun r = RunWith(b.args);
    EXPECT_EQ(r.code, b.code) << absl::StrJoin(b.args, " ") << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, b.needle)) << absl::StrJoin(b.args, " ") << ": " << r.err;
    EXPECT_TRUE(r.lines.empty());
  }
}

TEST(BenchTest, HelpExplainsEveryFlag) {
  const BenchRun r = RunWith({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--workload",
                           "--seq_len",
                           "--q_len",
                           "--batch",
                           "--heads",
                           "--kv_heads",
                           "--head_dim",
                           "--dtype",
                           "--causal",
                           "--rope_theta",
                           "--concentration",
                           "--seed",
                           "--dump",
                           "--q=",
                           "--layout",
                           "--methods",
                           "--METHOD.PARAM",
                           "--param",
                           "--block_m",
                           "--sampled_lines_block_m",
                           "--device",
                           "--gpu_workspace_bytes",
                           "--warmup",
                           "--repeat",
                           "--recall_rows",
                           "--threads",
                           "--group_by",
                           "--table",
                           "--help",
                           "searched",
                           "--search_len",
                           "--search_target_recall",
                           "--search_candidates",
                           "--search_sampled_lines_margin",
                           "--search_auto_max_len",
                           "promise",
                           "--promise_min_len",
                           "--promise_max_len",
                           "--promise_targets",
                           "--guard_probe_rows",
                           "--guard_adaptive=A",
                           "(default, the worker's: per head by its searched method"}) {
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

// "method:count,..." -> total count.
int ChoiceCount(const std::string& choices) {
  int n = 0;
  for (absl::string_view part : absl::StrSplit(choices, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, ':');
    int c = 0;
    EXPECT_TRUE(absl::SimpleAtoi(kv.second, &c)) << choices;
    n += c;
  }
  return n;
}

TEST(BenchTest, SearchedRunsEveryHeadWithTheConfigTheSearchChose) {
  const std::vector<std::string> base = {
      "--seq_len=1024",    "--heads=8",        "--kv_heads=2", "--methods=dense,searched",
      "--search_len=1024", "--recall_rows=64", "--threads=2",  "--warmup=0",
      "--repeat=1",        "--search_candidates=all"};
  for (const char* group_by : {"--group_by=all", "--group_by=kind"}) {
    std::vector<std::string> args = base;
    args.push_back(group_by);
    const BenchRun r = RunWith(args);
    ASSERT_EQ(r.code, 0) << group_by << ": " << r.err;
    // all: dense + searched; kind: 6 kinds + all, for each.
    const size_t per_method = std::string(group_by) == "--group_by=all" ? 1 : 7;
    ASSERT_EQ(r.lines.size(), 2 * per_method) << r.out;
    // Every default candidate (27 since session 22 added sampled_lines at gamma 0.99).
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("searched ", DefaultCandidates().size(),
                                                      " candidates on a 1024-token prompt")))
        << r.err;
    for (int h = 0; h < 8; ++h) {
      EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("searched head ", h, " ("))) << r.err;
    }
    double dense_all_error = -1;
    for (size_t i = 0; i < r.lines.size(); ++i) {
      const auto& l = r.lines[i];
      const std::string what = absl::StrCat(group_by, " ", l.at("method"), "/", l.at("group"));
      ASSERT_EQ(l.count("error"), 0u) << what << ": " << l.at("error");
      EXPECT_GT(Num(l, "kernel_ms"), 0) << what;
      EXPECT_GE(Num(l, "index_build_ms"), 0) << what;
      EXPECT_GT(Num(l, "pairs"), 0) << what;
      if (l.at("method") == "dense") {
        EXPECT_EQ(l.count("choices"), 0u) << what;
        if (l.at("group") == "all") dense_all_error = Num(l, "rel_l2_error");
        continue;
      }
      EXPECT_EQ(l.at("params"), "searched(target=0.95, search_len=1024)") << what;
      ASSERT_EQ(l.count("choices"), 1u) << what;
      EXPECT_EQ(ChoiceCount(l.at("choices")),
                static_cast<int>(std::count(l.at("heads").begin(), l.at("heads").end(), ',')) + 1)
          << what << ": " << l.at("choices");
      EXPECT_LT(Num(l, "density"), 1.0) << what;
      EXPECT_GT(Num(l, "density"), 0.0) << what;
      if (l.at("group") == "all") {
        EXPECT_EQ(l.at("heads"), "[0,1,2,3,4,5,6,7]");
        EXPECT_EQ(ChoiceCount(l.at("choices")), 8) << l.at("choices");
        // Chosen at recall 0.95 on another prompt: the benchmark prompt keeps close to it.
        EXPECT_GE(Num(l, "recall"), 0.95 - 0.05) << what;
        // Sparse: worse than dense's bf16 rounding, far from useless.
        EXPECT_GT(Num(l, "rel_l2_error"), dense_all_error) << what;
        EXPECT_LT(Num(l, "rel_l2_error"), 0.5) << what;
        EXPECT_EQ(i, r.lines.size() - 1);
      }
    }
  }
}

// Issue 11's promise check at CPU size: configs searched on a 512-token prompt, served through
// the recall guard (on the host) on held-out prompts of 128 .. 4096 tokens; a line per (target,
// length) and a summary per target. The promise itself is asserted by recall_guard_test; here
// the lines and their bookkeeping.
TEST(BenchTest, PromiseLinesPerTargetAndLength) {
  const BenchRun r = RunWith({"--seq_len=512", "--heads=4", "--kv_heads=2", "--head_dim=64",
                              "--methods=promise", "--search_len=512", "--promise_targets=0.9",
                              "--promise_search_rows=64", "--threads=2"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 7u) << r.out;  // 6 lengths + the summary
  int kept = 0;
  for (size_t i = 0; i < 6; ++i) {
    const auto& l = r.lines[i];
    ASSERT_EQ(l.count("error"), 0u) << l.at("error");
    EXPECT_EQ(l.at("method"), "promise");
    EXPECT_EQ(Num(l, "calib_len"), 512);
    EXPECT_EQ(Num(l, "seq_len"), std::max(128.0, 512 * Num(l, "factor")));
    EXPECT_EQ(l.at("guard"), "host");
    EXPECT_GT(Num(l, "recall_mean"), 0.8);
    EXPECT_LE(Num(l, "recall_min"), Num(l, "recall_mean"));
    EXPECT_GT(Num(l, "density"), 0);
    const bool k = Num(l, "recall_mean") >= 0.9 && Num(l, "heads_within_0_02") >= 0.95 * 4;
    EXPECT_EQ(l.at("kept"), k ? "true" : "false");
    kept += k;
  }
  const auto& sum = r.lines[6];
  EXPECT_EQ(sum.at("summary"), "true");
  EXPECT_EQ(Num(sum, "lengths"), 6);
  EXPECT_EQ(Num(sum, "lengths_kept"), kept);
  EXPECT_EQ(Num(sum, "heads"), 24);
}

// --search_sampled_lines_margin: the search (of searched, guarded and promise) tries
// sampled_lines at gamma >= SampledLinesGammaFor(target, margin) only (0.96 at 0.95 + 0.01);
// --promise_min_len skips the shorter held-out prompts.
TEST(BenchTest, SearchSampledLinesMarginRaisesTheSearchedGamma) {
  const std::vector<std::string> common = {"--heads=4",       "--kv_heads=2",     "--head_dim=64",
                                           "--threads=2",     "--group_by=all",   "--recall_rows=64",
                                           "--search_candidates=sampled_lines"};
  // At 2048 tokens the search picks sampled_lines on every head: 0.95 on three without the
  // margin, 0.96 on the same three with it.
  for (const bool margin : {false, true}) {
    std::vector<std::string> args = common;
    args.push_back("--seq_len=2048");
    args.push_back("--methods=searched");
    if (margin) args.push_back("--search_sampled_lines_margin=0.01");
    const BenchRun r = RunWith(args);
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(r.lines.size(), 1u) << r.out;
    EXPECT_EQ(r.lines[0].at("params"),
              margin ? "searched(target=0.95, search_len=2048, sampled_lines_margin=0.01)"
                     : "searched(target=0.95, search_len=2048)");
    EXPECT_TRUE(absl::StrContains(r.err, "searched 5 candidates")) << r.err;
    int sl = 0, below = 0;
    for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
      if (!absl::StrContains(line, "searched head ")) continue;
      below += absl::StrContains(line, "gamma=0.85)") || absl::StrContains(line, "gamma=0.9)") ||
               absl::StrContains(line, "gamma=0.95)");
      sl += absl::StrContains(line, "sampled_lines(gamma=");
    }
    EXPECT_GT(sl, 0) << r.err;
    if (margin) {
      EXPECT_EQ(below, 0) << r.err;
      EXPECT_TRUE(absl::StrContains(r.err, "sampled_lines(gamma=0.96)")) << r.err;
    } else {
      EXPECT_GT(below, 0) << r.err;
      EXPECT_FALSE(absl::StrContains(r.err, "sampled_lines(gamma=0.96)")) << r.err;
    }
  }

  std::vector<std::string> args = common;
  args.push_back("--seq_len=512");
  args.insert(args.end(), {"--methods=promise", "--search_len=512", "--promise_targets=0.9",
                           "--promise_search_rows=64", "--promise_min_len=1024",
                           "--promise_max_len=2048", "--search_sampled_lines_margin=0.01"});
  const BenchRun p = RunWith(args);
  ASSERT_EQ(p.code, 0) << p.err;
  ASSERT_EQ(p.lines.size(), 3u) << p.out;  // 1024, 2048 + the summary
  EXPECT_EQ(Num(p.lines[0], "seq_len"), 1024);
  EXPECT_EQ(Num(p.lines[1], "seq_len"), 2048);
  EXPECT_EQ(Num(p.lines[2], "lengths"), 2);
}

// The "auto" margin is the worker's guard's (kernels/calibration cannot see server/).
TEST(BenchTest, AutoCandidatesSearchAtTheGuardsMargin) {
  EXPECT_EQ(kAutoSampledLinesMargin, RecallGuardOptions().margin);
  // And --search_auto_max_len's default is the rule's boundary (bench_lib.h spells it out).
  EXPECT_EQ(BenchFlags().search_auto_max_len, kAutoSampledLinesMaxTokens);
}

// The searched configs' lines ("searched head ...") of a run's stderr.
std::vector<std::string> SearchedHeads(const std::string& err) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (absl::StrContains(line, "searched head ")) out.emplace_back(line);
  }
  return out;
}

// --search_candidates=auto (the default) follows the served --seq_len, not the (shorter)
// search prompt: at 4096 tokens served (search on 2048) the default boundary (128K) gives the
// sampled_lines-only search at margin 0.01, --search_auto_max_len=2048 (the search prompt's
// length) the search over all candidates; each run's searched configs equal the run with those
// flags given by hand, and the run without the flag equals auto's.
TEST(BenchTest, SearchCandidatesAutoFollowsTheServedLength) {
  const std::vector<std::string> common = {
      "--heads=4",        "--kv_heads=2",      "--head_dim=64",      "--threads=2",
      "--group_by=all",   "--recall_rows=64",  "--seq_len=4096",     "--search_len=2048",
      "--methods=searched"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return RunWith(args);
  };
  const BenchRun sl_auto = run({"--search_candidates=auto"});
  const BenchRun sl_hand =
      run({"--search_candidates=sampled_lines", "--search_sampled_lines_margin=0.01"});
  const BenchRun all_auto = run({"--search_candidates=auto", "--search_auto_max_len=2048"});
  const BenchRun all_hand = run({"--search_candidates=all"});
  const BenchRun dflt = run({});
  for (const BenchRun* r : {&sl_auto, &sl_hand, &all_auto, &all_hand, &dflt}) {
    ASSERT_EQ(r->code, 0) << r->err;
    ASSERT_EQ(r->lines.size(), 1u) << r->out;
  }
  EXPECT_EQ(sl_auto.lines[0].at("params"),
            "searched(target=0.95, search_len=2048, sampled_lines_margin=0.01, "
            "candidates=auto:sampled_lines)");
  EXPECT_EQ(all_auto.lines[0].at("params"),
            "searched(target=0.95, search_len=2048, candidates=auto:all)");
  EXPECT_TRUE(absl::StrContains(sl_auto.err, "searched 5 candidates")) << sl_auto.err;
  EXPECT_TRUE(absl::StrContains(all_auto.err,
                                absl::StrCat("searched ", DefaultCandidates().size(), " candidates")))
      << all_auto.err;
  EXPECT_EQ(SearchedHeads(sl_auto.err), SearchedHeads(sl_hand.err));
  EXPECT_EQ(SearchedHeads(dflt.err), SearchedHeads(sl_auto.err));
  EXPECT_EQ(dflt.lines[0].at("params"), sl_auto.lines[0].at("params"));
  EXPECT_EQ(SearchedHeads(all_auto.err), SearchedHeads(all_hand.err));
  EXPECT_EQ(SearchedHeads(sl_auto.err).size(), 4u);
  int sl = 0;
  for (const std::string& line : SearchedHeads(sl_auto.err)) {
    sl += absl::StrContains(line, "sampled_lines(gamma=");
    EXPECT_TRUE(absl::StrContains(line, "sampled_lines(gamma=") ||
                absl::StrContains(line, "): dense,"))
        << line;
  }
  EXPECT_GT(sl, 0) << sl_auto.err;
  EXPECT_NE(SearchedHeads(sl_auto.err), SearchedHeads(all_auto.err));
  for (const char* key : {"recall", "density", "pairs"}) {
    EXPECT_EQ(sl_auto.lines[0].at(key), sl_hand.lines[0].at(key)) << key;
    EXPECT_EQ(all_auto.lines[0].at(key), all_hand.lines[0].at(key)) << key;
    EXPECT_EQ(dflt.lines[0].at(key), sl_auto.lines[0].at(key)) << key;
  }
}

// The default guard (--guard_adaptive=auto, the worker's) on the default search's configs
// (sampled_lines alone up to 128K): a sampled_lines head tries flex_prefill besides its own
// ladder (the sampled_lines try is its own method), so on the host guard (no learned configs)
// the guarded line equals both guarded_sl's flags (--search_candidates=sampled_lines
// --search_sampled_lines_margin=0.01 --guard_adaptive=sampled_lines,flex_prefill) and
// --guard_adaptive=flex_prefill (the default before session 27) on the same configs.
TEST(BenchTest, DefaultGuardedLineIsGuardedSl) {
  const std::vector<std::string> common = {
      "--heads=4",       "--kv_heads=2",     "--head_dim=64",     "--threads=2",
      "--group_by=all",  "--recall_rows=64", "--seq_len=2048",    "--search_len=1024",
      "--methods=guarded", "--warmup=0",     "--repeat=1"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return RunWith(args);
  };
  const BenchRun dflt = run({});
  const BenchRun sl = run({"--search_candidates=sampled_lines", "--search_sampled_lines_margin=0.01",
                           "--guard_adaptive=sampled_lines,flex_prefill"});
  const BenchRun fp = run({"--guard_adaptive=flex_prefill"});
  for (const BenchRun* r : {&dflt, &sl, &fp}) {
    ASSERT_EQ(r->code, 0) << r->err;
    ASSERT_EQ(r->lines.size(), 1u) << r->out;
    ASSERT_EQ(r->lines[0].count("error"), 0u) << r->out;
  }
  EXPECT_TRUE(absl::StrContains(dflt.lines[0].at("params"), "candidates=auto:sampled_lines"))
      << dflt.lines[0].at("params");
  for (const char* key : {"choices", "recall", "density", "pairs"}) {
    EXPECT_EQ(dflt.lines[0].at(key), sl.lines[0].at(key)) << key;
    EXPECT_EQ(dflt.lines[0].at(key), fp.lines[0].at(key)) << key;
  }
}

// The promise with --search_candidates=auto serves each held-out length from the search its
// length picks: 1024 from the sampled_lines-only search (<= --search_auto_max_len), 2048 from
// the default search; each line names it.
TEST(BenchTest, PromiseWithAutoCandidatesSearchesPerLength) {
  const BenchRun p = RunWith({"--heads=4", "--kv_heads=2", "--head_dim=64", "--threads=2",
                              "--group_by=all", "--seq_len=512", "--methods=promise",
                              "--search_len=512", "--promise_targets=0.9",
                              "--promise_search_rows=64", "--promise_min_len=1024",
                              "--promise_max_len=2048", "--search_candidates=auto",
                              "--search_auto_max_len=1024"});
  ASSERT_EQ(p.code, 0) << p.err;
  ASSERT_EQ(p.lines.size(), 3u) << p.out;  // 1024, 2048 + the summary
  EXPECT_EQ(Num(p.lines[0], "seq_len"), 1024);
  EXPECT_EQ(p.lines[0].at("candidates"), "auto: sampled_lines (sampled_lines_margin 0.01)");
  EXPECT_EQ(Num(p.lines[1], "seq_len"), 2048);
  EXPECT_EQ(p.lines[1].at("candidates"), "auto: all");
  EXPECT_EQ(Num(p.lines[2], "lengths"), 2);
  EXPECT_TRUE(absl::StrContains(
      p.err, "searched target 0.9 on 512 tokens in "))
      << p.err;
  EXPECT_TRUE(absl::StrContains(p.err, "(auto: sampled_lines (sampled_lines_margin 0.01))"))
      << p.err;
  EXPECT_TRUE(absl::StrContains(p.err, "(auto: all)")) << p.err;

  // Without auto: one search, named by what was given.
  const BenchRun given = RunWith({"--heads=4", "--kv_heads=2", "--head_dim=64", "--threads=2",
                                  "--group_by=all", "--seq_len=512", "--methods=promise",
                                  "--search_len=512", "--promise_targets=0.9",
                                  "--promise_search_rows=64", "--promise_min_len=1024",
                                  "--promise_max_len=1024",
                                  "--search_candidates=sampled_lines",
                                  "--search_sampled_lines_margin=0.01"});
  ASSERT_EQ(given.code, 0) << given.err;
  ASSERT_EQ(given.lines.size(), 2u) << given.out;
  EXPECT_EQ(given.lines[0].at("candidates"), "sampled_lines (sampled_lines_margin 0.01)");
  // The same search and served configs as auto's 1024 line.
  for (const char* key : {"recall_mean", "recall_min", "density", "heads_within_0_02"}) {
    EXPECT_EQ(given.lines[0].at(key), p.lines[0].at(key)) << key;
  }
}

// The oracle line is read at the granularity of the run's query blocks: --block_m=128 gives
// 128-row query blocks and 128x128 tiles. On this fixed prompt both coarser oracles come out
// denser (one key set per 128 rows must serve rows that two 64-row sets served separately).
TEST(BenchTest, OracleFollowsBlockM) {
  std::map<int, std::map<std::string, std::string>> line;
  for (int block_m : {64, 128}) {
    const BenchRun r = RunWith({"--seq_len=2048", "--heads=4", "--kv_heads=2", "--head_dim=64",
                                "--threads=2", "--methods=oracle", "--group_by=all",
                                "--recall_rows=128", absl::StrCat("--block_m=", block_m)});
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(r.lines.size(), 1u) << r.out;
    line[block_m] = r.lines[0];
    EXPECT_EQ(Num(line[block_m], "block"), block_m);
  }
  EXPECT_GT(Num(line[128], "column_density"), Num(line[64], "column_density"));
  EXPECT_GT(Num(line[128], "block_density"), Num(line[64], "block_density"));
}

// sampled_lines is built on the worker's own block size for it (--sampled_lines_block_m, default
// 128, as spattn-worker's), not on --block_m, unless told 0; every line says the block rows of
// its indexes, and the other methods keep --block_m.
TEST(BenchTest, SampledLinesBuildsOnItsOwnBlockRows) {
  for (const char* own : {"", "--sampled_lines_block_m=0", "--sampled_lines_block_m=256"}) {
    std::vector<std::string> args = {"--seq_len=1024", "--heads=2",
                                     "--kv_heads=1",   "--head_dim=64",
                                     "--threads=2",    "--methods=sampled_lines,a_shape",
                                     "--group_by=all", "--recall_rows=32"};
    if (*own != 0) args.push_back(own);
    const BenchRun r = RunWith(args);
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(r.lines.size(), 2u) << r.out;
    const std::string want = *own == 0 ? "128" : (std::string(own).back() == '0' ? "64" : "256");
    EXPECT_EQ(r.lines[0].at("method"), "sampled_lines");
    EXPECT_EQ(r.lines[0].at("block_m"), want) << own;
    EXPECT_EQ(r.lines[1].at("block_m"), "64") << own;
  }
}

// Fixture data for the plan tests: the bench's llm_mix problem (model and prompt seed 0) and the
// search's choices on prompt 1000 of that model, as RunBench makes them.
struct SearchedPlan {
  std::unique_ptr<Workload> bench;
  std::vector<MethodConfig> config_of_head;
};

SearchedPlan MakeSearchedPlan() {
  SearchedPlan out;
  WorkloadOptions o;
  o.shape.q_lens = {1024};
  o.shape.k_lens = {1024};
  o.shape.num_q_heads = 8;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 128;
  auto w = GenerateWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status();
  out.bench = std::make_unique<Workload>(std::move(*w));
  WorkloadOptions c = o;
  c.seed = 1000;
  c.model_seed = 0;
  auto calib = GenerateWorkload(c);
  EXPECT_TRUE(calib.ok()) << calib.status();
  PatternSearchOptions so;
  so.sample_rows = 64;
  auto result = SearchHeadPatterns({&calib->problem()}, DefaultCandidates(), so);
  EXPECT_TRUE(result.ok()) << result.status();
  out.config_of_head.resize(8);
  for (const HeadSearchResult& h : result->heads) out.config_of_head[h.head] = h.chosen.config;
  return out;
}

TEST(BenchTest, GroupHeadsByConfigGroupsIdenticalConfigsInHeadOrder) {
  std::vector<MethodConfig> configs(5);
  configs[0].method = Method::kAShape;
  configs[1].method = Method::kDense;
  configs[2].method = Method::kAShape;
  configs[3].method = Method::kAShape;
  configs[3].a_shape.local_tokens = 7;  // another parameter: another group
  configs[4].method = Method::kDense;
  const std::vector<ConfigGroup> g = GroupHeadsByConfig({4, 3, 2, 1, 0}, configs);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].config.method, Method::kAShape);
  EXPECT_EQ(g[0].heads, (std::vector<int>{0, 2}));
  EXPECT_EQ(g[1].config.method, Method::kDense);
  EXPECT_EQ(g[1].heads, (std::vector<int>{1, 4}));
  EXPECT_EQ(g[2].config.a_shape.local_tokens, 7);
  EXPECT_EQ(g[2].heads, (std::vector<int>{3}));
  // A subset of the heads (a kind) keeps only its heads.
  const std::vector<ConfigGroup> sub = GroupHeadsByConfig({3, 4}, configs);
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[0].heads, (std::vector<int>{3}));
  EXPECT_EQ(sub[1].heads, (std::vector<int>{4}));
}

// Issue 11 item 5: sampled_lines heads of different gammas group as the worker's planner groups
// them (one build, each head's gamma in head_configs), and that build writes exactly the output of
// running each head's config alone.
TEST(BenchTest, SampledLinesHeadsOfDifferentGammasShareOneGroup) {
  SearchedPlan plan = MakeSearchedPlan();
  AttentionProblem& p = plan.bench->problem();
  std::vector<MethodConfig> configs(8);
  const float gammas[] = {0.95f, 0.9646f, 0.5f, 0.975f, 0.95f, 0.7f, 0.9823f, 0.95f};
  for (int h = 0; h < 8; ++h) {
    configs[h].method = Method::kSampledLines;
    configs[h].sampled_lines.gamma = gammas[h];
  }
  configs[7].sampled_lines.diagonal_floor = 5.f;  // another parameter: its own group
  std::vector<int> heads(8);
  for (int h = 0; h < 8; ++h) heads[h] = h;
  const std::vector<ConfigGroup> groups = GroupHeadsByConfig(heads, configs);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].heads, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(groups[0].head_configs.size(), 7u);
  for (int k = 0; k < 7; ++k) EXPECT_EQ(groups[0].head_configs[k].sampled_lines.gamma, gammas[k]);
  EXPECT_EQ(groups[1].heads, (std::vector<int>{7}));
  std::vector<ConfigGroup> alone;
  for (int h : heads) alone.push_back({configs[h], {h}});

  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->Prepare(&p).ok());
  BuildOptions bo;
  bo.sampled_lines_block_m = 128;
  std::vector<uint8_t>& o = plan.bench->host->o_bytes();
  std::fill(o.begin(), o.end(), 0);
  auto grouped = RunConfigGroups(backend->get(), p, groups, bo, /*validate=*/true, /*fetch=*/true);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  const std::vector<uint8_t> grouped_o = o;
  std::fill(o.begin(), o.end(), 0);
  auto single = RunConfigGroups(backend->get(), p, alone, bo, true, true);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_TRUE(grouped_o == o) << "outputs differ between grouped and per-head runs";
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(ComputedPairs(p, grouped->indexes[0], k), ComputedPairs(p, single->indexes[k], 0))
        << "head " << k;
  }
}

// The per-group path (one build and one kernel per config, as served) writes exactly the output
// of running each head's config alone.
TEST(BenchTest, ConfigGroupsGiveTheSameOutputAsEachHeadAlone) {
  SearchedPlan plan = MakeSearchedPlan();
  AttentionProblem& p = plan.bench->problem();
  std::vector<int> heads(8);
  for (int h = 0; h < 8; ++h) heads[h] = h;
  const std::vector<ConfigGroup> groups = GroupHeadsByConfig(heads, plan.config_of_head);
  ASSERT_LT(groups.size(), 8u) << "no two heads share a config: nothing grouped";
  ASSERT_GT(groups.size(), 1u);
  std::vector<ConfigGroup> alone;
  for (int h : heads) alone.push_back({plan.config_of_head[h], {h}});

  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->Prepare(&p).ok());
  ExactRowSample::Options eo;
  eo.sample_rows = 64;
  auto exact = ExactRowSample::Compute(p, heads, eo);
  ASSERT_TRUE(exact.ok()) << exact.status();
  BuildOptions bo;
  std::vector<uint8_t>& o = plan.bench->host->o_bytes();

  std::fill(o.begin(), o.end(), 0);
  auto grouped = RunConfigGroups(backend->get(), p, groups, bo, /*validate=*/true,
                                 /*fetch=*/true);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  ASSERT_EQ(grouped->indexes.size(), groups.size());
  EXPECT_GT(grouped->kernel_ms, 0);
  const std::vector<uint8_t> grouped_o = o;
  auto grouped_error = (*exact)->OutputError(p, heads);
  ASSERT_TRUE(grouped_error.ok());

  std::fill(o.begin(), o.end(), 0);
  auto single = RunConfigGroups(backend->get(), p, alone, bo, true, true);
  ASSERT_TRUE(single.ok()) << single.status();
  auto single_error = (*exact)->OutputError(p, heads);
  ASSERT_TRUE(single_error.ok());

  EXPECT_TRUE(grouped_o == o) << "outputs differ between grouped and per-head runs";
  EXPECT_NEAR(*grouped_error, *single_error, 1e-6);
  EXPECT_GT(*grouped_error, 0.0);
  // Every head written: no head's output left at zero.
  for (int h : heads) {
    bool any = false;
    for (int64_t t = 0; t < p.total_q() && !any; ++t) {
      for (int x = 0; x < p.head_dim && !any; ++x) {
        any = o[((t * p.num_q_heads + h) * p.head_dim + x) * DTypeSize(p.dtype)] != 0;
      }
    }
    EXPECT_TRUE(any) << "head " << h;
  }
  // The same pairs either way.
  int64_t grouped_pairs = 0, single_pairs = 0;
  for (const SparseIndex& idx : grouped->indexes) {
    for (int s = 0; s < idx.num_heads(); ++s) grouped_pairs += ComputedPairs(p, idx, s);
  }
  for (const SparseIndex& idx : single->indexes) single_pairs += ComputedPairs(p, idx, 0);
  EXPECT_EQ(grouped_pairs, single_pairs);
}

TEST(BenchTest, FullDenseIndexIsRecognizedOnlyOverEveryHead) {
  for (const bool causal : {true, false}) {
    WorkloadOptions o;
    o.shape.q_lens = {100, 300};  // chunked prefill: 100 of 400 and 300 of 300
    o.shape.k_lens = {400, 300};
    o.shape.num_q_heads = 4;
    o.shape.num_kv_heads = 2;
    o.shape.head_dim = 64;
    o.shape.causal = causal;
    auto w = GenerateWorkload(o);
    ASSERT_TRUE(w.ok()) << w.status();
    const AttentionProblem& p = w->problem();
    MethodConfig dense;
    MethodConfig a_shape;
    a_shape.method = Method::kAShape;
    a_shape.a_shape.sink_tokens = 4;
    a_shape.a_shape.local_tokens = 32;
    BuildOptions bo;
    SparseIndex index;
    ASSERT_TRUE(BuildSparseIndex(p, dense, {3, 1, 0, 2}, bo, &index).ok());
    EXPECT_TRUE(IsFullDenseIndex(p, index)) << "causal " << causal;
    ASSERT_TRUE(BuildSparseIndex(p, dense, {0, 1, 2}, bo, &index).ok());
    EXPECT_FALSE(IsFullDenseIndex(p, index)) << "a head missing, causal " << causal;
    ASSERT_TRUE(BuildSparseIndex(p, a_shape, {0, 1, 2, 3}, bo, &index).ok());
    EXPECT_FALSE(IsFullDenseIndex(p, index)) << "a_shape, causal " << causal;
    ASSERT_TRUE(BuildSparseIndex(p, dense, {0, 1, 2, 3}, bo, &index).ok());
    index.range_len[5] -= 1;  // one row one key short
    EXPECT_FALSE(IsFullDenseIndex(p, index)) << "short row, causal " << causal;
  }
}

}  // namespace
}  // namespace spattn
