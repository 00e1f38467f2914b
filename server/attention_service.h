// AttentionService over gRPC's callback API. Handlers validate on the gRPC thread (cheap, no
// copies) and hand the work to a device's executor queue; the executor thread runs the pipeline
// and finishes the call. Streams answer their messages one at a time, in order.
#ifndef SPATTN_SERVER_ATTENTION_SERVICE_H_
#define SPATTN_SERVER_ATTENTION_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "proto/grpc_security.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "server/pipeline.h"
#include "server/regions.h"
#include "server/work_queue.h"
#include "spattn/v1/attention_service.grpc.pb.h"

namespace spattn {

// A backend and the queue of work waiting for it.
struct Device {
  std::unique_ptr<AttentionBackend> backend;
  std::unique_ptr<WorkQueue> queue;
};

struct ServiceInfo {
  std::string version;
  uint64_t max_message_bytes = 0;
  std::string index_address;
  ConvertLimits limits;
  // Register shared-memory regions for callers that did not come through the Unix socket
  // (whose peer uid proves who owns a segment), and CUDA IPC handles for anonymous ones.
  bool allow_tcp_shm = false;
};

// Thread-safe. The pointers given to the constructor must outlive the service.
class AttentionServiceImpl final : public v1::AttentionService::CallbackService {
 public:
  AttentionServiceImpl(const ServiceInfo& info, std::vector<Device>* devices,
                       RegionManager* regions, AttentionPipeline* pipeline,
                       ConfigCache* maybe_cache, WorkerMetrics* maybe_metrics,
                       const Authorizer* auth);

  // Refuse new calls with UNAVAILABLE (already open streams keep being served).
  void StartDraining();
  // Blocks until no call is admitted or open, or `deadline`; false on timeout.
  bool WaitForCalls(absl::Time deadline);
  int active_calls() const;

  // For tests: runs on the executor thread before each attention request. Default: none.
  void set_before_execute(std::function<void(const std::string& request_id)> hook) {
    before_execute_ = std::move(hook);
  }
  // Called once per device whose backend reports a failure (Health() not OK), with its name.
  // Set before serving. Default: none.
  void set_on_device_failed(
      std::function<void(const std::string& device, const absl::Status& why)> hook) {
    on_device_failed_ = std::move(hook);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const v1::ServerMetadataRequest* request,
                                           v1::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* RegisterSystemRegion(
      grpc::CallbackServerContext* ctx, const v1::RegisterSystemRegionRequest* request,
      v1::RegisterSystemRegionResponse* response) override;
  grpc::ServerUnaryReactor* RegisterCudaRegion(grpc::CallbackServerContext* ctx,
                                               const v1::RegisterCudaRegionRequest* request,
                                               v1::RegisterCudaRegionResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* ctx,
                                        const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;
  grpc::ServerUnaryReactor* ComputeAttention(grpc::CallbackServerContext* ctx,
                                             const v1::AttentionRequest* request,
                                             v1::AttentionResponse* response) override;
  grpc::ServerBidiReactor<v1::AttentionRequest, v1::AttentionResponse>* ComputeAttentionStream(
      grpc::CallbackServerContext* ctx) override;

 private:
  class StreamReactor;
  friend class StreamReactor;

  // One attention request through validation and the queue. `done` runs exactly once, on the
  // executor thread or (for refusals) on the calling thread.
  void Execute(const Caller& caller, const v1::AttentionRequest* request,
               v1::AttentionResponse* response, const char* rpc, std::function<bool()> cancelled,
               absl::Time deadline, std::function<void(const absl::Status&)> done);
  // Records metrics and a log line for a finished call.
  void Record(const char* rpc, const std::string& request_id, const absl::Status& status,
              absl::Time start);
  void CallStarted();
  void CallEnded();
  // The device for `request`: the backend of the GPU its CUDA tensors live on, else the least
  // loaded healthy GPU backend that computes its dtype, else the CPU (falling back to the first
  // device, which then answers why it cannot).
  Device* PickDevice(const ParsedRequest& request);
  // Who may do what with regions: authorization (write role) and, for shared memory, the proof
  // of who owns the segment (Unix socket peer uid) unless allow_tcp_shm.
  absl::Status CheckRegionCall(const Caller& caller, const char* rpc, bool shm) const;
  // After a request on `device`: reports a newly failed backend.
  void CheckHealth(Device* device);

  const ServiceInfo info_;
  std::vector<Device>* const devices_;
  RegionManager* const regions_;
  AttentionPipeline* const pipeline_;
  ConfigCache* const cache_;
  WorkerMetrics* const metrics_;
  const Authorizer* const auth_;
  std::function<void(const std::string&)> before_execute_;
  std::function<void(const std::string&, const absl::Status&)> on_device_failed_;
  std::vector<CudaDeviceInfo> gpus_;  // Visible GPUs (read once: uuid -> ordinal).
  std::mutex failed_mu_;
  std::vector<std::string> failed_;  // Devices already reported. Guarded by failed_mu_.
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_{1};
  mutable std::mutex calls_mu_;
  std::condition_variable calls_cv_;
  int active_calls_ = 0;  // Guarded by calls_mu_.
};

}  // namespace spattn

#endif  // SPATTN_SERVER_ATTENTION_SERVICE_H_
