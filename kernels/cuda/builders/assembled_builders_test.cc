// GPU index builders of sample_attention, anchor and saap against their CPU twins on the same
// inputs: the same selected keys (rows compared one by one; where float order makes near-ties
// go the other way, attention-mass recall and density agree within small tolerances), the index
// invariants on the downloaded index, the sparse kernel over the GPU index against the CPU
// kernel over the CPU index, and the status codes of bad calls. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/build_index.h"
#include "kernels/calibration/saap_calibration.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/fidelity.h"
#include "kernels/host_problem.h"
#include "kernels/builders/testing/method_testing.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

using cuda_test::DeviceProblem;

bool HaveGpu(std::string* why) { return !ListCudaDevices(why).empty(); }

#define SKIP_WITHOUT_GPU()                                         \
  do {                                                             \
    std::string why;                                               \
    if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

std::unique_ptr<HostProblem> Problem(std::vector<int32_t> q, std::vector<int32_t> k, int hq,
                                     int hkv, int d, bool causal, uint64_t seed,
                                     DType dtype = DType::kBF16) {
  ProblemShape s;
  s.q_lens = std::move(q);
  s.k_lens = std::move(k);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.causal = causal;
  s.dtype = dtype;
  auto hp = std::make_unique<HostProblem>(s);
  hp->FillRandom(seed);
  return hp;
}

std::string Describe(const AttentionProblem& p) {
  std::string s = "q_lens=";
  for (int b = 0; b < p.batch(); ++b) absl::StrAppend(&s, b ? "," : "", p.q_len(b));
  absl::StrAppend(&s, " k_lens=");
  for (int b = 0; b < p.batch(); ++b) absl::StrAppend(&s, b ? "," : "", p.k_len(b));
  absl::StrAppend(&s, " heads=", p.num_q_heads, "/", p.num_kv_heads, " d=", p.head_dim,
                  p.causal ? " causal" : " full", " ", DTypeName(p.dtype));
  return s;
}

std::vector<int> AllHeads(int n) {
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  return h;
}

std::string RowString(const SparseIndex& idx, int64_t r) {
  std::string s;
  for (int32_t e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
    absl::StrAppend(&s, "[", idx.range_start[e], ",", idx.range_start[e] + idx.range_len[e], ")");
  }
  int shown = 0;
  for (int32_t e = idx.col_indptr[r]; e < idx.col_indptr[r + 1]; ++e) {
    if (++shown > 12) {
      absl::StrAppend(&s, " ...(", idx.col_indptr[r + 1] - idx.col_indptr[r], " cols)");
      break;
    }
    absl::StrAppend(&s, " c", idx.col_idx[e]);
  }
  return s;
}

bool SameRow(const SparseIndex& a, const SparseIndex& b, int64_t r) {
  const int32_t na = a.range_indptr[r + 1] - a.range_indptr[r];
  const int32_t nb = b.range_indptr[r + 1] - b.range_indptr[r];
  const int32_t ca = a.col_indptr[r + 1] - a.col_indptr[r];
  const int32_t cb = b.col_indptr[r + 1] - b.col_indptr[r];
  if (na != nb || ca != cb) return false;
  for (int32_t i = 0; i < na; ++i) {
    if (a.range_start[a.range_indptr[r] + i] != b.range_start[b.range_indptr[r] + i] ||
        a.range_len[a.range_indptr[r] + i] != b.range_len[b.range_indptr[r] + i]) {
      return false;
    }
  }
  for (int32_t i = 0; i < ca; ++i) {
    if (a.col_idx[a.col_indptr[r] + i] != b.col_idx[b.col_indptr[r] + i]) return false;
  }
  return true;
}

struct Agreement {
  int64_t rows = 0;
  int64_t differing = 0;
  std::string first_difference;
  double cpu_recall = 0, gpu_recall = 0, cpu_density = 0, gpu_density = 0;
};

// Row-by-row comparison, plus recall and density of both when some rows differ.
Agreement Compare(const AttentionProblem& p, const SparseIndex& cpu, const SparseIndex& gpu,
                  int recall_rows) {
  Agreement a;
  a.rows = cpu.num_rows();
  for (int64_t r = 0; r < a.rows; ++r) {
    if (SameRow(cpu, gpu, r)) continue;
    if (a.differing++ == 0) {
      a.first_difference =
          absl::StrCat("slot ", r / cpu.num_blocks(), " block ", r % cpu.num_blocks(), ": cpu ",
                       RowString(cpu, r), " | gpu ", RowString(gpu, r));
    }
  }
  if (a.differing > 0) {
    auto fc = SummarizeFidelity(p, cpu, recall_rows, 1);
    auto fg = SummarizeFidelity(p, gpu, recall_rows, 1);
    if (fc.ok() && fg.ok()) {
      a.cpu_recall = fc->recall_mean;
      a.gpu_recall = fg->recall_mean;
      a.cpu_density = fc->density_mean;
      a.gpu_density = fg->density_mean;
    }
  }
  return a;
}

// The GPU index of `config` vs the CPU's: same layout, valid, rows equal but for at most
// `max_diff_share` of them, and then recall / density within the tolerances.
void ExpectAgreement(HostProblem& hp, CudaAttentionEngine& engine, const MethodConfig& config,
                     const std::vector<int>& heads, int block_m, double max_diff_share,
                     double recall_tol, double density_tol, const LayerAssets* assets = nullptr,
                     const CudaLayerAssets* dev_assets = nullptr) {
  const AttentionProblem& p = hp.problem();
  const std::string what = absl::StrCat(config.DebugString(), " block_m=", block_m,
                                        " heads=", heads.size(), " ", Describe(p));
  SparseIndex cpu, gpu;
  BuildOptions bo;
  bo.block_m = block_m;
  bo.maybe_assets = assets;
  ASSERT_TRUE(BuildSparseIndex(p, config, heads, bo, &cpu).ok()) << what;
  auto dp = DeviceProblem::Create(engine.device(), hp);
  ASSERT_TRUE(dp.ok()) << dp.status();
  absl::Status s =
      engine.BuildIndexOnDevice((*dp)->problem(), config, heads, block_m, &gpu, dev_assets);
  ASSERT_TRUE(s.ok()) << s << " " << what;
  const absl::Status valid = ValidateSparseIndex(p, gpu);
  ASSERT_TRUE(valid.ok()) << valid << " " << what;
  ASSERT_EQ(cpu.block_m, gpu.block_m) << what;
  ASSERT_EQ(cpu.heads, gpu.heads) << what;
  ASSERT_EQ(cpu.block_offsets, gpu.block_offsets) << what;
  const Agreement a = Compare(p, cpu, gpu, 128);
  printf("%s: %lld/%lld rows differ%s%s\n", what.c_str(), static_cast<long long>(a.differing),
         static_cast<long long>(a.rows), a.differing ? "; first: " : "",
         a.first_difference.substr(0, 300).c_str());
  if (a.differing == 0) return;
  printf("  recall cpu %.4f gpu %.4f, density cpu %.4f gpu %.4f\n", a.cpu_recall, a.gpu_recall,
         a.cpu_density, a.gpu_density);
  EXPECT_LE(a.differing, static_cast<int64_t>(max_diff_share * a.rows)) << what << "\n"
                                                                        << a.first_difference;
  EXPECT_NEAR(a.gpu_recall, a.cpu_recall, recall_tol) << what;
  EXPECT_NEAR(a.gpu_density, a.cpu_density, density_tol) << what;
}

struct Shape {
  std::vector<int32_t> q, k;
  int hq, hkv, d;
  bool causal;
};

// Odd lengths, GQA 1 / 4 / 8, varlen with chunked prefill, a non-causal batch, d 64 and 128.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {{1}, {}, 2, 2, 64, true},
      {{777}, {}, 4, 1, 128, true},
      {{63, 1000, 1, 300}, {63, 1500, 7, 301}, 8, 2, 64, true},
      {{2049, 130}, {5000, 130}, 8, 1, 128, true},
      {{500, 129}, {700, 129}, 4, 4, 64, false},
  };
  return shapes;
}

std::unique_ptr<CudaAttentionEngine> MakeEngine(int64_t bytes) {
  auto e = CudaAttentionEngine::Create(0, bytes);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(GpuBuildersBTest, SampleAttentionMatchesCpu) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{256} << 20);
  ASSERT_NE(engine, nullptr);
  uint64_t seed = 10;
  for (const Shape& sh : Shapes()) {
    auto hp = Problem(sh.q, sh.k, sh.hq, sh.hkv, sh.d, sh.causal, seed++);
    MethodConfig c;
    c.method = Method::kSampleAttention;
    // Flat random attention needs low alphas to be sparse (0.95 keeps nearly every block).
    struct P {
      float ac, as;
      int chunk_n, blk, local;
    };
    for (const P& pr : {P{0.95f, 0.95f, 2, 128, 128}, P{0.5f, 0.5f, 3, 64, 0},
                        P{0.6f, 0.3f, 1, 16, 40}, P{0.4f, 0.7f, 5, 32, 1}}) {
      c.sample_attention.alpha_c = pr.ac;
      c.sample_attention.alpha_s = pr.as;
      c.sample_attention.chunk_n = pr.chunk_n;
      c.sample_attention.block_size = pr.blk;
      c.sample_attention.local_tokens = pr.local;
      ExpectAgreement(*hp, *engine, c, AllHeads(sh.hq), 64, 0.02, 0.01, 0.01);
      ExpectAgreement(*hp, *engine, c, {sh.hq - 1, 0}, 64, 0.02, 0.01, 0.01);
    }
  }
}

TEST(GpuBuildersBTest, AnchorMatchesCpu) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{256} << 20);
  ASSERT_NE(engine, nullptr);
  uint64_t seed = 20;
  for (const Shape& sh : Shapes()) {
    auto hp = Problem(sh.q, sh.k, sh.hq, sh.hkv, sh.d, sh.causal, seed++);
    MethodConfig c;
    c.method = Method::kAnchor;
    struct P {
      float theta;
      int step, blk, init;
    };
    // Random logits differ by a few units: theta 12 keeps every key, 1-2 keeps some.
    for (const P& pr :
         {P{12.f, 16, 128, 2048}, P{1.f, 4, 64, 64}, P{2.f, 3, 32, 100}, P{1.5f, 20, 16, 0}}) {
      c.anchor.theta = pr.theta;
      c.anchor.step = pr.step;
      c.anchor.block_size = pr.blk;
      c.anchor.init_tokens = pr.init;
      ExpectAgreement(*hp, *engine, c, AllHeads(sh.hq), 64, 0.02, 0.01, 0.01);
      ExpectAgreement(*hp, *engine, c, {sh.hq - 1}, 64, 0.02, 0.01, 0.01);
    }
  }
}

// Saap assets calibrated (kernels/calibration) on planted clusters, as saap_test does.
LayerAssets CalibratedClusters(int hq, int hkv, int d, int centroids, int hidden, uint64_t seed) {
  method_testing::ClusterSpec spec;
  spec.segment = 1;
  ProblemShape s;
  s.q_lens = {1536, 1536};
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.dtype = DType::kBF16;
  auto calib = method_testing::RandomProblem(s, seed);
  method_testing::PlantClusters(calib.get(), spec, seed + 1);
  LayerAssets assets;
  assets.rope_theta = spec.rope_theta;
  SaapCalibrationOptions co;
  co.kmeans.num_centroids = centroids;
  co.kmeans.init = KMeansInit::kKMeansPlusPlus;
  co.kmeans.iterations = 10;
  co.classifier.hidden = hidden;
  co.classifier.steps = 150;
  co.local_tokens = 64;
  co.long_range_distance = 0;
  co.max_queries = 2048;
  EXPECT_TRUE(CalibrateSaap(calib->problem(), co, &assets, nullptr).ok());
  return assets;
}

TEST(GpuBuildersBTest, SaapMatchesCpuOnPlantedClusters) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{256} << 20);
  ASSERT_NE(engine, nullptr);
  for (int d : {64, 128}) {
    const int hq = 8, hkv = 2;
    LayerAssets assets = CalibratedClusters(hq, hkv, d, 16, 64, 100 + d);
    auto dev = engine->UploadLayerAssets(assets, d);
    ASSERT_TRUE(dev.ok()) << dev.status();
    ProblemShape t;
    t.q_lens = {2048, 600, 77};
    t.k_lens = {2048, 1800, 77};
    t.num_q_heads = hq;
    t.num_kv_heads = hkv;
    t.head_dim = d;
    auto hp = method_testing::RandomProblem(t, 200 + d);
    method_testing::ClusterSpec spec;
    method_testing::PlantClusters(hp.get(), spec, 201 + d);
    MethodConfig c;
    c.method = Method::kSaap;
    c.saap.num_centroids = 16;
    c.saap.sink_tokens = 1;
    c.saap.local_tokens = 64;
    // One clearly best bucket per block: the index should be the CPU's, row for row.
    c.saap.top_l = 1;
    ExpectAgreement(*hp, *engine, c, AllHeads(hq), 64, 0.05, 0.01, 0.01, &assets, dev->get());
    c.saap.top_l = 3;
    for (int block_m : {64, 128, 32}) {
      ExpectAgreement(*hp, *engine, c, AllHeads(hq), block_m, 0.05, 0.02, 0.02, &assets,
                      dev->get());
    }
    ExpectAgreement(*hp, *engine, c, {5, 1, 4}, 64, 0.05, 0.02, 0.02, &assets, dev->get());
  }
}

TEST(GpuBuildersBTest, SaapMatchesCpuWithRandomAssets) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{256} << 20);
  ASSERT_NE(engine, nullptr);
  uint64_t seed = 30;
  for (const Shape& sh : Shapes()) {
    LayerAssets assets = method_testing::RandomSaapAssets(sh.hq, sh.hkv, sh.d, 32, 48, seed);
    assets.rope_interleaved = (seed & 1) != 0;
    auto dev = engine->UploadLayerAssets(assets, sh.d);
    ASSERT_TRUE(dev.ok()) << dev.status();
    auto hp = Problem(sh.q, sh.k, sh.hq, sh.hkv, sh.d, sh.causal, seed++);
    MethodConfig c;
    c.method = Method::kSaap;
    c.saap.num_centroids = 32;
    c.saap.top_l = 4;
    c.saap.sink_tokens = 3;
    c.saap.local_tokens = 50;
    // bf16 classifier weights move near-tied buckets: rows may differ, recall and density not.
    ExpectAgreement(*hp, *engine, c, AllHeads(sh.hq), 64, 0.25, 0.03, 0.03, &assets, dev->get());
    c.saap.local_tokens = 0;
    c.saap.sink_tokens = 0;
    ExpectAgreement(*hp, *engine, c, {0}, 128, 0.25, 0.03, 0.03, &assets, dev->get());
  }
}

// One 32K sequence of the shared generator's llm_mix (and a 64K one for sample_attention).
TEST(GpuBuildersBTest, LongGeneratorWorkloads) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{4} << 30);
  ASSERT_NE(engine, nullptr);
  for (int len : {32768, 65536}) {
    WorkloadOptions o;
    o.workload = "llm_mix";
    o.shape.q_lens = {len};
    o.shape.num_q_heads = 8;
    o.shape.num_kv_heads = 2;
    o.shape.head_dim = 128;
    o.shape.dtype = DType::kBF16;
    auto w = GenerateWorkload(o);
    ASSERT_TRUE(w.ok()) << w.status();
    MethodConfig sa;
    sa.method = Method::kSampleAttention;
    ExpectAgreement(*w->host, *engine, sa, AllHeads(8), 64, 0.02, 0.01, 0.01);
    if (len > 32768) continue;
    MethodConfig an;
    an.method = Method::kAnchor;
    ExpectAgreement(*w->host, *engine, an, AllHeads(8), 64, 0.02, 0.01, 0.01);
    an.anchor.theta = 4.f;
    ExpectAgreement(*w->host, *engine, an, AllHeads(8), 64, 0.02, 0.01, 0.01);
    // Saap with assets calibrated on the first 4K tokens of the same prompt.
    WorkloadOptions oc = o;
    oc.shape.q_lens = {4096};
    auto wc = GenerateWorkload(oc);
    ASSERT_TRUE(wc.ok());
    LayerAssets assets;
    assets.rope_theta = o.rope_theta;
    SaapCalibrationOptions co;
    co.kmeans.num_centroids = 64;
    co.classifier.hidden = 128;
    co.classifier.steps = 100;
    co.local_tokens = 128;
    co.max_queries = 2048;
    ASSERT_TRUE(CalibrateSaap(wc->problem(), co, &assets, nullptr).ok());
    auto dev = engine->UploadLayerAssets(assets, 128);
    ASSERT_TRUE(dev.ok()) << dev.status();
    MethodConfig sp;
    sp.method = Method::kSaap;
    sp.saap.num_centroids = 64;
    sp.saap.top_l = 4;
    sp.saap.local_tokens = 128;
    ExpectAgreement(*w->host, *engine, sp, AllHeads(8), 64, 0.25, 0.03, 0.03, &assets, dev->get());
  }
}

// RunBuiltIndex (GPU build + GPU sparse kernel) against SparseAttentionCpu over the CPU index:
// on rows whose index rows agree the outputs agree; every output is checked against the exact
// attention of its own (GPU) index row.
TEST(GpuBuildersBTest, SparseKernelOverGpuIndexMatchesCpu) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{512} << 20);
  ASSERT_NE(engine, nullptr);
  auto hp = Problem({1000, 2500, 70}, {1000, 3000, 70}, 8, 2, 128, true, 40);
  const AttentionProblem& p = hp->problem();
  LayerAssets assets = method_testing::RandomSaapAssets(8, 2, 128, 32, 64, 41);
  auto dev_assets = engine->UploadLayerAssets(assets, 128);
  ASSERT_TRUE(dev_assets.ok()) << dev_assets.status();
  std::vector<MethodConfig> configs(3);
  configs[0].method = Method::kSampleAttention;
  configs[0].sample_attention.alpha_c = configs[0].sample_attention.alpha_s = 0.5f;
  configs[1].method = Method::kAnchor;
  configs[1].anchor.theta = 1.f;
  configs[1].anchor.block_size = 64;
  configs[1].anchor.step = 4;
  configs[1].anchor.init_tokens = 256;
  configs[2].method = Method::kSaap;
  configs[2].saap.num_centroids = 32;
  configs[2].saap.top_l = 4;
  configs[2].saap.local_tokens = 128;
  const std::vector<int> heads = {0, 3, 4, 7};
  for (const MethodConfig& c : configs) {
    const std::string what = c.DebugString();
    SparseIndex cpu, gpu;
    BuildOptions bo;
    bo.block_m = 64;
    bo.maybe_assets = &assets;
    ASSERT_TRUE(BuildSparseIndex(p, c, heads, bo, &cpu).ok()) << what;
    auto dp = DeviceProblem::Create(0, *hp);
    ASSERT_TRUE(dp.ok()) << dp.status();
    ASSERT_TRUE(
        engine->BuildIndexOnDevice((*dp)->problem(), c, heads, 64, &gpu, dev_assets->get()).ok())
        << what;
    ASSERT_TRUE((*dp)->Poison().ok());
    CudaStageTimes t;
    absl::Status s = engine->RunBuiltIndex((*dp)->problem(), c, heads, 64, &t, dev_assets->get());
    ASSERT_TRUE(s.ok()) << s << " " << what;
    EXPECT_GT(t.index_seconds, 0) << what;
    EXPECT_GT(t.kernel_seconds, 0) << what;
    std::vector<float> o, lse;
    ASSERT_TRUE((*dp)->Download(&o, &lse).ok());
    EXPECT_EQ(cuda_test::CheckAllWritten(p, heads, o, lse), "") << what;
    EXPECT_EQ(cuda_test::CheckRows(p, &gpu, cuda_test::SampleRows(p, heads, 400), o, lse), "")
        << what;
    // CPU kernel over the CPU index.
    ASSERT_TRUE(SparseAttentionCpu(p, cpu).ok()) << what;
    const std::vector<float> o_cpu = hp->OutputAsFloat();
    double num = 0, den = 0, worst = 0;
    int64_t rows_compared = 0;
    const int d = p.head_dim;
    for (int si = 0; si < static_cast<int>(heads.size()); ++si) {
      const int h = heads[si];
      for (int blk = 0; blk < cpu.num_blocks(); ++blk) {
        if (!SameRow(cpu, gpu, cpu.row(si, blk))) continue;
        const BlockGeometry g = GetBlockGeometry(p, cpu, blk);
        for (int r = g.q_begin; r < g.q_end; ++r) {
          const int64_t tok = p.cu_seqlens_q[g.seq] + r;
          for (int c2 = 0; c2 < d; ++c2) {
            const int64_t i = (tok * p.num_q_heads + h) * d + c2;
            const double diff = static_cast<double>(o[i]) - o_cpu[i];
            num += diff * diff;
            den += static_cast<double>(o_cpu[i]) * o_cpu[i];
            worst = std::max(worst, std::fabs(diff));
          }
          ++rows_compared;
        }
      }
    }
    printf("%s: kernel outputs on %lld agreeing rows: rel L2 %.3g, max abs %.3g\n", what.c_str(),
           static_cast<long long>(rows_compared), den > 0 ? std::sqrt(num / den) : 0.0, worst);
    EXPECT_GT(rows_compared, 0) << what;
    EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 1e-2) << what;
    EXPECT_LE(worst, 0.05) << what;
  }
}

// The same build twice gives the same index (no race or order dependence in the selection).
TEST(GpuBuildersBTest, RepeatedBuildsAreIdentical) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{256} << 20);
  ASSERT_NE(engine, nullptr);
  auto hp = Problem({3000, 100}, {3500, 100}, 8, 2, 128, true, 50);
  LayerAssets assets = method_testing::RandomSaapAssets(8, 2, 128, 64, 128, 51);
  auto dev_assets = engine->UploadLayerAssets(assets, 128);
  ASSERT_TRUE(dev_assets.ok()) << dev_assets.status();
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  std::vector<MethodConfig> configs(3);
  configs[0].method = Method::kSampleAttention;
  configs[0].sample_attention.alpha_c = configs[0].sample_attention.alpha_s = 0.6f;
  configs[1].method = Method::kAnchor;
  configs[1].anchor.theta = 1.5f;
  configs[2].method = Method::kSaap;
  configs[2].saap.num_centroids = 64;
  configs[2].saap.top_l = 8;
  for (const MethodConfig& c : configs) {
    SparseIndex a, b;
    ASSERT_TRUE(
        engine->BuildIndexOnDevice((*dp)->problem(), c, AllHeads(8), 64, &a, dev_assets->get())
            .ok());
    ASSERT_TRUE(
        engine->BuildIndexOnDevice((*dp)->problem(), c, AllHeads(8), 64, &b, dev_assets->get())
            .ok());
    EXPECT_EQ(a.range_indptr, b.range_indptr) << c.DebugString();
    EXPECT_EQ(a.range_start, b.range_start) << c.DebugString();
    EXPECT_EQ(a.range_len, b.range_len) << c.DebugString();
    EXPECT_EQ(a.col_indptr, b.col_indptr) << c.DebugString();
    EXPECT_EQ(a.col_idx, b.col_idx) << c.DebugString();
  }
}

TEST(GpuBuildersBTest, BadCallsHavePreciseStatus) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine(int64_t{64} << 20);
  ASSERT_NE(engine, nullptr);
  auto hp = Problem({300}, {}, 4, 2, 64, true, 60);
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  SparseIndex idx;
  MethodConfig sa;
  sa.method = Method::kSampleAttention;
  // Q/K in host memory.
  EXPECT_EQ(engine->BuildIndexOnDevice(hp->problem(), sa, {0}, 64, &idx).code(),
            absl::StatusCode::kFailedPrecondition);
  // Not a q head.
  EXPECT_EQ(engine->BuildIndexOnDevice((*dp)->problem(), sa, {4}, 64, &idx).code(),
            absl::StatusCode::kInvalidArgument);
  // Bad parameter.
  sa.sample_attention.block_size = 48;
  EXPECT_EQ(engine->BuildIndexOnDevice((*dp)->problem(), sa, {0}, 64, &idx).code(),
            absl::StatusCode::kInvalidArgument);
  // Block sizes the sparse kernel does not take: the index builds, the kernel call says no.
  sa.sample_attention.block_size = 32;
  EXPECT_TRUE(engine->BuildIndexOnDevice((*dp)->problem(), sa, {0}, 64, &idx).ok());
  EXPECT_EQ(engine->RunBuiltIndex((*dp)->problem(), sa, {0}, 64).code(),
            absl::StatusCode::kInvalidArgument);
  // Saap: no assets, wrong centroid count, unsupported classifier.
  MethodConfig sp;
  sp.method = Method::kSaap;
  sp.saap.num_centroids = 16;
  sp.saap.top_l = 2;
  EXPECT_EQ(engine->BuildIndexOnDevice((*dp)->problem(), sp, {0}, 64, &idx).code(),
            absl::StatusCode::kFailedPrecondition);
  LayerAssets assets = method_testing::RandomSaapAssets(4, 2, 64, 16, 32, 61);
  auto dev = engine->UploadLayerAssets(assets, 64);
  ASSERT_TRUE(dev.ok()) << dev.status();
  sp.saap.num_centroids = 32;
  EXPECT_EQ(engine->BuildIndexOnDevice((*dp)->problem(), sp, {0}, 64, &idx, dev->get()).code(),
            absl::StatusCode::kInvalidArgument);
  sp.saap.num_centroids = 16;
  EXPECT_TRUE(engine->BuildIndexOnDevice((*dp)->problem(), sp, {0}, 64, &idx, dev->get()).ok());
  LayerAssets partial = assets;
  partial.classifiers[3].clear();
  auto dev_partial = engine->UploadLayerAssets(partial, 64);
  ASSERT_TRUE(dev_partial.ok()) << dev_partial.status();
  EXPECT_EQ(
      engine->BuildIndexOnDevice((*dp)->problem(), sp, {3}, 64, &idx, dev_partial->get()).code(),
      absl::StatusCode::kFailedPrecondition);
  LayerAssets deep = assets;
  for (auto& c : deep.classifiers) {
    DenseLayerWeights extra;
    extra.in = extra.out = 16;
    extra.weight.assign(256, 0.f);
    extra.bias.assign(16, 0.f);
    c.push_back(extra);
  }
  EXPECT_EQ(engine->UploadLayerAssets(deep, 64).status().code(), absl::StatusCode::kUnimplemented);
  LayerAssets bad = assets;
  bad.centroids[1].resize(5);
  EXPECT_EQ(engine->UploadLayerAssets(bad, 64).status().code(), absl::StatusCode::kInvalidArgument);
  // A workspace too small for the build (the pooled queries alone take 3 KB here; device run 2
  // showed that 8 KB holds this whole build).
  auto tiny = MakeEngine(int64_t{1} << 10);
  ASSERT_NE(tiny, nullptr);
  MethodConfig an;
  an.method = Method::kAnchor;
  EXPECT_EQ(tiny->BuildIndexOnDevice((*dp)->problem(), an, AllHeads(4), 64, &idx).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace spattn
