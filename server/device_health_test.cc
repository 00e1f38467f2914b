// Device routing and device failure, without a GPU: a stand-in "cuda" backend (the CPU backend
// under another name that refuses fp32 like the CUDA one) that can be made to fail the way a
// faulted GPU does. A failed device turns the worker's health NOT_SERVING, answers UNAVAILABLE
// from then on, and requests go to the devices that still work.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "client/attention_client.h"
#include "kernels/host_problem.h"
#include "server/backend.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

using testing_util::Describe;
using testing_util::InlineRequest;

// Thread-safe.
class FlakyGpu : public AttentionBackend {
 public:
  explicit FlakyGpu(std::shared_ptr<std::atomic<bool>> fail)
      : cpu_(MakeCpuBackend()), fail_(std::move(fail)) {}
  std::string kind() const override { return "cuda"; }
  int ordinal() const override { return 0; }
  bool MethodAvailable(Method m) const override { return cpu_->MethodAvailable(m); }
  absl::Status CheckDType(DType dtype) const override {
    if (dtype == DType::kF32) return absl::FailedPreconditionError("dtype: fp32 not on the GPU");
    return absl::OkStatus();
  }
  absl::Status Health() const override {
    return failed_.load() ? absl::UnavailableError("GPU 0 failed: cudaErrorIllegalAddress")
                          : absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<BackendCall>> Begin(const AttentionProblem& p,
                                                     const RequestTensors& t) override {
    if (failed_.load()) return absl::UnavailableError("cuda:0 failed earlier");
    if (fail_->load()) {
      failed_.store(true);
      return absl::InternalError("cuda:0: an illegal memory access was encountered");
    }
    return cpu_->Begin(p, t);
  }

 private:
  std::unique_ptr<AttentionBackend> cpu_;
  std::shared_ptr<std::atomic<bool>> fail_;
  std::atomic<bool> failed_{false};
};

ProblemShape Shape(DType dtype) {
  ProblemShape s;
  s.q_lens = {40};
  s.num_q_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 64;
  s.dtype = dtype;
  return s;
}

struct Fixture {
  std::unique_ptr<WorkerServer> worker;
  std::unique_ptr<AttentionClient> client;
  std::shared_ptr<std::atomic<bool>> fail = std::make_shared<std::atomic<bool>>(false);
};

void Start(bool with_cpu, Fixture* f) {
  WorkerOptions o;
  auto fail = f->fail;
  o.make_backends = [fail, with_cpu] {
    std::vector<std::unique_ptr<AttentionBackend>> b;
    b.push_back(std::make_unique<FlakyGpu>(fail));
    if (with_cpu) b.push_back(MakeCpuBackend());
    return b;
  };
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  f->worker = std::move(*w);
  ClientOptions co;
  co.address = f->worker->address();
  auto c = AttentionClient::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  f->client = std::move(*c);
}

TEST(DeviceHealthTest, AFailedGpuTurnsTheWorkerNotServing) {
  Fixture f;
  Start(false, &f);
  EXPECT_EQ(f.worker->device_names(), std::vector<std::string>{"cuda:0"});
  HostProblem hp(Shape(DType::kBF16));
  hp.FillRandom(1);
  const v1::AttentionRequest req = InlineRequest(hp);
  auto ok = f.client->ComputeAttention(req);
  ASSERT_TRUE(ok.ok()) << Describe(ok.status());
  EXPECT_EQ(*f.client->Health(), "SERVING");

  f.fail->store(true);
  auto broken = f.client->ComputeAttention(req);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInternal) << Describe(broken.status());
  EXPECT_EQ(*f.client->Health(), "NOT_SERVING");
  EXPECT_EQ(*f.client->Health("spattn.v1.AttentionService"), "NOT_SERVING");
  auto after = f.client->ComputeAttention(req);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << Describe(after.status());
  // Metadata still answers (operators can see what the worker is).
  EXPECT_TRUE(f.client->Metadata().ok());
}

TEST(DeviceHealthTest, RequestsGoToTheDevicesThatCanServeThem) {
  Fixture f;
  Start(true, &f);
  EXPECT_EQ(f.worker->device_names(), (std::vector<std::string>{"cuda:0", "cpu"}));
  // fp32 only on the CPU.
  HostProblem fp32(Shape(DType::kF32));
  fp32.FillRandom(2);
  auto r = f.client->ComputeAttention(InlineRequest(fp32));
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_EQ(r->device(), "cpu");
  // The GPU first while it works.
  HostProblem hp(Shape(DType::kBF16));
  hp.FillRandom(3);
  const v1::AttentionRequest req = InlineRequest(hp);
  r = f.client->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_EQ(r->device(), "cuda");
  f.fail->store(true);
  EXPECT_FALSE(f.client->ComputeAttention(req).ok());
  EXPECT_EQ(*f.client->Health(), "NOT_SERVING");
  // The failed GPU is skipped from then on.
  r = f.client->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_EQ(r->device(), "cpu");
}

TEST(DeviceHealthTest, GpuDevicesWithoutAGpuAreRefusedAtStart) {
  WorkerOptions o;
  o.devices = "cuda:0";
  auto w = WorkerServer::Start(o);
  if (w.ok()) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition) << w.status();
  o.devices = "tpu:0";
  EXPECT_EQ(WorkerServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
