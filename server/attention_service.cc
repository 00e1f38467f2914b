#include "server/attention_service.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/builders/build_index.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "proto/grpc_status.h"
#include "server/cuda_ipc.h"
#include "server/log.h"

namespace spattn {
namespace {

constexpr char kComputeAttention[] = "ComputeAttention";
constexpr char kComputeAttentionStream[] = "ComputeAttentionStream";
// Stream messages read ahead of the one running (backpressure beyond that).
constexpr size_t kMaxPendingStreamMessages = 2;

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto d = ctx->deadline();
  // gRPC reports "no deadline" as the largest time point.
  if (d >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 10)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

}  // namespace

AttentionServiceImpl::AttentionServiceImpl(const ServiceInfo& info, std::vector<Device>* devices,
                                           RegionManager* regions, AttentionPipeline* pipeline,
                                           ConfigCache* maybe_cache, WorkerMetrics* maybe_metrics,
                                           const Authorizer* auth)
    : info_(info),
      devices_(devices),
      regions_(regions),
      pipeline_(pipeline),
      cache_(maybe_cache),
      metrics_(maybe_metrics),
      auth_(auth),
      gpus_(ListCudaDevices()) {}

void AttentionServiceImpl::StartDraining() { draining_.store(true); }

void AttentionServiceImpl::CallStarted() {
  std::lock_guard<std::mutex> lock(calls_mu_);
  ++active_calls_;
}

void AttentionServiceImpl::CallEnded() {
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    --active_calls_;
  }
  calls_cv_.notify_all();
}

int AttentionServiceImpl::active_calls() const {
  std::lock_guard<std::mutex> lock(calls_mu_);
  return active_calls_;
}

bool AttentionServiceImpl::WaitForCalls(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(calls_mu_);
  return calls_cv_.wait_until(lock, absl::ToChronoTime(deadline),
                              [this] { return active_calls_ == 0; });
}

void AttentionServiceImpl::Record(const char* rpc, const std::string& request_id,
                                  const absl::Status& status, absl::Time start) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (metrics_) metrics_->RequestDone(rpc, status.code(), seconds);
  const bool attention = rpc == kComputeAttention || rpc == kComputeAttentionStream;
  if (!status.ok()) {
    Log(LogLevel::kInfo, "request_failed",
        {{"request_id", request_id},
         {"rpc", rpc},
         {"code", absl::StatusCodeToString(status.code())},
         {"seconds", absl::StrCat(seconds)},
         {"error", std::string(status.message())}});
  } else if (attention) {
    Log(LogLevel::kDebug, "request_done",
        {{"request_id", request_id},
         {"rpc", rpc},
         {"code", "OK"},
         {"seconds", absl::StrCat(seconds)}});
  }
}

Device* AttentionServiceImpl::PickDevice(const ParsedRequest& req) {
  // A GPU that holds a CUDA tensor of the request computes it without copies.
  int gpu = -1;
  for (const TensorSpec* t : {&req.q, &req.k, &req.v}) {
    if (gpu >= 0) break;
    if (t->kind == HandleKind::kCudaRegion) {
      gpu = regions_->CudaDeviceOf(RegionCaller{req.region_owner}, t->region_name);
    }
    if (t->kind == HandleKind::kCudaIpc) {
      for (const CudaDeviceInfo& g : gpus_) {
        if (!t->device_uuid.empty() ? g.uuid == t->device_uuid : g.ordinal == t->device_id) {
          gpu = g.ordinal;
        }
      }
    }
  }
  Device* best = nullptr;
  int best_load = 0;
  for (Device& d : *devices_) {
    if (!d.backend->Health().ok() || !d.backend->CheckDType(req.problem.dtype).ok()) continue;
    if (gpu >= 0 && d.backend->kind() == "cuda" && d.backend->ordinal() == gpu) return &d;
    const int load = d.queue->waiting() + d.queue->running();
    // Tensors on a GPU without a backend: the CPU copies them (a CUDA backend would refuse).
    // Otherwise any healthy GPU beats the CPU, which is orders of magnitude slower: the CPU
    // takes what no GPU can compute (fp32) or what is left when the GPUs have failed.
    auto rank = [gpu](const Device& x) {
      if (gpu >= 0) return x.backend->kind() == "cpu" ? 1 : 0;
      return x.backend->kind() == "cuda" ? 1 : 0;
    };
    if (best == nullptr || rank(d) > rank(*best) || (rank(d) == rank(*best) && load < best_load)) {
      best = &d;
      best_load = load;
    }
  }
  return best != nullptr ? best : &(*devices_)[0];
}

void AttentionServiceImpl::CheckHealth(Device* device) {
  const absl::Status h = device->backend->Health();
  if (h.ok()) return;
  const std::string name = device->backend->name();
  {
    std::lock_guard<std::mutex> lock(failed_mu_);
    if (std::find(failed_.begin(), failed_.end(), name) != failed_.end()) return;
    failed_.push_back(name);
  }
  if (on_device_failed_) on_device_failed_(name, h);
}

absl::Status AttentionServiceImpl::CheckRegionCall(const Caller& caller, const char* rpc,
                                                   bool shm) const {
  const absl::Status allowed = auth_->Check(caller, Role::kWrite, rpc);
  if (!allowed.ok()) return allowed;
  if (caller.unix_peer || info_.allow_tcp_shm) return absl::OkStatus();
  if (shm) {
    return absl::PermissionDeniedError(absl::StrCat(
        rpc,
        ": shared-memory regions are registered through the worker's Unix socket "
        "(listen address unix:PATH), where the caller's uid proves it owns the segment; "
        "this call came over TCP (the operator may allow it with --allow_tcp_shm)"));
  }
  // CUDA IPC: per authenticated client.
  if (caller.authenticated) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(rpc,
                   ": CUDA IPC handles need the worker's Unix socket or an authenticated client "
                   "(bearer token / client certificate); this call came anonymously over TCP "
                   "(the operator may allow it with --allow_tcp_shm)"));
}

void AttentionServiceImpl::Execute(const Caller& caller, const v1::AttentionRequest* request,
                                   v1::AttentionResponse* response, const char* rpc,
                                   std::function<bool()> cancelled, absl::Time deadline,
                                   std::function<void(const absl::Status&)> done) {
  const absl::Time start = absl::Now();
  absl::Status allowed = auth_->Check(caller, Role::kRead, rpc);
  if (!allowed.ok()) {
    Record(rpc, request->request_id(), allowed, start);
    done(allowed);
    return;
  }
  auto parsed_or = ParseAttentionRequest(*request, info_.limits);
  if (!parsed_or.ok()) {
    Record(rpc, request->request_id(), parsed_or.status(), start);
    done(parsed_or.status());
    return;
  }
  auto parsed = std::make_shared<ParsedRequest>(std::move(*parsed_or));
  parsed->region_owner = caller.principal;
  for (const TensorSpec* t : {&parsed->q, &parsed->k, &parsed->v,
                              parsed->output.has_value() ? &*parsed->output : nullptr}) {
    if (t == nullptr || t->kind != HandleKind::kCudaIpc) continue;
    allowed = CheckRegionCall(caller, rpc, /*shm=*/false);
    if (!allowed.ok()) {
      Record(rpc, request->request_id(), allowed, start);
      done(allowed);
      return;
    }
  }
  if (parsed->request_id.empty()) {
    parsed->request_id = absl::StrCat("w-", next_request_.fetch_add(1));
  }
  const double parse_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Device* device = PickDevice(*parsed);
  if (metrics_) metrics_->InFlightAdd(1);
  const absl::Status queued = device->queue->TrySubmit([=]() {
    if (metrics_) metrics_->QueueDepth(device->backend->name(), device->queue->waiting());
    if (before_execute_) before_execute_(parsed->request_id);
    CallControl control{deadline, cancelled};
    absl::Status s = pipeline_->Run(*parsed, *device->backend, control, parse_seconds, response);
    if (!s.ok()) CheckHealth(device);
    if (metrics_) metrics_->InFlightAdd(-1);
    Record(rpc, parsed->request_id, s, start);
    done(s);
  });
  if (metrics_) metrics_->QueueDepth(device->backend->name(), device->queue->waiting());
  if (!queued.ok()) {
    if (metrics_) metrics_->InFlightAdd(-1);
    Record(rpc, parsed->request_id, queued, start);
    done(queued);
  }
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ComputeAttention(
    grpc::CallbackServerContext* ctx, const v1::AttentionRequest* request,
    v1::AttentionResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (draining_.load()) {
    const absl::Status s = absl::UnavailableError("the worker is draining; retry elsewhere");
    Record(kComputeAttention, request->request_id(), s, absl::Now());
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  CallStarted();
  Execute(
      auth_->Identify(*ctx), request, response, kComputeAttention,
      [ctx] { return ctx->IsCancelled(); }, DeadlineOf(ctx),
      [this, reactor](const absl::Status& s) {
        reactor->Finish(ToGrpcStatus(s));
        CallEnded();
      });
  return reactor;
}

// One stream = one prompt; messages (layers) run one at a time, in order, each answered before
// the next is executed; up to kMaxPendingStreamMessages more are read ahead. The first failing
// message ends the stream with its status, prefixed by the message number and layer.
class AttentionServiceImpl::StreamReactor
    : public grpc::ServerBidiReactor<v1::AttentionRequest, v1::AttentionResponse> {
 public:
  StreamReactor(AttentionServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), caller_(service->auth_->Identify(*ctx)) {
    service_->CallStarted();
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    Actions a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        reads_done_ = true;
        reading_ = false;
      } else {
        pending_.push_back(std::make_unique<v1::AttentionRequest>(std::move(incoming_)));
        incoming_.Clear();
        reading_ = false;
      }
      a = NextLocked();
    }
    Perform(a);
  }

  void OnWriteDone(bool ok) override {
    Actions a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      to_write_.pop_front();
      if (!ok) Fail(absl::CancelledError("the client stopped reading the stream"));
      a = NextLocked();
    }
    Perform(a);
  }

  void OnCancel() override {
    cancelled_.store(true);
    Actions a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Fail(absl::CancelledError("stream cancelled by the client"));
      a = NextLocked();
    }
    Perform(a);
  }

  void OnDone() override {
    service_->CallEnded();
    delete this;
  }

 private:
  // What to do outside the lock (reactions may run inline).
  struct Actions {
    bool read = false;
    const v1::AttentionResponse* write = nullptr;
    bool finish = false;
    grpc::Status status;
    bool execute = false;
  };

  void Fail(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }

  Actions NextLocked() {
    Actions a;
    if (finished_) return a;
    const bool failed = !status_.ok();
    if (!failed && !running_ && !pending_.empty()) {
      running_ = true;
      current_ = std::move(pending_.front());
      pending_.pop_front();
      a.execute = true;
    }
    if (!failed && !reading_ && !reads_done_ && pending_.size() < kMaxPendingStreamMessages) {
      reading_ = true;
      a.read = true;
    }
    if (!writing_ && !to_write_.empty() && !failed) {
      writing_ = true;
      a.write = to_write_.front().get();
    }
    // starting_: operations decided under the lock but not yet started by Perform; finishing
    // before they start would let the reactor be deleted under them.
    const bool idle = !running_ && !writing_ && starting_ == 0;
    if (idle && (failed || (reads_done_ && pending_.empty() && to_write_.empty()))) {
      finished_ = true;
      a.finish = true;
      a.status = ToGrpcStatus(status_);
    }
    if (a.read || a.write != nullptr || a.execute) ++starting_;
    return a;
  }

  void Perform(Actions a) {
    while (true) {
      // Finish last: after it the reactor may be deleted once every operation completes.
      if (a.finish) {
        Finish(a.status);
        return;
      }
      if (!a.read && a.write == nullptr && !a.execute) return;
      if (a.read) StartRead(&incoming_);
      if (a.write != nullptr) StartWrite(a.write);
      if (a.execute) ExecuteCurrent();
      // Started: another reaction may now finish the stream, or this one does.
      std::lock_guard<std::mutex> lock(mu_);
      --starting_;
      a = NextLocked();
    }
  }

  void ExecuteCurrent() {
    const int message = ++messages_;
    auto response = std::make_shared<std::unique_ptr<v1::AttentionResponse>>(
        std::make_unique<v1::AttentionResponse>());
    const v1::AttentionRequest* request = current_.get();
    v1::AttentionResponse* out = response->get();
    service_->Execute(
        caller_, request, out, kComputeAttentionStream, [this] { return cancelled_.load(); },
        DeadlineOf(ctx_),
        [this, response, message, request](const absl::Status& s) {
          Actions a;
          {
            std::lock_guard<std::mutex> lock(mu_);
            running_ = false;
            if (s.ok()) {
              to_write_.push_back(std::move(*response));
            } else {
              Fail(absl::Status(s.code(), absl::StrCat("stream message ", message, " (layer ",
                                                       request->layer(), "): ", s.message())));
            }
            current_.reset();
            a = NextLocked();
          }
          Perform(a);
        });
  }

  AttentionServiceImpl* const service_;
  grpc::CallbackServerContext* const ctx_;
  const Caller caller_;
  std::atomic<bool> cancelled_{false};
  v1::AttentionRequest incoming_;  // Target of the outstanding read.
  std::mutex mu_;
  std::deque<std::unique_ptr<v1::AttentionRequest>> pending_;    // Guarded by mu_.
  std::unique_ptr<v1::AttentionRequest> current_;                // Guarded by mu_.
  std::deque<std::unique_ptr<v1::AttentionResponse>> to_write_;  // Guarded by mu_.
  bool reading_ = true;      // The constructor starts the first read. Guarded by mu_.
  bool reads_done_ = false;  // Guarded by mu_.
  bool running_ = false;     // Guarded by mu_.
  bool writing_ = false;     // Guarded by mu_.
  bool finished_ = false;    // Guarded by mu_.
  int starting_ = 0;         // Actions handed to Perform and not yet started. Guarded by mu_.
  absl::Status status_;      // First failure. Guarded by mu_.
  int messages_ = 0;         // Only touched when starting an execution (one at a time).
};

grpc::ServerBidiReactor<v1::AttentionRequest, v1::AttentionResponse>*
AttentionServiceImpl::ComputeAttentionStream(grpc::CallbackServerContext* ctx) {
  if (draining_.load()) {
    class Refuse : public grpc::ServerBidiReactor<v1::AttentionRequest, v1::AttentionResponse> {
     public:
      Refuse() {
        Finish(
            grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is draining; retry elsewhere"));
      }
      void OnDone() override { delete this; }
    };
    Record(kComputeAttentionStream, "", absl::UnavailableError("draining"), absl::Now());
    return new Refuse();
  }
  return new StreamReactor(this, ctx);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                               const v1::ServerMetadataRequest*,
                                                               v1::ServerMetadataResponse* r) {
  const absl::Time start = absl::Now();
  r->set_name("spattn-worker");
  r->set_version(info_.version);
  const AttentionBackend& primary = *(*devices_)[0].backend;
  r->set_device(primary.kind());
  for (const Device& d : *devices_) {
    if (d.backend->kind() != "cpu") continue;
    v1::DeviceInfo* info = r->add_devices();
    info->set_kind("cpu");
    info->set_ordinal(d.backend->ordinal());
    info->set_name("host CPU");
  }
  // GPUs the worker sees (whether or not a CUDA backend serves on them).
  for (const CudaDeviceInfo& g : gpus_) {
    v1::DeviceInfo* info = r->add_devices();
    info->set_kind("cuda");
    info->set_ordinal(g.ordinal);
    info->set_name(g.name);
    info->set_uuid(g.uuid);
    info->set_memory_bytes(g.memory_bytes);
  }
  for (const char* rpc :
       {"ServerMetadata", "RegisterSystemRegion", "RegisterCudaRegion", "UnregisterRegion",
        "ListRegions", kComputeAttention, kComputeAttentionStream}) {
    v1::RpcInfo* info = r->add_rpcs();
    info->set_name(rpc);
    info->set_implemented(true);
    if (std::string(rpc) == "RegisterCudaRegion" && !CudaIpcUsable().ok()) {
      info->set_note(std::string(CudaIpcUsable().message()));
    }
  }
  for (Method m : kAllMethods) {
    v1::MethodInfo* info = r->add_methods();
    info->set_method(MethodToProto(m));
    info->set_name(MethodName(m));
    info->set_implemented_cpu(CpuBuilderAvailable(m));
    bool cuda = false, gpu_builder = false;
    for (const Device& d : *devices_) {
      if (d.backend->kind() != "cuda") continue;
      cuda |= d.backend->MethodAvailable(m);
      gpu_builder |= d.backend->DeviceBuilder(m);
    }
    info->set_implemented_cuda(cuda);
    info->set_gpu_index_builder(gpu_builder);
  }
  r->set_max_message_bytes(info_.max_message_bytes);
  r->set_max_inline_bytes(static_cast<uint64_t>(info_.limits.max_inline_bytes));
  r->set_index_service(info_.index_address);
  r->set_index_service_reachable(cache_ != nullptr && cache_->configured() && cache_->link_up());
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    bool ok = false;
    for (const Device& d : *devices_) ok |= d.backend->CheckDType(t).ok();
    if (ok) r->add_dtypes(DTypeToProto(t));
  }
  Record("ServerMetadata", "", absl::OkStatus(), start);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::RegisterSystemRegion(
    grpc::CallbackServerContext* ctx, const v1::RegisterSystemRegionRequest* request,
    v1::RegisterSystemRegionResponse*) {
  const absl::Time start = absl::Now();
  const Caller caller = auth_->Identify(*ctx);
  absl::Status s = CheckRegionCall(caller, "RegisterSystemRegion", /*shm=*/true);
  if (s.ok()) {
    s = regions_->RegisterSystem(RegionCaller{caller.principal, caller.unix_peer ? caller.uid : -1},
                                 request->name(), request->shm_key(), request->offset(),
                                 request->byte_size());
  }
  Record("RegisterSystemRegion", "", s, start);
  if (s.ok()) {
    Log(LogLevel::kInfo, "region_registered",
        {{"name", request->name()}, {"kind", "system"}, {"owner", caller.principal}});
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::RegisterCudaRegion(
    grpc::CallbackServerContext* ctx, const v1::RegisterCudaRegionRequest* request,
    v1::RegisterCudaRegionResponse*) {
  const absl::Time start = absl::Now();
  const Caller caller = auth_->Identify(*ctx);
  absl::Status s = CheckRegionCall(caller, "RegisterCudaRegion", /*shm=*/false);
  if (s.ok()) {
    s = regions_->RegisterCuda(RegionCaller{caller.principal}, request->name(),
                               request->raw_handle(), request->device_id(), request->device_uuid(),
                               request->byte_size());
  }
  Record("RegisterCudaRegion", "", s, start);
  if (s.ok()) {
    Log(LogLevel::kInfo, "region_registered",
        {{"name", request->name()}, {"kind", "cuda"}, {"owner", caller.principal}});
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::UnregisterRegion(
    grpc::CallbackServerContext* ctx, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* response) {
  const absl::Time start = absl::Now();
  const Caller caller = auth_->Identify(*ctx);
  absl::Status s = auth_->Check(caller, Role::kWrite, "UnregisterRegion");
  if (s.ok()) {
    auto n = regions_->Unregister(RegionCaller{caller.principal}, request->name());
    s = n.status();
    if (n.ok()) response->set_unregistered(static_cast<uint32_t>(*n));
  }
  Record("UnregisterRegion", "", s, start);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ListRegions(grpc::CallbackServerContext* ctx,
                                                            const v1::ListRegionsRequest*,
                                                            v1::ListRegionsResponse* response) {
  const absl::Time start = absl::Now();
  const Caller caller = auth_->Identify(*ctx);
  const absl::Status s = auth_->Check(caller, Role::kRead, "ListRegions");
  if (!s.ok()) {
    Record("ListRegions", "", s, start);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  for (const RegionInfoRow& row : regions_->List(RegionCaller{caller.principal})) {
    v1::RegionInfo* info = response->add_regions();
    info->set_name(row.name);
    info->set_kind(row.kind);
    info->set_shm_key(row.shm_key);
    info->set_offset(row.offset);
    info->set_byte_size(row.byte_size);
    info->set_device_id(row.device_id);
    info->set_pinned(row.pinned);
  }
  Record("ListRegions", "", absl::OkStatus(), start);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace spattn
