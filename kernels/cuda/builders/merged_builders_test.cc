// GPU index builders of vertical_slash, block_sparse and flex_prefill against their CPU twins
// (kernels/builders/): the same index where the arithmetic is exact, recall and density within a
// small tolerance where floating-point order may break near-ties differently, the format's
// invariants on every downloaded index, and the sparse kernel over a GPU-built index. Skips
// (with the reason) without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/testing/builder_test_util.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/fidelity.h"
#include "kernels/host_problem.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

using cuda_test::DeviceProblem;

#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    std::string why;                                                              \
    if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

std::unique_ptr<HostProblem> MakeProblem(std::vector<int32_t> q, std::vector<int32_t> k, int hq,
                                         int hkv, int d, DType dtype, bool causal, uint64_t seed,
                                         bool integer_qk) {
  ProblemShape s;
  s.q_lens = std::move(q);
  s.k_lens = std::move(k);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.dtype = dtype;
  s.causal = causal;
  // A power of two: with integer Q/K every logit is exact on both sides.
  if (integer_qk) s.softmax_scale = d == 64 ? 0.125f : 0.0625f;
  auto hp = std::make_unique<HostProblem>(s);
  hp->FillRandom(seed);
  if (integer_qk) {
    std::mt19937_64 rng(seed * 7919 + 1);
    for (std::vector<uint8_t>* t : {&hp->q_bytes(), &hp->k_bytes()}) {
      uint16_t* h = reinterpret_cast<uint16_t*>(t->data());
      for (size_t i = 0; i < t->size() / 2; ++i) {
        const float v = static_cast<float>(static_cast<int>(rng() % 3) - 1);
        h[i] = dtype == DType::kBF16 ? FloatToBf16(v) : FloatToFp16(v);
      }
    }
  }
  return hp;
}

std::string Describe(const AttentionProblem& p) {
  std::string q, k;
  for (int b = 0; b < p.batch(); ++b) {
    absl::StrAppend(&q, b ? "," : "", p.q_len(b));
    absl::StrAppend(&k, b ? "," : "", p.k_len(b));
  }
  return absl::StrCat("q_lens={", q, "} k_lens={", k, "} heads=", p.num_q_heads, "/",
                      p.num_kv_heads, " d=", p.head_dim, " ", DTypeName(p.dtype),
                      p.causal ? " causal" : " full");
}

// Rows whose key sets differ and the size of the symmetric difference, over all keys.
struct IndexDiff {
  int64_t rows = 0, rows_differing = 0, keys = 0, keys_differing = 0;
  std::string first;
};

IndexDiff Diff(const SparseIndex& cpu, const SparseIndex& gpu) {
  IndexDiff d;
  if (cpu.num_heads() != gpu.num_heads() || cpu.num_blocks() != gpu.num_blocks()) {
    d.rows_differing = -1;
    d.first = "shapes differ";
    return d;
  }
  for (int s = 0; s < cpu.num_heads(); ++s) {
    for (int b = 0; b < cpu.num_blocks(); ++b) {
      const std::vector<int32_t> a = testing::RowKeyList(cpu, s, b);
      const std::vector<int32_t> g = testing::RowKeyList(gpu, s, b);
      ++d.rows;
      d.keys += static_cast<int64_t>(a.size());
      if (a == g) continue;
      std::vector<int32_t> x;
      std::set_symmetric_difference(a.begin(), a.end(), g.begin(), g.end(), std::back_inserter(x));
      ++d.rows_differing;
      d.keys_differing += static_cast<int64_t>(x.size());
      if (d.first.empty()) {
        d.first = absl::StrCat("slot ", s, " block ", b, ": cpu ", a.size(), " keys, gpu ",
                               g.size(), ", first differing key ", x.empty() ? -1 : x[0]);
      }
    }
  }
  return d;
}

bool SameIndex(const SparseIndex& a, const SparseIndex& b) {
  return a.block_m == b.block_m && a.heads == b.heads && a.block_offsets == b.block_offsets &&
         a.range_indptr == b.range_indptr && a.range_start == b.range_start &&
         a.range_len == b.range_len && a.col_indptr == b.col_indptr && a.col_idx == b.col_idx;
}

std::vector<int> AllHeads(int n) {
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  return h;
}

struct Builds {
  SparseIndex cpu, gpu;
};

// Builds with both twins; the GPU index must satisfy the format's invariants.
void BuildBoth(CudaAttentionEngine& engine, HostProblem& hp, DeviceProblem& dp,
               const MethodConfig& config, const std::vector<int>& heads, int block_m,
               const std::string& what, Builds* out) {
  BuildOptions bo;
  bo.block_m = block_m;
  ASSERT_TRUE(BuildSparseIndex(hp.problem(), config, heads, bo, &out->cpu).ok()) << what;
  const absl::Status s = engine.BuildIndexOnDevice(dp.problem(), config, heads, block_m, &out->gpu);
  ASSERT_TRUE(s.ok()) << s << " " << what;
  const absl::Status v = ValidateSparseIndex(hp.problem(), out->gpu);
  ASSERT_TRUE(v.ok()) << v << " " << what;
}

std::vector<MethodConfig> SmallConfigs() {
  std::vector<MethodConfig> out;
  MethodConfig c;
  c.method = Method::kVerticalSlash;
  c.vertical_slash = {64, 30, 40, 5, 8};
  out.push_back(c);
  c.vertical_slash = {100, 200, 300, 0, 1};  // two row chunks, long column runs, many lines
  out.push_back(c);
  c = MethodConfig();
  c.method = Method::kBlockSparse;
  c.block_sparse = {64, 3};
  out.push_back(c);
  c.block_sparse = {32, 5};
  out.push_back(c);
  c = MethodConfig();
  c.method = Method::kFlexPrefill;
  c.flex_prefill.block_size = 64;
  c.flex_prefill.min_budget = 32;
  c.flex_prefill.tau = 0.f;  // every head vertical-slash
  out.push_back(c);
  c.flex_prefill.tau = 1.f;  // every head query-aware, flattened
  c.flex_prefill.min_budget = 128;
  out.push_back(c);
  c.flex_prefill.block_size = 32;  // query-aware per block, with a maximum
  c.flex_prefill.flatten = false;
  c.flex_prefill.min_budget = 0;
  c.flex_prefill.max_budget = 256;
  out.push_back(c);
  c = MethodConfig();
  c.method = Method::kFlexPrefill;  // paper defaults (mixed decisions)
  c.flex_prefill.gamma = 0.95f;
  out.push_back(c);
  return out;
}

struct Shape {
  std::vector<int32_t> q, k;
  int hq, hkv, d;
  DType dtype;
  bool causal;
};

std::vector<Shape> SmallShapes() {
  return {
      {{300}, {}, 4, 4, 64, DType::kBF16, true},                            // GQA 1
      {{257, 64, 1, 0}, {257, 1000, 7, 5}, 8, 2, 128, DType::kBF16, true},  // GQA 4, varlen
      {{200}, {333}, 8, 1, 64, DType::kF16, false},                         // GQA 8, full mask
      {{1000}, {1500}, 4, 1, 128, DType::kBF16, true},                      // chunked prefill
  };
}

// Integer Q/K and a power-of-two scale: every logit is exact on both sides, so the selections
// are the CPU's. block_sparse must match exactly (its fp32 means and FMA chains are the CPU's
// operations in the CPU's order). vertical_slash and flex_prefill compute exp through double on
// the GPU and glibc's expf / exp on the CPU, which can round one value of ~10^5 a unit apart;
// where that swaps two near-equal lines the key sets may differ by a line: allowed here up to
// 0.5% of the keys with recall and density within 0.005 (and counted in the log).
TEST(GpuBuildersATest, ExactInputsSelectTheCpuKeys) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{512} << 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  int identical = 0, total = 0;
  uint64_t seed = 11;
  for (const Shape& sh : SmallShapes()) {
    auto hp = MakeProblem(sh.q, sh.k, sh.hq, sh.hkv, sh.d, sh.dtype, sh.causal, ++seed, true);
    auto dp = DeviceProblem::Create(0, *hp);
    ASSERT_TRUE(dp.ok()) << dp.status();
    for (const MethodConfig& config : SmallConfigs()) {
      for (const std::vector<int>& heads : {AllHeads(sh.hq), std::vector<int>{sh.hq - 1, 0}}) {
        const std::string what = absl::StrCat(config.DebugString(), " on ", Describe(hp->problem()),
                                              " slots=", heads.size());
        Builds b;
        BuildBoth(**engine, *hp, **dp, config, heads, 64, what, &b);
        if (::testing::Test::HasFatalFailure()) return;
        ++total;
        if (SameIndex(b.cpu, b.gpu)) {
          ++identical;
          continue;
        }
        const IndexDiff d = Diff(b.cpu, b.gpu);
        std::printf("near-tie difference: %s: %lld of %lld rows, %lld of %lld keys (%s)\n",
                    what.c_str(), static_cast<long long>(d.rows_differing),
                    static_cast<long long>(d.rows), static_cast<long long>(d.keys_differing),
                    static_cast<long long>(d.keys), d.first.c_str());
        ASSERT_NE(config.method, Method::kBlockSparse) << what << ": " << d.first;
        EXPECT_LE(d.keys_differing, std::max<int64_t>(2, d.keys / 200)) << what << ": " << d.first;
        EXPECT_NEAR(testing::IndexRecall(hp->problem(), b.gpu),
                    testing::IndexRecall(hp->problem(), b.cpu), 0.005)
            << what;
        EXPECT_NEAR(testing::IndexDensity(hp->problem(), b.gpu),
                    testing::IndexDensity(hp->problem(), b.cpu), 0.005)
            << what;
      }
    }
  }
  std::printf("exact inputs: %d of %d GPU indexes identical to the CPU's\n", identical, total);
}

// General (Gaussian) inputs: the logits differ in the last bits (tensor cores vs the CPU's FMA
// chain), so near-ties at the top-k / gamma boundary may break differently. block_sparse still
// computes the CPU's exact operations and must match; the others stay within 3% of the keys and
// 0.01 of recall and density.
TEST(GpuBuildersATest, GaussianInputsStayCloseToCpu) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{512} << 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  uint64_t seed = 101;
  for (const Shape& sh : SmallShapes()) {
    auto hp = MakeProblem(sh.q, sh.k, sh.hq, sh.hkv, sh.d, sh.dtype, sh.causal, ++seed, false);
    auto dp = DeviceProblem::Create(0, *hp);
    ASSERT_TRUE(dp.ok()) << dp.status();
    for (const MethodConfig& config : SmallConfigs()) {
      const std::string what = absl::StrCat(config.DebugString(), " on ", Describe(hp->problem()));
      Builds b;
      BuildBoth(**engine, *hp, **dp, config, AllHeads(sh.hq), 64, what, &b);
      if (::testing::Test::HasFatalFailure()) return;
      if (SameIndex(b.cpu, b.gpu)) continue;
      const IndexDiff d = Diff(b.cpu, b.gpu);
      std::printf("gaussian: %s: %lld of %lld rows, %lld of %lld keys differ (%s)\n", what.c_str(),
                  static_cast<long long>(d.rows_differing), static_cast<long long>(d.rows),
                  static_cast<long long>(d.keys_differing), static_cast<long long>(d.keys),
                  d.first.c_str());
      EXPECT_NE(config.method, Method::kBlockSparse) << what << ": " << d.first;
      EXPECT_LE(d.keys_differing, std::max<int64_t>(8, d.keys * 3 / 100)) << what;
      EXPECT_NEAR(testing::IndexRecall(hp->problem(), b.gpu),
                  testing::IndexRecall(hp->problem(), b.cpu), 0.01)
          << what;
      EXPECT_NEAR(testing::IndexDensity(hp->problem(), b.gpu),
                  testing::IndexDensity(hp->problem(), b.cpu), 0.01)
          << what;
    }
  }
}

// The LLM-like workload at 32K (8 q / 2 kv heads) and 128K (4 q / 1 kv head), paper defaults:
// recall (sampled rows) and density of the GPU index within 0.01 of the CPU's.
TEST(GpuBuildersATest, LongWorkloadsMatchCpuFidelity) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{6} << 30);
  ASSERT_TRUE(engine.ok()) << engine.status();
  struct Case {
    int len, hq, hkv;
  };
  for (const Case& c : {Case{32768, 8, 2}, Case{131072, 4, 1}}) {
    WorkloadOptions wo;
    wo.shape.q_lens = {c.len};
    wo.shape.num_q_heads = c.hq;
    wo.shape.num_kv_heads = c.hkv;
    wo.shape.head_dim = 128;
    wo.seed = 3;
    auto w = GenerateWorkload(wo);
    ASSERT_TRUE(w.ok()) << w.status();
    auto dp = DeviceProblem::Create(0, *w->host);
    ASSERT_TRUE(dp.ok()) << dp.status();
    for (Method m : {Method::kVerticalSlash, Method::kBlockSparse, Method::kFlexPrefill}) {
      MethodConfig config;
      config.method = m;
      const std::string what =
          absl::StrCat(config.DebugString(), " on llm_mix ", Describe(w->problem()));
      Builds b;
      BuildBoth(**engine, *w->host, **dp, config, AllHeads(c.hq), 64, what, &b);
      if (::testing::Test::HasFatalFailure()) return;
      auto fc = SummarizeFidelity(w->problem(), b.cpu, 64, 5);
      auto fg = SummarizeFidelity(w->problem(), b.gpu, 64, 5);
      ASSERT_TRUE(fc.ok() && fg.ok()) << what;
      const bool same = SameIndex(b.cpu, b.gpu);
      std::printf("long: %s: identical=%d recall cpu %.4f gpu %.4f density cpu %.4f gpu %.4f\n",
                  what.c_str(), same ? 1 : 0, fc->recall_mean, fg->recall_mean, fc->density_mean,
                  fg->density_mean);
      EXPECT_NEAR(fg->recall_mean, fc->recall_mean, 0.01) << what;
      EXPECT_NEAR(fg->density_mean, fc->density_mean, 0.01) << what;
      if (m == Method::kBlockSparse) EXPECT_TRUE(same) << what;
    }
  }
}

// The sparse kernel over the GPU-built index (RunBuiltIndex) against the reference under the
// CPU twin's index (FlashAttention's tolerance rule), and bit for bit against the kernel over
// the uploaded CPU index when the indexes are identical.
TEST(GpuBuildersATest, SparseKernelOverGpuIndex) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{512} << 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto hp = MakeProblem({700, 131}, {1200, 131}, 8, 2, 128, DType::kBF16, true, 77, true);
  const std::vector<int> heads = {0, 3, 4, 7};
  std::vector<MethodConfig> configs = SmallConfigs();
  for (MethodConfig& c : configs) {
    if (c.method == Method::kBlockSparse) c.block_sparse.block_size = 64;
    if (c.method == Method::kFlexPrefill && c.flex_prefill.block_size < 64) {
      c.flex_prefill.block_size = 64;
    }
  }
  for (const MethodConfig& config : configs) {
    const std::string what = absl::StrCat(config.DebugString(), " on ", Describe(hp->problem()));
    BuildOptions bo;
    SparseIndex cpu;
    ASSERT_TRUE(BuildSparseIndex(hp->problem(), config, heads, bo, &cpu).ok()) << what;
    auto a = DeviceProblem::Create(0, *hp);
    auto b = DeviceProblem::Create(0, *hp);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->Poison().ok() && (*b)->Poison().ok());
    CudaStageTimes times;
    const absl::Status s = (*engine)->RunBuiltIndex((*a)->problem(), config, heads, 64, &times);
    ASSERT_TRUE(s.ok()) << s << " " << what;
    EXPECT_GT(times.index_seconds, 0) << what;
    EXPECT_GT(times.kernel_seconds, 0) << what;
    std::vector<float> oa, la;
    ASSERT_TRUE((*a)->Download(&oa, &la).ok());
    EXPECT_EQ(cuda_test::CheckAllWritten(hp->problem(), heads, oa, la), "") << what;
    SparseIndex gpu;
    ASSERT_TRUE((*engine)->BuildIndexOnDevice((*a)->problem(), config, heads, 64, &gpu).ok());
    const std::vector<cuda_test::SampledRow> rows = cuda_test::SampleRows(hp->problem(), heads, 64);
    EXPECT_EQ(cuda_test::CheckRows(hp->problem(), &gpu, rows, oa, la), "") << what;
    if (SameIndex(cpu, gpu)) {
      EXPECT_EQ(cuda_test::CheckRows(hp->problem(), &cpu, rows, oa, la), "") << what;
      ASSERT_TRUE((*engine)->RunSparse((*b)->problem(), cpu).ok()) << what;
      std::vector<float> ob, lb;
      ASSERT_TRUE((*b)->Download(&ob, &lb).ok());
      EXPECT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * 4)) << what;
      EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << what;
    }
  }
}

TEST(GpuBuildersATest, RepeatedBuildsAreIdentical) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{256} << 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto hp = MakeProblem({900, 77}, {900, 300}, 8, 2, 64, DType::kBF16, true, 5, false);
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  for (const MethodConfig& config : SmallConfigs()) {
    SparseIndex first, again;
    ASSERT_TRUE(
        (*engine)->BuildIndexOnDevice((*dp)->problem(), config, AllHeads(8), 64, &first).ok());
    ASSERT_TRUE(
        (*engine)->BuildIndexOnDevice((*dp)->problem(), config, AllHeads(8), 64, &again).ok());
    EXPECT_TRUE(SameIndex(first, again)) << config.DebugString();
  }
}

TEST(GpuBuildersATest, BadCallsAnswerPreciseCodes) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, int64_t{64} << 20);
  ASSERT_TRUE(engine.ok());
  auto tiny = CudaAttentionEngine::Create(0, 64 << 10);
  ASSERT_TRUE(tiny.ok());
  auto hp = MakeProblem({2000}, {}, 4, 2, 64, DType::kBF16, true, 9, false);
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  MethodConfig vs;
  vs.method = Method::kVerticalSlash;
  SparseIndex out;
  // Estimating builders read Q/K: host buffers are refused.
  EXPECT_EQ((*engine)->BuildIndexOnDevice(hp->problem(), vs, {0}, 64, &out).code(),
            absl::StatusCode::kInvalidArgument);
  MethodConfig long_q = vs;
  long_q.vertical_slash.last_q = 4096;
  EXPECT_EQ((*engine)->BuildIndexOnDevice((*dp)->problem(), long_q, {0}, 64, &out).code(),
            absl::StatusCode::kInvalidArgument);
  MethodConfig bad = vs;
  bad.vertical_slash.last_q = 0;
  EXPECT_EQ((*engine)->RunBuiltIndex((*dp)->problem(), bad, {0}, 64).code(),
            absl::StatusCode::kInvalidArgument);
  MethodConfig flex32;
  flex32.method = Method::kFlexPrefill;
  flex32.flex_prefill.block_size = 32;  // the sparse kernel takes block_m 64 and 128
  EXPECT_EQ((*engine)->RunBuiltIndex((*dp)->problem(), flex32, {0}, 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->BuildIndexOnDevice((*dp)->problem(), vs, {4}, 64, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tiny)->BuildIndexOnDevice((*dp)->problem(), vs, {0, 1, 2, 3}, 64, &out).code(),
            absl::StatusCode::kResourceExhausted);
  // No heads: an empty index.
  ASSERT_TRUE((*engine)->BuildIndexOnDevice((*dp)->problem(), vs, {}, 64, &out).ok());
  EXPECT_EQ(out.num_heads(), 0);
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), out).ok());
  // Still usable afterwards.
  EXPECT_TRUE((*engine)->BuildIndexOnDevice((*dp)->problem(), vs, {0}, 64, &out).ok());
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), out).ok());
}

}  // namespace
}  // namespace spattn
