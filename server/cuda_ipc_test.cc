// CUDA IPC handles end to end on the CPU backend (GPU machines only; skipped without a GPU):
// another process keeps Q/K/V and the output buffer in GPU memory, the worker opens its IPC
// handle as a registered CUDA region and as a raw CudaIpcRef, copies the tensors to the host,
// computes there, and writes the output back into GPU memory.
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/attention_client.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/host_problem.h"
#include "kernels/reference/reference_attention.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

using testing_util::FromHex;
using testing_util::ProducerProcess;

using testing_util::Describe;
using testing_util::InlineRequest;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // bf16 output: twice its unit roundoff, plus accumulation noise.
    if (!(std::fabs(double{got[i]} - want[i]) <= 2.0 / 256 * std::fabs(want[i]) + 1e-5)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(CudaIpcTest, WorkerReadsAndWritesGpuMemoryOfAnotherProcess) {
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no GPU here: " << why;
  ProblemShape shape;
  shape.q_lens = {200};
  shape.k_lens = {300};
  shape.num_q_heads = 4;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  HostProblem hp(shape);
  hp.FillRandom(5);
  const size_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string input = dir + "/ipc_in.bin";
  {
    std::ofstream f(input, std::ios::binary);
    f.write(reinterpret_cast<const char*>(hp.q_bytes().data()), qb);
    f.write(reinterpret_cast<const char*>(hp.k_bytes().data()), kb);
    f.write(reinterpret_cast<const char*>(hp.v_bytes().data()), kb);
  }
  const char* producer_env = getenv("SPATTN_IPC_PRODUCER");
  const std::string producer_bin = producer_env ? producer_env : "server/cuda_ipc_producer";
  ProducerProcess producer;
  ASSERT_TRUE(producer.Start(producer_bin, input, qb));
  const std::string hello = producer.ReadLine();
  ASSERT_EQ(hello.rfind("handle ", 0), 0u) << "producer said: '" << hello << "'";
  const std::string handle = FromHex(hello.substr(7, 128));
  const uint64_t total = std::stoull(hello.substr(hello.rfind(' ') + 1));
  ASSERT_EQ(total, qb * 2 + kb * 2);

  WorkerOptions o;
  // The CPU backend reading GPU memory through handles (copies to the host and back);
  // cuda_backend_test covers the CUDA backend.
  o.devices = "cpu";
  o.metrics_address = "";
  // Shared memory / CUDA IPC over loopback TCP (security_test covers the Unix-socket path).
  o.allow_tcp_shm = true;
  auto worker = WorkerServer::Start(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ClientOptions co;
  co.address = (*worker)->address();
  auto client = AttentionClient::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();

  auto md = (*client)->Metadata();
  ASSERT_TRUE(md.ok());
  bool has_gpu = false;
  for (const auto& d : md->devices()) has_gpu |= d.kind() == "cuda";
  EXPECT_TRUE(has_gpu);

  const absl::Status reg = (*client)->RegisterCudaRegion("gpu", handle, 0, total);
  ASSERT_TRUE(reg.ok()) << Describe(reg);
  auto regions = (*client)->ListRegions();
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].kind(), "cuda");

  const AttentionProblem& p = hp.problem();
  std::vector<float> want;
  ASSERT_TRUE(ReferenceAttention(p, {}, {}, &want, nullptr).ok());

  // 1. Everything in the registered CUDA region, output written back into it.
  v1::AttentionRequest req = InlineRequest(hp);
  req.set_causal(true);
  *req.mutable_q() = RegionTensor(p.dtype, {p.total_q(), 4, 64}, "gpu", 0, qb);
  *req.mutable_k() = RegionTensor(p.dtype, {p.total_k(), 2, 64}, "gpu", qb, kb);
  *req.mutable_v() = RegionTensor(p.dtype, {p.total_k(), 2, 64}, "gpu", qb + kb, kb);
  *req.mutable_output() = RegionTensor(p.dtype, {p.total_q(), 4, 64}, "gpu", qb + 2 * kb, qb);
  auto resp = (*client)->ComputeAttention(req);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  const std::string dump = dir + "/ipc_out.bin";
  producer.Send("dump " + dump);
  ASSERT_EQ(producer.ReadLine(), "dumped");
  std::ifstream f(dump, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), total);
  std::vector<float> got(qb / 2);
  ToFloat(bytes.data() + qb + 2 * kb, p.dtype, static_cast<int64_t>(got.size()), got.data());
  ExpectClose(got, want, "registered CUDA region");

  // 2. A raw IPC handle for Q, the rest inline, output inline.
  v1::AttentionRequest raw = InlineRequest(hp);
  raw.set_causal(true);
  v1::CudaIpcRef* c = raw.mutable_q()->mutable_cuda_ipc();
  c->set_ipc_handle(handle);
  c->set_device_id(0);
  c->set_offset(0);
  c->set_byte_size(qb);
  resp = (*client)->ComputeAttention(raw);
  ASSERT_TRUE(resp.ok()) << Describe(resp.status());
  auto inline_out = DecodeInlineOutput(*resp);
  ASSERT_TRUE(inline_out.ok());
  ExpectClose(*inline_out, want, "raw CudaIpcRef");

  // Bounds are checked against the registered size.
  v1::AttentionRequest past = req;
  past.mutable_output()->mutable_region()->set_offset(total - qb + 2);
  auto bad = (*client)->ComputeAttention(past);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();

  // The worker reports the memory in use on the GPU the handles live on.
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, (*worker)->registry().Collect());
  const std::string metrics = text.str();
  const size_t at = metrics.find("\nspattn_gpu_memory_used_bytes ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics.substr(at + 30)), 0);

  auto n = (*client)->UnregisterRegion("gpu");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  (*worker)->Shutdown();
  EXPECT_EQ(producer.Stop(), 0);
}

}  // namespace
}  // namespace spattn
