#include "server/worker_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/parallel.h"
#include "server/attention_service.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/cuda_backend.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/pipeline.h"
#include "server/regions.h"
#include "server/unix_listener.h"

namespace spattn {
namespace {

constexpr char kVersion[] = "0.1.0";
constexpr char kServiceName[] = "spattn.v1.AttentionService";
// Health entry that follows the worker's link to the index service (the worker itself keeps
// SERVING from cache while it is down).
constexpr char kIndexLinkHealth[] = "spattn.worker.index_link";

Device WrapBackend(std::unique_ptr<AttentionBackend> backend, const WorkerOptions& o) {
  Device d;
  WorkQueueOptions q;
  q.threads = o.executor_threads;
  q.capacity = o.queue_capacity;
  q.name = backend->name();
  d.backend = std::move(backend);
  d.queue = std::make_unique<WorkQueue>(q);
  return d;
}

absl::StatusOr<std::vector<Device>> MakeDevices(const WorkerOptions& o) {
  std::vector<Device> devices;
  if (o.make_backends) {
    for (auto& b : o.make_backends()) devices.push_back(WrapBackend(std::move(b), o));
    if (devices.empty()) return absl::InvalidArgumentError("make_backends: returned none");
    return devices;
  }
  std::string why;
  const std::vector<CudaDeviceInfo> gpus = ListCudaDevices(&why);
  std::vector<int> cuda;  // Ordinals, in the order given.
  bool cpu = false;
  if (o.devices == "auto") {
    for (const CudaDeviceInfo& g : gpus) cuda.push_back(g.ordinal);
    cpu = cuda.empty();
  } else {
    for (absl::string_view part : absl::StrSplit(o.devices, ',')) {
      if (part == "cpu") {
        cpu = true;
      } else if (part == "cuda" || absl::StartsWith(part, "cuda:")) {
        if (gpus.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("devices: '", part, "' asks for a GPU, and this worker has none (", why,
                           "); use 'cpu' or 'auto'"));
        }
        if (part == "cuda") {
          for (const CudaDeviceInfo& g : gpus) cuda.push_back(g.ordinal);
          continue;
        }
        int ordinal = -1;
        if (!absl::SimpleAtoi(part.substr(5), &ordinal) || ordinal < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("devices: '", part, "' is not cuda:N with N >= 0"));
        }
        if (ordinal >= static_cast<int>(gpus.size())) {
          return absl::FailedPreconditionError(absl::StrCat(
              "devices: '", part, "' does not exist (", gpus.size(), " GPUs visible)"));
        }
        cuda.push_back(ordinal);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("devices: unknown device '", part,
                                                       "' (expected auto, cpu, cuda or cuda:N)"));
      }
    }
  }
  std::sort(cuda.begin(), cuda.end());
  cuda.erase(std::unique(cuda.begin(), cuda.end()), cuda.end());
  for (int ordinal : cuda) {
    CudaBackendOptions co;
    co.device = ordinal;
    co.workspace_bytes = o.gpu_workspace_bytes;
    co.staging_bytes = o.gpu_staging_bytes;
    co.saap_assets_bytes = o.saap_assets_bytes;
    auto backend = MakeCudaBackend(co);
    if (!backend.ok()) return backend.status();
    devices.push_back(WrapBackend(std::move(*backend), o));
  }
  if (cpu || devices.empty()) devices.push_back(WrapBackend(MakeCpuBackend(), o));
  return devices;
}

// host:port -> a dialable address for `port`.
std::string DialAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = "127.0.0.1";
  return absl::StrCat(host, ":", port);
}

}  // namespace

struct WorkerServer::State {
  WorkerOptions options;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<WorkerMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<RegionManager> regions;
  std::unique_ptr<ConfigCache> cache;
  std::vector<Device> devices;
  std::unique_ptr<AttentionPipeline> pipeline;
  std::unique_ptr<AttentionServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Authorizer> auth;
  std::vector<std::unique_ptr<UnixListener>> unix_listeners;
  std::string tcp_address;  // The host:port entry of listen_address ("" = unix sockets only).
  std::atomic<grpc::HealthCheckServiceInterface*> health{nullptr};
  int port = 0;
  int metrics_port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool shutting_down = false;  // Guarded by mu.
  bool shut_down = false;      // Guarded by mu.
};

WorkerServer::WorkerServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

PipelineOptions WorkerPipelineOptions(const WorkerOptions& options) {
  PipelineOptions po;
  po.dense_below_tokens = options.dense_below_tokens;
  po.default_method = options.default_method;
  po.recall_sample_rows = options.recall_sample_rows;
  po.block_m = options.block_m;
  po.sampled_lines_block_m = options.sampled_lines_block_m;
  po.guard.probe_rows = options.recall_probe_rows;
  po.guard.target = options.recall_target;
  po.guard.length_exponent = options.recall_length_exponent;
  po.guard.adaptive = options.recall_adaptive;
  po.guard.adaptive_also = options.recall_adaptive_also;
  po.guard.adaptive_auto = options.recall_adaptive_auto;
  return po;
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be > 0");
  }
  if (options.max_inline_bytes < 0) {
    return absl::InvalidArgumentError("max_inline_bytes must be >= 0");
  }
  if (options.saap_assets_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap_assets_bytes must be >= 0, got ", options.saap_assets_bytes));
  }
  if (options.queue_capacity < 0 || options.executor_threads <= 0) {
    return absl::InvalidArgumentError(
        "queue_capacity must be >= 0 and executor_threads must be > 0");
  }
  if (options.recall_sample_rows <= 0 || options.block_m <= 0 || options.block_m % 16 != 0) {
    return absl::InvalidArgumentError(
        "recall_sample_rows must be > 0 and block_m a positive multiple of 16");
  }
  if (options.sampled_lines_block_m < 0 || options.sampled_lines_block_m % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampled_lines_block_m must be 0 or a positive multiple of 16, got ",
                     options.sampled_lines_block_m));
  }
  const absl::Status method_ok = options.default_method.Validate();
  if (!method_ok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("default_method: ", method_ok.message()));
  }
  std::string tcp_address;
  std::vector<std::string> unix_paths;
  for (absl::string_view part : absl::StrSplit(options.listen_address, ',', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&part, "unix:")) {
      unix_paths.emplace_back(part);
    } else if (tcp_address.empty()) {
      tcp_address = std::string(part);
    } else {
      return absl::InvalidArgumentError(
          "listen_address: at most one host:port (and any number of unix:PATH)");
    }
  }
  if (tcp_address.empty() && unix_paths.empty()) {
    return absl::InvalidArgumentError("listen_address: empty");
  }
  auto creds = MakeServerCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  if (!options.index_address.empty()) {
    auto index_creds = MakeChannelCredentials(options.index_security);
    if (!index_creds.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("index security: ", index_creds.status().message()));
    }
  }
  auto state = std::make_unique<State>();
  State* st = state.get();
  st->options = options;
  st->tcp_address = tcp_address;
  st->auth = std::make_unique<Authorizer>(options.auth);
  if (options.cpu_threads > 0) SetCpuThreads(options.cpu_threads);

  st->registry = std::make_shared<prometheus::Registry>();
  st->metrics = std::make_unique<WorkerMetrics>(*st->registry, kVersion, CudaCompiledIn());
  if (!options.metrics_address.empty()) {
    try {
      st->exposer = std::make_unique<prometheus::Exposer>(options.metrics_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("metrics_address '", options.metrics_address,
                                                 "': cannot listen (", e.what(), ")"));
    }
    st->exposer->RegisterCollectable(st->registry);
    const std::vector<int> ports = st->exposer->GetListeningPorts();
    st->metrics_port = ports.empty() ? 0 : ports[0];
  }

  auto devices = MakeDevices(options);
  if (!devices.ok()) return devices.status();
  st->devices = std::move(*devices);
  for (const Device& d : st->devices) st->metrics->QueueDepth(d.backend->name(), 0);
  RegionManagerOptions ro;
  ro.shm_prefix = options.shm_prefix;
  for (const Device& d : st->devices) {
    ro.pin_system_regions |= options.pin_shared_memory && d.backend->kind() == "cuda";
  }
  st->regions = std::make_unique<RegionManager>(ro);
  if (!options.index_address.empty()) {
    ConfigCacheOptions co;
    co.index_address = options.index_address;
    co.security = options.index_security;
    co.rpc_timeout = options.index_rpc_timeout;
    co.max_message_bytes = options.max_message_bytes;
    co.on_link_change = [st](bool up) {
      st->metrics->IndexServiceUp(up);
      if (!up) st->metrics->Error(ErrorKind::kIndexService);
      grpc::HealthCheckServiceInterface* h = st->health.load();
      if (h != nullptr) h->SetServingStatus(kIndexLinkHealth, up);
    };
    st->cache = std::make_unique<ConfigCache>(co);
  }
  const PipelineOptions po = WorkerPipelineOptions(options);
  st->pipeline = std::make_unique<AttentionPipeline>(po, st->regions.get(), st->cache.get(),
                                                     st->metrics.get());
  ServiceInfo info;
  info.version = kVersion;
  info.max_message_bytes = static_cast<uint64_t>(options.max_message_bytes);
  info.index_address = options.index_address;
  info.limits.max_inline_bytes = options.max_inline_bytes;
  info.allow_tcp_shm = options.allow_tcp_shm;
  st->service = std::make_unique<AttentionServiceImpl>(info, &st->devices, st->regions.get(),
                                                       st->pipeline.get(), st->cache.get(),
                                                       st->metrics.get(), st->auth.get());
  if (options.before_execute) st->service->set_before_execute(options.before_execute);
  // A failed GPU turns the worker NOT_SERVING: its CUDA context is gone until a restart.
  st->service->set_on_device_failed([st](const std::string& device, const absl::Status& why) {
    Log(LogLevel::kError, "device_failed",
        {{"device", device}, {"error", std::string(why.message())}});
    st->metrics->Error(ErrorKind::kInternal);
    grpc::HealthCheckServiceInterface* h = st->health.load();
    if (h != nullptr) {
      h->SetServingStatus(false);
      h->SetServingStatus(kServiceName, false);
    }
  });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!tcp_address.empty()) builder.AddListeningPort(tcp_address, *creds, &st->port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(st->service.get());
  st->server = builder.BuildAndStart();
  if (st->server == nullptr || (!tcp_address.empty() && st->port == 0)) {
    if (st->server) st->server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("listen_address '", tcp_address, "': cannot listen"));
  }
  for (const std::string& path : unix_paths) {
    auto l = UnixListener::Start(path, options.unix_socket_mode, st->server.get());
    if (!l.ok()) {
      for (auto& u : st->unix_listeners) u->Stop();
      st->server->Shutdown();
      return absl::Status(l.status().code(),
                          absl::StrCat("listen_address 'unix:", path, "': ", l.status().message()));
    }
    st->unix_listeners.push_back(std::move(*l));
  }
  grpc::HealthCheckServiceInterface* health = st->server->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    health->SetServingStatus(kServiceName, true);
    health->SetServingStatus(kIndexLinkHealth, st->cache == nullptr ? true : st->cache->link_up());
  }
  st->health.store(health);
  Log(LogLevel::kInfo, "worker_started",
      {{"address", tcp_address.empty() ? "" : DialAddress(tcp_address, st->port)},
       {"unix", absl::StrJoin(unix_paths, ",")},
       {"tls", options.tls.cert_file.empty()     ? "off"
               : options.tls.require_client_cert ? "mtls"
                                                 : "on"},
       {"auth", st->auth->enabled() ? "on" : "off"},
       {"allow_tcp_shm", options.allow_tcp_shm ? "true" : "false"},
       {"metrics_port", std::to_string(st->metrics_port)},
       {"device", st->devices[0].backend->kind()},
       {"devices", absl::StrJoin(WorkerServer::DeviceNames(st->devices), ",")},
       {"index_address", options.index_address},
       {"version", kVersion}});
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(state)));
}

WorkerServer::~WorkerServer() {
  Shutdown();
  State* st = state_.get();
  // Each step timed: a slow teardown says where it waited.
  absl::Time t = absl::Now();
  auto lap = [&t] {
    const absl::Time now = absl::Now();
    const double s = absl::ToDoubleSeconds(now - t);
    t = now;
    return s;
  };
  st->server.reset();
  const double server_s = lap();
  st->service.reset();
  const double service_s = lap();
  st->devices.clear();
  const double devices_s = lap();
  st->cache.reset();
  st->exposer.reset();
  const double rest_s = lap();
  if (server_s + service_s + devices_s + rest_s > 1.0) {
    Log(LogLevel::kWarning, "slow_teardown",
        {{"grpc_server_s", absl::StrCat(server_s)},
         {"service_s", absl::StrCat(service_s)},
         {"devices_s", absl::StrCat(devices_s)},
         {"cache_metrics_s", absl::StrCat(rest_s)}});
  }
}

int WorkerServer::port() const { return state_->port; }

std::string WorkerServer::address() const {
  if (state_->tcp_address.empty()) {
    return state_->unix_listeners.empty()
               ? ""
               : absl::StrCat("unix:", state_->unix_listeners[0]->path());
  }
  return DialAddress(state_->tcp_address, state_->port);
}

int WorkerServer::metrics_port() const { return state_->metrics_port; }

std::string WorkerServer::device() const { return state_->devices[0].backend->kind(); }

std::vector<std::string> WorkerServer::device_names() const { return DeviceNames(state_->devices); }

std::vector<std::string> WorkerServer::DeviceNames(const std::vector<Device>& devices) {
  std::vector<std::string> names;
  for (const Device& d : devices) names.push_back(d.backend->name());
  return names;
}

prometheus::Registry& WorkerServer::registry() { return *state_->registry; }

void WorkerServer::Shutdown() {
  State* st = state_.get();
  {
    std::unique_lock<std::mutex> lock(st->mu);
    if (st->shutting_down) {
      st->cv.wait(lock, [st] { return st->shut_down; });
      return;
    }
    st->shutting_down = true;
  }
  Log(LogLevel::kInfo, "worker_draining",
      {{"active_calls", std::to_string(st->service->active_calls())}});
  grpc::HealthCheckServiceInterface* health = st->health.load();
  if (health != nullptr) health->SetServingStatus(false);
  if (st->options.drain_grace > absl::ZeroDuration()) absl::SleepFor(st->options.drain_grace);
  st->service->StartDraining();
  for (auto& u : st->unix_listeners) u->Stop();
  const bool drained = st->service->WaitForCalls(absl::Now() + st->options.drain_timeout);
  if (!drained) {
    Log(LogLevel::kWarning, "worker_drain_timeout",
        {{"active_calls", std::to_string(st->service->active_calls())}});
  }
  // Cancels whatever is still open after the drain timeout.
  st->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  for (Device& d : st->devices) d.queue->Stop();
  if (st->cache) st->cache->Shutdown();
  Log(LogLevel::kInfo, "worker_stopped", {});
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->shut_down = true;
  }
  st->cv.notify_all();
}

void WorkerServer::Wait() {
  State* st = state_.get();
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [st] { return st->shut_down; });
}

}  // namespace spattn
