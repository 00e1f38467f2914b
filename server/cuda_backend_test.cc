// The worker on the CUDA backend (GPU machines only; every test skips without a GPU): inline,
// shared-memory and CUDA IPC tensors against the CPU double-precision reference (FlashAttention's
// tolerance rule, kernels/cuda/attention/cuda_test_util.h), GPU-built (dense, a_shape) and
// CPU-built (vertical_slash) indexes, several head groups in one request, no copies for CUDA IPC
// tensors, unusable handles, pools too small for a request, dtypes the GPU does not compute.
#include "server/cuda_backend.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/attention_client.h"
#include "kernels/builders/build_index.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/host_problem.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

using testing_util::FromHex;
using testing_util::ProducerProcess;

using testing_util::Describe;
using testing_util::InlineRequest;

bool HasGpu(std::string* why) { return !ListCudaDevices(why).empty(); }

#define SKIP_WITHOUT_GPU()                                \
  do {                                                    \
    std::string why;                                      \
    if (!HasGpu(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

ProblemShape Shape(DType dtype) {
  ProblemShape s;
  s.q_lens = {70, 131};
  s.k_lens = {150, 131};  // Sequence 0: a prefill chunk (70 queries at the end of 150 keys).
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.dtype = dtype;
  return s;
}

std::string ShapeString(const ProblemShape& s) {
  return absl::StrCat("q_lens=", s.q_lens[0], ",", s.q_lens[1], " k_lens=", s.k_lens[0], ",",
                      s.k_lens[1], " hq=", s.num_q_heads, " hkv=", s.num_kv_heads,
                      " d=", s.head_dim, " dtype=", DTypeName(s.dtype));
}

MethodConfig Config(Method m) {
  MethodConfig c;
  c.method = m;
  c.a_shape.sink_tokens = 4;
  c.a_shape.local_tokens = 24;
  c.vertical_slash.last_q = 16;
  c.vertical_slash.vertical_size = 12;
  c.vertical_slash.slash_size = 10;
  c.vertical_slash.forced_columns = 2;
  c.vertical_slash.forced_diagonals = 4;
  return c;
}

void SetMethod(const MethodConfig& c, v1::MethodConfig* proto) {
  proto->set_method(ToProtoMethod(c.method));
  if (c.method == Method::kAShape) {
    proto->mutable_a_shape()->set_sink_tokens(c.a_shape.sink_tokens);
    proto->mutable_a_shape()->set_local_tokens(c.a_shape.local_tokens);
  }
  if (c.method == Method::kVerticalSlash) {
    auto* v = proto->mutable_vertical_slash();
    v->set_last_q(c.vertical_slash.last_q);
    v->set_vertical_size(c.vertical_slash.vertical_size);
    v->set_slash_size(c.vertical_slash.slash_size);
    v->set_forced_columns(c.vertical_slash.forced_columns);
    v->set_forced_diagonals(c.vertical_slash.forced_diagonals);
  }
}

// Checks O (and the LSE when given) of every head against the reference under the index each
// head's method builds on the host from the same Q/K.
// `config` (when given) replaces Config(method) for the heads of its method; `block_m` is the
// worker's.
void CheckOutput(HostProblem& hp, const std::vector<Method>& method_of_head,
                 const std::vector<float>& o, const std::vector<float>& lse,
                 const std::string& what, const MethodConfig* config = nullptr, int block_m = 64) {
  const AttentionProblem& p = hp.problem();
  std::map<Method, std::vector<int>> groups;
  for (int h = 0; h < p.num_q_heads; ++h) groups[method_of_head[h]].push_back(h);
  std::vector<float> lse_or_fill = lse;
  if (lse_or_fill.empty()) lse_or_fill.assign(static_cast<size_t>(p.num_q_heads) * p.total_q(), 0);
  for (const auto& g : groups) {
    SparseIndex index;
    BuildOptions options;
    options.block_m = block_m;
    const MethodConfig c =
        config != nullptr && config->method == g.first ? *config : Config(g.first);
    ASSERT_TRUE(BuildSparseIndex(p, c, g.second, options, &index).ok());
    const std::vector<cuda_test::SampledRow> rows = cuda_test::SampleRows(p, g.second, 1000);
    std::string bad = cuda_test::CheckRows(p, &index, rows, o, lse_or_fill);
    if (lse.empty()) bad = bad.substr(0, bad.find("LSE error"));  // No LSE was asked for.
    EXPECT_EQ(bad, "") << what << " " << MethodName(g.first);
  }
}

// The value of one sample line of the metrics text ("name{labels} value"), or -1.
double Sample(WorkerServer& w, const std::string& prefix) {
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, w.registry().Collect());
  const std::string s = text.str();
  const size_t at = s.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  const std::string line = s.substr(at + 1, s.find('\n', at + 1) - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

class CudaBackendTest : public ::testing::Test {
 protected:
  // One worker for the suite: every GPU test talks to it.
  static void SetUpTestSuite() {
    if (!HasGpu(nullptr)) return;
    WorkerOptions o;
    o.devices = "cuda:0";
    o.gpu_workspace_bytes = 64 << 20;
    o.gpu_staging_bytes = 256 << 20;
    // Shared memory / CUDA IPC over loopback TCP (security_test covers the Unix-socket path).
    o.allow_tcp_shm = true;
    auto w = WorkerServer::Start(o);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = w->release();
    ClientOptions co;
    co.address = worker_->address();
    auto c = AttentionClient::Connect(co);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = c->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete worker_;
    client_ = nullptr;
    worker_ = nullptr;
  }

  static WorkerServer* worker_;
  static AttentionClient* client_;
};

WorkerServer* CudaBackendTest::worker_ = nullptr;
AttentionClient* CudaBackendTest::client_ = nullptr;

// The backend's fallback rule (no GPU needed), one for every method: the CPU builder takes a
// build the GPU builder refused as past its limits (UNIMPLEMENTED: Saap's assets or top_l,
// sampled_lines' rows per block, ...); any other refusal fails the request with its own status.
TEST(CudaBackendFallbackTest, OnlyGpuLimitsGoToTheCpuBuilder) {
  const absl::Status limit = absl::UnimplementedError("past a GPU builder limit");
  for (Method m : kAllMethods) {
    EXPECT_EQ(GpuBuildGoesToCpu(m, limit), CpuBuilderAvailable(m)) << MethodName(m);
  }
  EXPECT_TRUE(GpuBuildGoesToCpu(
      Method::kSaap,
      absl::UnimplementedError("saap.top_l: the GPU builder visits at most 1024 buckets")));
  EXPECT_TRUE(GpuBuildGoesToCpu(
      Method::kSampledLines,
      absl::UnimplementedError("sampled_lines.rows_per_block: the GPU index builder samples at "
                               "most 64 rows per query block, got 96")));
  for (Method m : {Method::kSaap, Method::kSampledLines, Method::kVerticalSlash}) {
    for (const absl::Status& s :
         {absl::OkStatus(), absl::InvalidArgumentError("saap.classify_rows must be > 0"),
          absl::FailedPreconditionError("saap: no layer assets"),
          absl::ResourceExhaustedError("workspace"), absl::InternalError("cuda"),
          absl::UnavailableError("device failed")}) {
      EXPECT_FALSE(GpuBuildGoesToCpu(m, s)) << MethodName(m) << " " << s;
    }
  }
}

TEST_F(CudaBackendTest, MetadataSaysCuda) {
  SKIP_WITHOUT_GPU();
  ASSERT_NE(client_, nullptr) << "the worker did not start";
  auto md = client_->Metadata();
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->device(), "cuda");
  EXPECT_EQ(worker_->device_names(), std::vector<std::string>{"cuda:0"});
  for (const auto& m : md->methods()) {
    auto method = ParseMethod(m.name());
    ASSERT_TRUE(method.ok());
    // Every method with a builder anywhere runs on the GPU kernel.
    EXPECT_EQ(m.implemented_cuda(), m.implemented_cpu() || m.gpu_index_builder()) << m.name();
  }
  EXPECT_TRUE(md->methods(0).gpu_index_builder());  // dense
  EXPECT_TRUE(md->methods(1).gpu_index_builder());  // a_shape
  ASSERT_EQ(md->dtypes_size(), 2);                  // bf16 and fp16, no fp32 on the GPU.
  EXPECT_EQ(*client_->Health(), "SERVING");
}

TEST_F(CudaBackendTest, InlineAndSharedMemoryMatchTheReference) {
  SKIP_WITHOUT_GPU();
  ASSERT_NE(client_, nullptr) << "the worker did not start";
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const ProblemShape shape = Shape(dtype);
    HostProblem hp(shape);
    hp.FillRandom(17);
    const AttentionProblem& p = hp.problem();
    for (Method m : {Method::kDense, Method::kAShape, Method::kVerticalSlash}) {
      const std::string what = absl::StrCat(ShapeString(shape), " ", MethodName(m));
      const std::vector<Method> per_head(p.num_q_heads, m);
      // Inline in, inline out, with the LSE.
      v1::AttentionRequest req = InlineRequest(hp);
      req.set_causal(true);
      SetMethod(Config(m), req.mutable_method_override());
      req.set_return_lse(true);
      req.set_return_stats(true);
      auto resp = client_->ComputeAttention(req);
      ASSERT_TRUE(resp.ok()) << what << ": " << Describe(resp.status());
      EXPECT_EQ(resp->device(), "cuda");
      EXPECT_GT(resp->timings().kernel_seconds(), 0) << what;
      EXPECT_GT(resp->timings().transfer_seconds(), 0) << what;
      auto o = DecodeInlineOutput(*resp);
      auto lse = DecodeInlineLse(*resp);
      ASSERT_TRUE(o.ok() && lse.ok()) << what;
      CheckOutput(hp, per_head, *o, *lse, "inline " + what);
      if (m != Method::kDense) {
        EXPECT_LT(resp->density(), 1.0) << what;
      }

      // Everything in one shared-memory region, the output written into it.
      const size_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
      const std::string key = testing_util::UniqueShmKey("cb");
      auto shm = SharedMemoryRegion::Create(key, 2 * qb + 2 * kb);
      ASSERT_TRUE(shm.ok()) << shm.status();
      ASSERT_TRUE((*shm)->Write(0, hp.q_bytes().data(), qb).ok());
      ASSERT_TRUE((*shm)->Write(qb, hp.k_bytes().data(), kb).ok());
      ASSERT_TRUE((*shm)->Write(qb + kb, hp.v_bytes().data(), kb).ok());
      ASSERT_TRUE(client_->RegisterSystemRegion("cb", **shm).ok());
      v1::AttentionRequest sreq = req;
      sreq.set_return_lse(false);
      const int hq = p.num_q_heads, hk = p.num_kv_heads, d = p.head_dim;
      *sreq.mutable_q() = RegionTensor(dtype, {p.total_q(), hq, d}, "cb", 0, qb);
      *sreq.mutable_k() = RegionTensor(dtype, {p.total_k(), hk, d}, "cb", qb, kb);
      *sreq.mutable_v() = RegionTensor(dtype, {p.total_k(), hk, d}, "cb", qb + kb, kb);
      *sreq.mutable_output() = RegionTensor(dtype, {p.total_q(), hq, d}, "cb", qb + 2 * kb, qb);
      auto sresp = client_->ComputeAttention(sreq);
      ASSERT_TRUE(sresp.ok()) << what << ": " << Describe(sresp.status());
      std::vector<float> so(static_cast<size_t>(p.total_q()) * hq * d);
      ToFloat((*shm)->data() + qb + 2 * kb, dtype, static_cast<int64_t>(so.size()), so.data());
      CheckOutput(hp, per_head, so, {}, "shm " + what);
      ASSERT_TRUE(client_->UnregisterRegion("cb").ok());
    }
  }
  // Shared-memory regions are page-locked while a GPU serves; the copies were counted.
  EXPECT_GT(
      Sample(*worker_, "spattn_transfer_bytes_total{direction=\"h2d\",handle_kind=\"system\"}"), 0);
  EXPECT_GT(
      Sample(*worker_, "spattn_transfer_bytes_total{direction=\"h2d\",handle_kind=\"inline\"}"), 0);
}

TEST_F(CudaBackendTest, SeveralHeadGroupsInOneRequest) {
  SKIP_WITHOUT_GPU();
  ASSERT_NE(client_, nullptr) << "the worker did not start";
  HostProblem hp(Shape(DType::kBF16));
  hp.FillRandom(23);
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  req.set_return_lse(true);
  req.set_return_stats(true);
  SetMethod(Config(Method::kDense), req.mutable_method_override());
  const std::vector<Method> per_head = {Method::kDense, Method::kAShape, Method::kVerticalSlash,
                                        Method::kAShape};
  for (int h = 1; h < 4; ++h) {
    auto* o = req.add_head_overrides();
    o->set_head(h);
    SetMethod(Config(per_head[h]), o->mutable_method());
  }
  auto resp = client_->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  ASSERT_EQ(resp->heads_size(), 4);
  for (int h = 0; h < 4; ++h) EXPECT_EQ(resp->heads(h).method_name(), MethodName(per_head[h]));
  auto o = DecodeInlineOutput(*resp);
  auto lse = DecodeInlineLse(*resp);
  ASSERT_TRUE(o.ok() && lse.ok());
  CheckOutput(hp, per_head, *o, *lse, "mixed heads");
}

// A request past a GPU builder's limits is served by the CPU builder (the fallback rule above):
// sampled_lines with 96 sampled rows per 128-row query block (the GPU builder samples at most 64
// and refuses the request before any launch) gives the output of the CPU-built index.
TEST(CudaBackendFallbackTest, RequestPastGpuBuilderLimitsIsBuiltOnTheCpu) {
  SKIP_WITHOUT_GPU();
  WorkerOptions wo;
  wo.devices = "cuda:0";
  wo.gpu_workspace_bytes = 64 << 20;
  wo.gpu_staging_bytes = 64 << 20;
  wo.block_m = 128;
  auto w = WorkerServer::Start(wo);
  ASSERT_TRUE(w.ok()) << w.status();
  ClientOptions co;
  co.address = (*w)->address();
  auto client = AttentionClient::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();

  HostProblem hp(Shape(DType::kBF16));  // Query blocks of 70, 128 and 3 rows.
  hp.FillRandom(29);
  MethodConfig c;
  c.method = Method::kSampledLines;
  c.sampled_lines.rows_per_block = 96;
  c.sampled_lines.last_q = 16;
  c.sampled_lines.local_tokens = 16;
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  req.set_return_lse(true);
  v1::MethodConfig* m = req.mutable_method_override();
  m->set_method(ToProtoMethod(c.method));
  m->mutable_sampled_lines()->set_rows_per_block(c.sampled_lines.rows_per_block);
  m->mutable_sampled_lines()->set_last_q(c.sampled_lines.last_q);
  m->mutable_sampled_lines()->set_local_tokens(c.sampled_lines.local_tokens);
  auto resp = (*client)->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  EXPECT_EQ(resp->device(), "cuda");
  for (const auto& h : resp->heads()) EXPECT_EQ(h.method_name(), MethodName(c.method));
  auto o = DecodeInlineOutput(*resp);
  auto lse = DecodeInlineLse(*resp);
  ASSERT_TRUE(o.ok() && lse.ok());
  const std::vector<Method> per_head(hp.problem().num_q_heads, c.method);
  CheckOutput(hp, per_head, *o, *lse, "sampled_lines rows_per_block 96", &c, 128);
}

TEST_F(CudaBackendTest, CudaIpcTensorsAreUsedInPlace) {
  SKIP_WITHOUT_GPU();
  ASSERT_NE(client_, nullptr) << "the worker did not start";
  HostProblem hp(Shape(DType::kBF16));
  hp.FillRandom(29);
  const AttentionProblem& p = hp.problem();
  const size_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string input = dir + "/cb_ipc_in.bin";
  {
    std::ofstream f(input, std::ios::binary);
    f.write(reinterpret_cast<const char*>(hp.q_bytes().data()), qb);
    f.write(reinterpret_cast<const char*>(hp.k_bytes().data()), kb);
    f.write(reinterpret_cast<const char*>(hp.v_bytes().data()), kb);
  }
  const char* producer_env = getenv("SPATTN_IPC_PRODUCER");
  ProducerProcess producer;
  ASSERT_TRUE(producer.Start(producer_env ? producer_env : "server/cuda_ipc_producer", input, qb));
  const std::string hello = producer.ReadLine();
  ASSERT_EQ(hello.rfind("handle ", 0), 0u) << "producer said: '" << hello << "'";
  const std::string handle = FromHex(hello.substr(7, 128));
  const uint64_t total = std::stoull(hello.substr(hello.rfind(' ') + 1));
  ASSERT_TRUE(client_->RegisterCudaRegion("ipc", handle, 0, total).ok());

  const double h2d_before =
      Sample(*worker_, "spattn_transfer_bytes_total{direction=\"h2d\",handle_kind=\"cuda\"}");
  const double d2h_before =
      Sample(*worker_, "spattn_transfer_bytes_total{direction=\"d2h\",handle_kind=\"cuda\"}");
  const int hq = p.num_q_heads, hk = p.num_kv_heads, d = p.head_dim;
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  SetMethod(Config(Method::kAShape), req.mutable_method_override());
  *req.mutable_q() = RegionTensor(p.dtype, {p.total_q(), hq, d}, "ipc", 0, qb);
  *req.mutable_k() = RegionTensor(p.dtype, {p.total_k(), hk, d}, "ipc", qb, kb);
  *req.mutable_v() = RegionTensor(p.dtype, {p.total_k(), hk, d}, "ipc", qb + kb, kb);
  *req.mutable_output() = RegionTensor(p.dtype, {p.total_q(), hq, d}, "ipc", qb + 2 * kb, qb);
  auto resp = client_->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  // GPU-built index, tensors and output in the other process's GPU memory: nothing copied.
  EXPECT_EQ(Sample(*worker_, "spattn_transfer_bytes_total{direction=\"h2d\",handle_kind=\"cuda\"}"),
            h2d_before);
  EXPECT_EQ(Sample(*worker_, "spattn_transfer_bytes_total{direction=\"d2h\",handle_kind=\"cuda\"}"),
            d2h_before);
  const std::string dump = dir + "/cb_ipc_out.bin";
  producer.Send("dump " + dump);
  ASSERT_EQ(producer.ReadLine(), "dumped");
  std::ifstream f(dump, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), total);
  std::vector<float> got(static_cast<size_t>(p.total_q()) * hq * d);
  ToFloat(bytes.data() + qb + 2 * kb, p.dtype, static_cast<int64_t>(got.size()), got.data());
  CheckOutput(hp, std::vector<Method>(hq, Method::kAShape), got, {}, "cuda region a_shape");

  // Raw CudaIpcRefs, vertical_slash built on the GPU, output inline, the recall estimated on the
  // GPU (issue 11): nothing of Q/K comes to the host.
  v1::AttentionRequest raw = InlineRequest(hp);
  raw.set_causal(true);
  raw.set_estimate_recall(true);
  SetMethod(Config(Method::kVerticalSlash), raw.mutable_method_override());
  const uint64_t offsets[3] = {0, qb, qb + kb};
  const uint64_t sizes[3] = {qb, kb, kb};
  v1::TensorRef* refs[3] = {raw.mutable_q(), raw.mutable_k(), raw.mutable_v()};
  for (int i = 0; i < 3; ++i) {
    v1::CudaIpcRef* c = refs[i]->mutable_cuda_ipc();
    c->set_ipc_handle(handle);
    c->set_device_id(0);
    c->set_offset(offsets[i]);
    c->set_byte_size(sizes[i]);
  }
  resp = client_->ComputeAttention(raw);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  auto out = DecodeInlineOutput(*resp);
  ASSERT_TRUE(out.ok());
  CheckOutput(hp, std::vector<Method>(hq, Method::kVerticalSlash), *out, {}, "raw ipc v_s");
  for (const auto& h : resp->heads()) {
    EXPECT_GT(h.recall(), 0.0) << h.head();
    EXPECT_LE(h.recall(), 1.0 + 1e-9) << h.head();
  }
  EXPECT_LE(
      Sample(*worker_, "spattn_transfer_bytes_total{direction=\"d2h\",handle_kind=\"cuda_ipc\"}"),
      0);

  // A handle on a GPU this worker does not have, and bytes that are no handle at all.
  v1::AttentionRequest wrong = raw;
  wrong.mutable_q()->mutable_cuda_ipc()->set_device_id(7);
  auto r1 = client_->ComputeAttention(wrong);
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kFailedPrecondition) << Describe(r1.status());
  EXPECT_EQ(r1.status().message().rfind("q.cuda_ipc", 0), 0u) << Describe(r1.status());
  v1::AttentionRequest garbage = raw;
  garbage.mutable_k()->mutable_cuda_ipc()->set_ipc_handle(std::string(64, '\x05'));
  auto r2 = client_->ComputeAttention(garbage);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kFailedPrecondition) << Describe(r2.status());
  EXPECT_EQ(r2.status().message().rfind("k.cuda_ipc", 0), 0u) << Describe(r2.status());
  EXPECT_EQ(client_->RegisterCudaRegion("g7", handle, 7, total).code(),
            absl::StatusCode::kFailedPrecondition);
  // Still serving.
  EXPECT_EQ(*client_->Health(), "SERVING");
  resp = client_->ComputeAttention(req);
  EXPECT_TRUE(resp.ok()) << Describe(resp.status());

  ASSERT_TRUE(client_->UnregisterRegion("ipc").ok());
  EXPECT_GT(Sample(*worker_, "spattn_gpu_memory_used_bytes "), 0);
  EXPECT_EQ(producer.Stop(), 0);
}

TEST_F(CudaBackendTest, Fp32IsFailedPrecondition) {
  SKIP_WITHOUT_GPU();
  ASSERT_NE(client_, nullptr) << "the worker did not start";
  HostProblem hp(Shape(DType::kF32));
  hp.FillRandom(3);
  v1::AttentionRequest req = InlineRequest(hp);
  auto resp = client_->ComputeAttention(req);
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kFailedPrecondition) << resp.status();
  EXPECT_EQ(resp.status().message().rfind("dtype", 0), 0u) << resp.status();
}

TEST(CudaBackendPoolsTest, TooSmallPoolsAreResourceExhaustedAndTheWorkerKeepsServing) {
  SKIP_WITHOUT_GPU();
  WorkerOptions o;
  o.devices = "cuda:0";
  // The sparse work schedule alone takes ~33 KiB of workspace; a small problem's index fits in
  // 64 KiB, 2048 index rows (16 heads x 128 blocks) do not.
  o.gpu_workspace_bytes = 64 << 10;
  o.gpu_staging_bytes = 40 << 20;  // Q + O of 8192 x 16 heads x d 64 (32 MiB) fit; 16384 not.
  // Shared memory / CUDA IPC over loopback TCP (security_test covers the Unix-socket path).
  o.allow_tcp_shm = true;
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ClientOptions co;
  co.address = (*w)->address();
  auto client = AttentionClient::Connect(co);
  ASSERT_TRUE(client.ok());

  HostProblem small(Shape(DType::kBF16));
  small.FillRandom(5);
  v1::AttentionRequest ok_req = InlineRequest(small);
  SetMethod(Config(Method::kAShape), ok_req.mutable_method_override());
  auto ok = (*client)->ComputeAttention(ok_req);
  ASSERT_TRUE(ok.ok()) << Describe(ok.status());

  ProblemShape big_shape;
  big_shape.q_lens = {16384};
  big_shape.num_q_heads = 16;
  big_shape.num_kv_heads = 1;
  big_shape.head_dim = 64;
  HostProblem big(big_shape);
  big.FillRandom(6);
  v1::AttentionRequest big_req = InlineRequest(big);
  SetMethod(Config(Method::kAShape), big_req.mutable_method_override());
  auto staging = (*client)->ComputeAttention(big_req);
  EXPECT_EQ(staging.status().code(), absl::StatusCode::kResourceExhausted) << staging.status();
  EXPECT_NE(staging.status().message().find("--gpu_staging_bytes"), std::string::npos)
      << staging.status();

  ProblemShape mid_shape = big_shape;
  mid_shape.q_lens = {8192};
  HostProblem mid(mid_shape);
  mid.FillRandom(7);
  v1::AttentionRequest mid_req = InlineRequest(mid);
  SetMethod(Config(Method::kAShape), mid_req.mutable_method_override());
  auto workspace = (*client)->ComputeAttention(mid_req);
  EXPECT_EQ(workspace.status().code(), absl::StatusCode::kResourceExhausted) << workspace.status();
  EXPECT_NE(workspace.status().message().find("--gpu_workspace_bytes"), std::string::npos)
      << workspace.status();

  EXPECT_EQ(*(*client)->Health(), "SERVING");
  ok = (*client)->ComputeAttention(ok_req);
  EXPECT_TRUE(ok.ok()) << Describe(ok.status());
  auto out = DecodeInlineOutput(*ok);
  ASSERT_TRUE(out.ok());
  CheckOutput(small, std::vector<Method>(4, Method::kAShape), *out, {}, "after exhaustion");
  // For the GPU-run logs: how long the shutdown (drain, stop, freeing the GPU pools) takes.
  client->reset();
  const absl::Time stop = absl::Now();
  w->reset();
  std::cerr << "worker shutdown took " << absl::ToDoubleSeconds(absl::Now() - stop) << " s\n";
}

// Issue 11: the recall guard runs on the CUDA backend by default, its estimate computed on the
// GPU (no Q/K copies to the host: the only device-to-host bytes are the output's): every head
// carries its estimate without estimate_recall; heads of the worker's default config that fall
// short are widened to the target or made dense; estimate_recall (exact, more rows) also runs on
// the GPU and agrees with the guard's estimate.
TEST(CudaBackendGuardTest, GuardsOnTheGpuByDefault) {
  SKIP_WITHOUT_GPU();
  WorkerOptions o;
  o.devices = "cuda:0";
  o.gpu_workspace_bytes = 256 << 20;
  o.gpu_staging_bytes = 256 << 20;
  o.default_method.method = Method::kAShape;  // far too narrow for random Q/K
  o.default_method.a_shape.sink_tokens = 4;
  o.default_method.a_shape.local_tokens = 64;
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ClientOptions co;
  co.address = (*w)->address();
  auto client = AttentionClient::Connect(co);
  ASSERT_TRUE(client.ok());
  ProblemShape s;
  s.q_lens = {3000};
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_dim = 128;
  HostProblem hp(s);
  hp.FillRandom(23);
  const std::string d2h = "spattn_transfer_bytes_total{direction=\"d2h\",handle_kind=\"inline\"}";
  const double before = std::max(0.0, Sample(**w, d2h));
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  auto resp = (*client)->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  const double out_bytes = 3000.0 * 8 * 128 * 2;
  EXPECT_EQ(Sample(**w, d2h) - before, out_bytes) << "only the output comes to the host";
  ASSERT_EQ(resp->heads_size(), 8);
  std::vector<double> guard(8);
  for (const auto& h : resp->heads()) {
    guard[h.head()] = h.recall();
    EXPECT_GT(h.recall(), 0.0) << h.head();
    EXPECT_LE(h.recall(), 1.0 + 1e-9) << h.head();
    if (h.method_name() != "dense") {
      EXPECT_GE(h.recall(), 0.95) << h.head() << h.method_name();
    }
  }
  EXPECT_GT(resp->timings().recall_seconds(), 0);
  // The output is what the guard chose: the reference of each head's served index is checked
  // by the density (below 1 for every sparse head).
  req.set_estimate_recall(true);
  auto exact = (*client)->ComputeAttention(req);
  ASSERT_TRUE(exact.ok()) << Describe(exact.status());
  EXPECT_EQ(Sample(**w, d2h) - before, 2 * out_bytes);
  for (const auto& h : exact->heads()) {
    EXPECT_NEAR(h.recall(), guard[h.head()], 0.05) << h.head() << " " << h.method_name();
  }
}

}  // namespace
}  // namespace spattn
