// Every Prometheus family the worker exports, declared in this one file. The registry is created
// by the caller and injected; label values come from small fixed sets (RPC names, status codes,
// stages, methods, handle kinds, error kinds), never from request data.
#ifndef SPATTN_SERVER_METRICS_H_
#define SPATTN_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "kernels/method_config.h"
#include "server/request.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace spattn {

enum class Stage { kResolve, kConfig, kIndexBuild, kRecall, kKernel, kOutput };
// "resolve", "config", "index_build", "recall", "kernel", "output"
const char* StageName(Stage stage);

// Label values of spattn_errors_total{kind}.
enum class ErrorKind {
  kValidation,    // INVALID_ARGUMENT / OUT_OF_RANGE
  kNotFound,      // unknown region or model
  kPrecondition,  // FAILED_PRECONDITION (GPU-only, read-only region, bad index data)
  kQueueFull,     // RESOURCE_EXHAUSTED
  kDeadline,      // DEADLINE_EXCEEDED
  kCancelled,     // CANCELLED
  kUnavailable,   // UNAVAILABLE (draining)
  kIndexService,  // the index service could not be read
  kInternal,      // anything else
};
const char* ErrorKindName(ErrorKind kind);
ErrorKind ErrorKindOf(absl::StatusCode code);

// Thread-safe: prometheus-cpp metrics are atomic; the maps below are filled in the constructor
// and only read afterwards.
class WorkerMetrics {
 public:
  // Registers every family in `registry` (which must outlive this object).
  WorkerMetrics(prometheus::Registry& registry, const std::string& version, bool cuda_compiled_in);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // A finished RPC: counts it under {rpc, code} and, for attention RPCs, observes its duration.
  void RequestDone(const std::string& rpc, absl::StatusCode code, double seconds);
  void StageDone(Stage stage, double seconds);
  void InFlightAdd(int delta);
  // Requests waiting (admitted, not yet running) in the queue of device `device`.
  void QueueDepth(const std::string& device, int waiting);
  void PrefillTokens(int64_t tokens);
  void HeadDone(Method method, double density);
  void Recall(Method method, double recall);
  void Transfer(bool inbound, HandleKind kind, int64_t bytes);
  // Bytes a backend copied between host and GPU memory (direction h2d / d2h) for tensors that
  // came through handles of `kind`.
  void Copy(bool to_device, HandleKind kind, int64_t bytes);
  void GpuMemoryUsed(uint64_t bytes);
  void Error(ErrorKind kind);
  void IndexServiceUp(bool up);

 private:
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Histogram* request_duration_;
  std::map<Stage, prometheus::Histogram*> stage_duration_;
  prometheus::Gauge* in_flight_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Counter* prefill_tokens_;
  std::map<Method, prometheus::Histogram*> density_;
  std::map<Method, prometheus::Histogram*> recall_;
  std::map<Method, prometheus::Counter*> method_selected_;
  std::map<std::pair<bool, HandleKind>, prometheus::Counter*> transfer_;
  std::map<std::pair<bool, HandleKind>, prometheus::Counter*> copy_;
  prometheus::Gauge* gpu_memory_;
  std::map<ErrorKind, prometheus::Counter*> errors_;
  prometheus::Gauge* index_service_up_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_METRICS_H_
