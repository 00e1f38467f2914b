// MassRecallOnGpu against AttentionMassRecall (kernels/fidelity.h, double on the host) for the
// same index and probe rows: device-resident indexes (BuildIndexOnGpu) and host indexes uploaded
// by the call; an llm_mix layer with structure (recalls far from both 0 and 1) and random shapes
// with varlen, chunked prefill, non-causal, fp16 and head_dim 64. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/build_index.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/cuda/common/cuda_runtime.h"
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

std::vector<std::pair<int, int>> Probe(const AttentionProblem& p, int rows, uint64_t seed) {
  std::vector<std::pair<int, int>> out;
  for (const SampledRow& r : SampleQueryRows(p, rows, seed)) out.push_back({r.seq, r.row});
  return out;
}

// Every slot of `config`'s index on all heads: GPU (device index and uploaded host index) vs
// host, within `tol` (fp32 scores vs double).
void Compare(HostProblem& hp, const MethodConfig& config, int rows, double tol,
             const std::string& what) {
  auto e = CudaAttentionEngine::Create(0, int64_t{1} << 28);
  ASSERT_TRUE(e.ok()) << e.status();
  CudaAttentionEngine& engine = **e;
  auto dp = DeviceProblem::Create(0, hp);
  ASSERT_TRUE(dp.ok()) << dp.status();
  const AttentionProblem& host = hp.problem();
  std::vector<int> heads(host.num_q_heads);
  for (int h = 0; h < host.num_q_heads; ++h) heads[h] = h;
  const auto probe = Probe(host, rows, 0x9a4d);
  // The device index, kept in the engine.
  GpuBuildOptions o;
  auto kept = BuildIndexOnGpu(engine, (*dp)->problem(), config, heads, o);
  ASSERT_TRUE(kept.ok()) << kept.status() << " " << what;
  SparseIndex down;
  ASSERT_TRUE(DownloadIndex(engine, *kept, &down).ok()) << what;
  auto gpu = MassRecallOnGpu(engine, (*dp)->problem(), down, &kept->view, probe);
  ASSERT_TRUE(gpu.ok()) << gpu.status() << " " << what;
  // A host index (the CPU builder), uploaded by the call.
  SparseIndex cpu_index;
  BuildOptions bo;
  ASSERT_TRUE(BuildSparseIndex(host, config, heads, bo, &cpu_index).ok()) << what;
  auto uploaded = MassRecallOnGpu(engine, (*dp)->problem(), cpu_index, nullptr, probe);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status() << " " << what;
  ASSERT_EQ(gpu->size(), heads.size());
  ASSERT_EQ(uploaded->size(), heads.size());
  for (int s = 0; s < static_cast<int>(heads.size()); ++s) {
    auto want = AttentionMassRecall(host, down, s, rows, 0x9a4d);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_NEAR((*gpu)[s], *want, tol) << what << " slot " << s;
    auto want_cpu = AttentionMassRecall(host, cpu_index, s, rows, 0x9a4d);
    ASSERT_TRUE(want_cpu.ok());
    EXPECT_NEAR((*uploaded)[s], *want_cpu, tol) << what << " uploaded, slot " << s;
  }
  engine.ReleaseIndexes();
}

TEST(MassRecallOnGpuTest, MatchesTheHostEstimateOnAnLlmMixLayer) {
  SKIP_WITHOUT_GPU();
  WorkloadOptions w;
  w.shape.q_lens = {4096};
  w.shape.num_q_heads = 8;
  w.shape.num_kv_heads = 2;
  w.shape.head_dim = 128;
  w.seed = 3;
  auto wl = GenerateWorkload(w);
  ASSERT_TRUE(wl.ok()) << wl.status();
  for (Method m :
       {Method::kAShape, Method::kVerticalSlash, Method::kFlexPrefill, Method::kBlockSparse}) {
    MethodConfig c;
    c.method = m;
    c.a_shape.local_tokens = 256;
    c.vertical_slash.vertical_size = 128;
    c.vertical_slash.slash_size = 128;
    c.block_sparse.top_k = 4;
    Compare(*wl->host, c, 64, 2e-3, absl::StrCat("llm_mix ", c.DebugString()));
  }
}

TEST(MassRecallOnGpuTest, MatchesTheHostEstimateOnOtherShapes) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    std::vector<int32_t> q, k;
    int hq, hkv, d;
    DType dtype;
    bool causal;
  };
  const Shape shapes[] = {
      {{3000, 700}, {3000, 2500}, 8, 2, 128, DType::kBF16, true},  // varlen, chunked prefill
      {{1500}, {1500}, 6, 3, 64, DType::kF16, true},               // 2 slots per kv head
      {{900}, {5000}, 5, 1, 128, DType::kBF16, false},             // non-causal, 5 slots
  };
  for (const Shape& sh : shapes) {
    ProblemShape s;
    s.q_lens = sh.q;
    s.k_lens = sh.k;
    s.num_q_heads = sh.hq;
    s.num_kv_heads = sh.hkv;
    s.head_dim = sh.d;
    s.dtype = sh.dtype;
    s.causal = sh.causal;
    HostProblem hp(s);
    hp.FillRandom(17);
    MethodConfig c;
    c.method = Method::kAShape;
    c.a_shape.local_tokens = 512;
    Compare(hp, c, 48, 2e-3,
            absl::StrCat("hq ", sh.hq, " d ", sh.d, " causal ", sh.causal, " ", c.DebugString()));
  }
}

}  // namespace
}  // namespace spattn
