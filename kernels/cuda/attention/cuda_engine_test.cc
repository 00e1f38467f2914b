// CudaAttentionEngine beyond the kernels: GPU index builders against their CPU twins, the
// workspace pool, and the status codes of bad calls. The no-device behaviour runs everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/host_problem.h"

namespace spattn {
namespace {

using cuda_test::BuildAndDownloadIndex;
using cuda_test::BuildAndRunIndex;
using cuda_test::DeviceProblem;

bool HaveGpu(std::string* why) { return !ListCudaDevices(why).empty(); }

#define SKIP_WITHOUT_GPU()                                         \
  do {                                                             \
    std::string why;                                               \
    if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Runs on every machine: without a device, Create says FAILED_PRECONDITION.
TEST(CudaEngineTest, CreateWithoutDeviceIsFailedPrecondition) {
  std::string why;
  const int devices = static_cast<int>(ListCudaDevices(&why).size());
  auto e = CudaAttentionEngine::Create(devices, 1 << 20);  // one past the last device
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
}

std::unique_ptr<HostProblem> Problem(std::vector<int32_t> q, std::vector<int32_t> k, int hq,
                                     int hkv, int d, bool causal, uint64_t seed) {
  ProblemShape s;
  s.q_lens = std::move(q);
  s.k_lens = std::move(k);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.causal = causal;
  auto hp = std::make_unique<HostProblem>(s);
  hp->FillRandom(seed);
  return hp;
}

void ExpectSameIndex(const SparseIndex& a, const SparseIndex& b, const std::string& config) {
  EXPECT_EQ(a.block_m, b.block_m) << config;
  EXPECT_EQ(a.heads, b.heads) << config;
  EXPECT_EQ(a.block_offsets, b.block_offsets) << config;
  EXPECT_EQ(a.range_indptr, b.range_indptr) << config;
  EXPECT_EQ(a.range_start, b.range_start) << config;
  EXPECT_EQ(a.range_len, b.range_len) << config;
  EXPECT_EQ(a.col_indptr, b.col_indptr) << config;
  EXPECT_EQ(a.col_idx, b.col_idx) << config;
}

TEST(CudaEngineTest, GpuBuildersMatchCpuBuilders) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, 64 << 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  struct Shape {
    std::vector<int32_t> q, k;
    bool causal;
  };
  const std::vector<Shape> shapes = {
      {{1}, {}, true},
      {{63, 65, 1, 300}, {63, 1000, 7, 301}, true},
      {{5000}, {}, true},
      {{129, 64}, {4000, 64}, false},
  };
  const std::vector<std::pair<int, int>> ashape_params = {{128, 3968}, {0, 1}, {5, 40}, {64, 64}};
  for (const Shape& sh : shapes) {
    auto hp = Problem(sh.q, sh.k, 4, 2, 64, sh.causal, 1);
    for (int block_m : {32, 64, 128}) {
      for (const std::vector<int>& heads : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{2}}) {
        MethodConfig dense;
        SparseIndex cpu, gpu;
        ASSERT_TRUE(BuildDenseIndex(hp->problem(), heads, block_m, &cpu).ok());
        ASSERT_TRUE(
            BuildAndDownloadIndex(**engine, hp->problem(), dense, heads, block_m, &gpu).ok());
        const std::string config =
            absl::StrCat("q_lens[0]=", sh.q[0], " block_m=", block_m, " heads=", heads.size());
        ExpectSameIndex(cpu, gpu, "dense " + config);
        for (auto [sink, local] : ashape_params) {
          MethodConfig a;
          a.method = Method::kAShape;
          a.a_shape.sink_tokens = sink;
          a.a_shape.local_tokens = local;
          SparseIndex cpu_a, merged;
          ASSERT_TRUE(BuildAShapeIndex(hp->problem(), a.a_shape, heads, block_m, &cpu_a).ok());
          ASSERT_TRUE(
              BuildAndDownloadIndex(**engine, hp->problem(), a, heads, block_m, &merged).ok());
          ExpectSameIndex(cpu_a, merged,
                          absl::StrCat("a_shape sink=", sink, " local=", local, " ", config));
        }
      }
    }
  }
}

// The GPU-built index runs the same computation as the uploaded CPU-built one, bit for bit.
TEST(CudaEngineTest, BuiltIndexRunsLikeUploadedIndex) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaAttentionEngine::Create(0, 256 << 20);
  ASSERT_TRUE(engine.ok());
  auto hp = Problem({300, 77}, {1000, 77}, 8, 2, 128, true, 2);
  MethodConfig config;
  config.method = Method::kAShape;
  config.a_shape.sink_tokens = 64;
  config.a_shape.local_tokens = 256;
  const std::vector<int> heads = {0, 3, 5};
  SparseIndex cpu;
  ASSERT_TRUE(BuildAShapeIndex(hp->problem(), config.a_shape, heads, 64, &cpu).ok());
  auto a = DeviceProblem::Create(0, *hp);
  auto b = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Poison().ok() && (*b)->Poison().ok());
  CudaStageTimes times;
  ASSERT_TRUE(BuildAndRunIndex(**engine, (*a)->problem(), config, heads, 64, &times).ok());
  EXPECT_GT(times.index_seconds, 0);
  EXPECT_GT(times.schedule_seconds, 0);
  EXPECT_GT(times.kernel_seconds, 0);
  ASSERT_TRUE((*engine)->RunSparse((*b)->problem(), cpu).ok());
  std::vector<float> oa, la, ob, lb;
  ASSERT_TRUE((*a)->Download(&oa, &la).ok());
  ASSERT_TRUE((*b)->Download(&ob, &lb).ok());
  // Compare bytes (NaN poison in untouched heads compares equal that way).
  EXPECT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * 4));
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
}

TEST(CudaEngineTest, BadCallsAnswerPreciseCodes) {
  SKIP_WITHOUT_GPU();
  auto small = CudaAttentionEngine::Create(0, 4096);
  ASSERT_TRUE(small.ok());
  auto engine = CudaAttentionEngine::Create(0, 64 << 20);
  ASSERT_TRUE(engine.ok());
  auto hp = Problem({100}, {}, 4, 2, 64, true, 3);
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  AttentionProblem p = (*dp)->problem();

  // The host path needs room for Q/K/V/O: a 4 KiB pool is too small.
  EXPECT_EQ((*small)->RunHost(hp->problem(), nullptr).code(), absl::StatusCode::kResourceExhausted);
  // Host buffers on the device path, device buffers on the host path.
  EXPECT_EQ((*engine)->RunDense(hp->problem()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->RunHost(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem host_ptr = p;
  host_ptr.q.data = hp->q_bytes().data();
  EXPECT_EQ((*engine)->RunDense(host_ptr).code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem bad_dim = p;
  bad_dim.head_dim = 96;
  SetContiguousStrides(&bad_dim);
  EXPECT_EQ((*engine)->RunDense(bad_dim).code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem fp32 = p;
  fp32.dtype = DType::kF32;
  EXPECT_EQ((*engine)->RunDense(fp32).code(), absl::StatusCode::kInvalidArgument);
  SparseIndex idx32;
  ASSERT_TRUE(BuildDenseIndex(hp->problem(), {0}, 32, &idx32).ok());
  EXPECT_EQ((*engine)->RunSparse(p, idx32).code(), absl::StatusCode::kInvalidArgument);
  SparseIndex broken;
  ASSERT_TRUE(BuildDenseIndex(hp->problem(), {0}, 64, &broken).ok());
  broken.range_len[0] += 1;  // past the block's last key
  EXPECT_EQ((*engine)->RunSparse(p, broken).code(), absl::StatusCode::kInvalidArgument);
  // A method without a GPU builder (if any is left) says UNIMPLEMENTED.
  for (Method m : kAllMethods) {
    if (CudaAttentionEngine::GpuBuilderAvailable(m)) continue;
    MethodConfig none;
    none.method = m;
    EXPECT_EQ(BuildAndRunIndex(**engine, p, none, {0}, 64).code(), absl::StatusCode::kUnimplemented)
        << MethodName(m);
    break;
  }
  MethodConfig bad_ashape;
  bad_ashape.method = Method::kAShape;
  bad_ashape.a_shape.local_tokens = 0;
  EXPECT_EQ(BuildAndRunIndex(**engine, p, bad_ashape, {0}, 64).code(),
            absl::StatusCode::kInvalidArgument);
  // After all that the engine still works.
  EXPECT_TRUE((*engine)->RunDense(p).ok());
}

}  // namespace
}  // namespace spattn
