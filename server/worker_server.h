// The worker process in one object: the gRPC server (AttentionService, health, reflection), the
// per-device executors, the region registry, the head-config cache and the metrics endpoint.
// Used by spattn_worker_main.cc and, in-process, by tests.
#ifndef SPATTN_SERVER_WORKER_SERVER_H_
#define SPATTN_SERVER_WORKER_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/method_config.h"
#include "proto/grpc_security.h"
#include "server/pipeline.h"
#include "server/recall_guard.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace spattn {

class AttentionBackend;
struct Device;

struct WorkerOptions {
  // gRPC listen addresses, comma-separated: at most one host:port (port 0 picks a free port)
  // and any number of unix:/path sockets, e.g. "127.0.0.1:50051,unix:/run/spattn/worker.sock".
  // Connections through a unix: socket carry the peer's uid (SO_PEERCRED), which lets callers
  // register shared-memory regions they own. Default: "127.0.0.1:0".
  std::string listen_address = "127.0.0.1:0";
  // Permissions of the unix: socket files. Default: 0660 (owner and group may connect).
  mode_t unix_socket_mode = 0660;
  // Shared-memory keys the worker maps must start with this; "" = any. Default: "/spattn-".
  std::string shm_prefix = "/spattn-";
  // Accept shared-memory registrations over TCP (no proof of who owns the segment: any caller
  // who can reach the port may map any object under shm_prefix the worker can open) and CUDA IPC
  // handles from anonymous TCP callers. Default: false.
  bool allow_tcp_shm = false;
  // TLS / mTLS of the TCP listener (the unix: sockets stay plaintext: they are local).
  ServerTlsOptions tls;
  // Tokens and certificate identities with roles (proto/grpc_security.h); when any is set,
  // region RPCs need the write role and attention RPCs the read role. Health, reflection and
  // metrics stay open. Default: none (authorization off).
  AuthConfig auth;
  // TLS / mTLS and bearer token of the link to the index service.
  ClientSecurityOptions index_security;
  // Prometheus pull endpoint (host:port, port 0 picks one); "" = no endpoint. Default: "".
  std::string metrics_address;
  // host:port of the index service; "" = none (requests then name no model_id). Default: "".
  std::string index_address;
  // Largest gRPC message sent or received. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Largest inline tensor (and inline output/LSE). Default: 64 MiB.
  int64_t max_inline_bytes = 64 << 20;
  // Requests waiting per device before RESOURCE_EXHAUSTED. Default: 64.
  int queue_capacity = 64;
  // Executor threads per device (each runs one request at a time). Default: 1.
  int executor_threads = 1;
  // Threads the CPU kernels and builders use inside one request; 0 = all cores. Default: 0.
  int cpu_threads = 0;
  // Requests whose sequences all have fewer keys than this run dense (explicit overrides
  // excepted); 0 = never. Default: 0.
  int dense_below_tokens = 0;
  // "auto" (one CUDA backend per GPU when there are GPUs, else the CPU), "cpu", "cuda" (every
  // GPU), or a list such as "cuda:0,cuda:1" or "cuda:0,cpu" (the CPU then takes what the GPUs
  // cannot compute, e.g. fp32). Default: "auto".
  std::string devices = "auto";
  // Per GPU: the CUDA engine's workspace (offsets, indexes, the kernel's work list).
  // Default: 1 GiB.
  int64_t gpu_workspace_bytes = int64_t{1} << 30;
  // Per GPU: device copies of host tensors (inline, shared memory) of one request.
  // Default: 4 GiB.
  int64_t gpu_staging_bytes = int64_t{4} << 30;
  // Per GPU: device copies of Saap's layer assets (centroids, query classifiers) kept across
  // requests, least recently used evicted first; the layer in use always stays (0 = only it).
  // Must be >= 0. Default: 2 GiB (CudaBackendOptions::saap_assets_bytes).
  int64_t saap_assets_bytes = int64_t{2} << 30;
  // Page-lock registered shared-memory regions while a GPU serves (faster copies). Default: true.
  bool pin_shared_memory = true;
  // Method for heads when a request names neither a model nor an override. Default: dense.
  MethodConfig default_method;
  // Query rows sampled per head when a request sets estimate_recall. Default: 64.
  int recall_sample_rows = 64;
  // The online recall guard (server/recall_guard.h): heads running their published or default
  // config whose recall estimate on recall_probe_rows rows is short of recall_target get a
  // wider budget or dense. recall_probe_rows: 0 = off (no estimate), -1 = 32 on the CPU backend
  // and 64 on CUDA (estimated on the GPU). recall_target <= 0: estimate only. Defaults: -1, 0.95.
  int recall_probe_rows = -1;
  double recall_target = 0.95;
  // A head config that records its calibration length starts from its key-count budgets x (served /
  // calibrated)^recall_length_exponent (server/recall_guard.h ScaleConfigToLength); 0 = as
  // published. Default: 0.68 (RecallGuardOptions).
  double recall_length_exponent = RecallGuardOptions::kLengthExponent;
  // The guard's adaptive tries (spattn-worker --recall_adaptive=auto|M[,M2], SetAdaptiveTries):
  // recall_adaptive_auto (RecallGuardOptions::adaptive_auto, "auto", the default): per head by
  // its published method, sampled_lines heads (what spattnctl calibrate's default
  // --candidates=auto publishes up to 128K) sampled_lines then flex_prefill as the README's
  // guarded_sl line, others flex_prefill; else recall_adaptive / recall_adaptive_also
  // (RecallGuardOptions::adaptive / adaptive_also) for every head. Defaults: true, flex_prefill
  // (DefaultAdaptive), none.
  bool recall_adaptive_auto = true;
  MethodConfig recall_adaptive = RecallGuardOptions::DefaultAdaptive();
  MethodConfig recall_adaptive_also;
  // Query rows per index block for methods without their own block size. Default: 64.
  int block_m = 64;
  // Query rows per index block of sampled_lines; 0 = block_m (PipelineOptions). Default: 128.
  int sampled_lines_block_m = 128;
  // Index-service RPC timeout on the request path. Default: 5 s.
  absl::Duration index_rpc_timeout = absl::Seconds(5);
  // Shutdown: how long health reports NOT_SERVING before new calls are refused (lets load
  // balancers notice). Default: 0.
  absl::Duration drain_grace = absl::ZeroDuration();
  // Shutdown: longest wait for in-flight calls and open streams. Default: 30 s.
  absl::Duration drain_timeout = absl::Seconds(30);
  // For tests: runs on the executor thread before each attention request. Default: none.
  std::function<void(const std::string& request_id)> before_execute;
  // For tests: the backends to serve on instead of those `devices` names. Default: none.
  std::function<std::vector<std::unique_ptr<AttentionBackend>>()> make_backends;
};

// The request pipeline's options of a worker started with `options` (its guard, block sizes,
// default method).
PipelineOptions WorkerPipelineOptions(const WorkerOptions& options);

// Thread-safe: port()/address()/metrics_port() are constant after Start; Shutdown may be called
// from any thread (e.g. a signal handler thread), more than once.
class WorkerServer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();  // Shutdown().
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int port() const;
  std::string address() const;  // "127.0.0.1:<port>" style, dialable.
  int metrics_port() const;     // 0 without a metrics endpoint.
  std::string device() const;   // "cpu" or "cuda": what serves requests.
  // "cpu", "cuda:0", ... one per backend, in the order requests prefer them.
  std::vector<std::string> device_names() const;

  // Graceful drain: health NOT_SERVING, wait drain_grace, refuse new calls (UNAVAILABLE), let
  // in-flight calls and open streams finish (up to drain_timeout), then stop.
  void Shutdown();
  // Blocks until Shutdown has completed.
  void Wait();

  prometheus::Registry& registry();

 private:
  struct State;
  explicit WorkerServer(std::unique_ptr<State> state);
  static std::vector<std::string> DeviceNames(const std::vector<Device>& devices);
  std::unique_ptr<State> state_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_WORKER_SERVER_H_
