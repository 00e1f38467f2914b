#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <utility>

namespace spattn {
namespace {

// Seconds from 1 ms to ~2 min, factor ~2.5 apart.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120};
  return *b;
}

const prometheus::Histogram::BucketBoundaries& DensityBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0};
  return *b;
}

const prometheus::Histogram::BucketBoundaries& RecallBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0};
  return *b;
}

constexpr Stage kStages[] = {Stage::kResolve, Stage::kConfig, Stage::kIndexBuild,
                             Stage::kRecall,  Stage::kKernel, Stage::kOutput};
constexpr HandleKind kHandleKinds[] = {HandleKind::kInline, HandleKind::kSystemRegion,
                                       HandleKind::kCudaRegion, HandleKind::kCudaIpc};
constexpr ErrorKind kErrorKinds[] = {
    ErrorKind::kValidation,  ErrorKind::kNotFound,     ErrorKind::kPrecondition,
    ErrorKind::kQueueFull,   ErrorKind::kDeadline,     ErrorKind::kCancelled,
    ErrorKind::kUnavailable, ErrorKind::kIndexService, ErrorKind::kInternal};

const char* CodeName(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "OK";
    case absl::StatusCode::kCancelled:
      return "CANCELLED";
    case absl::StatusCode::kUnknown:
      return "UNKNOWN";
    case absl::StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case absl::StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case absl::StatusCode::kNotFound:
      return "NOT_FOUND";
    case absl::StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case absl::StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case absl::StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case absl::StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case absl::StatusCode::kAborted:
      return "ABORTED";
    case absl::StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case absl::StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case absl::StatusCode::kInternal:
      return "INTERNAL";
    case absl::StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case absl::StatusCode::kDataLoss:
      return "DATA_LOSS";
    case absl::StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kResolve:
      return "resolve";
    case Stage::kConfig:
      return "config";
    case Stage::kIndexBuild:
      return "index_build";
    case Stage::kRecall:
      return "recall";
    case Stage::kKernel:
      return "kernel";
    case Stage::kOutput:
      return "output";
  }
  return "unknown";
}

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kValidation:
      return "validation";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kPrecondition:
      return "precondition";
    case ErrorKind::kQueueFull:
      return "queue_full";
    case ErrorKind::kDeadline:
      return "deadline";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kIndexService:
      return "index_service";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

ErrorKind ErrorKindOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return ErrorKind::kValidation;
    case absl::StatusCode::kNotFound:
      return ErrorKind::kNotFound;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kPrecondition;
    case absl::StatusCode::kResourceExhausted:
      return ErrorKind::kQueueFull;
    case absl::StatusCode::kDeadlineExceeded:
      return ErrorKind::kDeadline;
    case absl::StatusCode::kCancelled:
      return ErrorKind::kCancelled;
    case absl::StatusCode::kUnavailable:
      return ErrorKind::kUnavailable;
    default:
      return ErrorKind::kInternal;
  }
}

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry, const std::string& version,
                             bool cuda_compiled_in) {
  requests_ = &prometheus::BuildCounter()
                   .Name("spattn_requests_total")
                   .Help("RPCs answered by the worker, by RPC and gRPC status code.")
                   .Register(registry);
  request_duration_ =
      &prometheus::BuildHistogram()
           .Name("spattn_request_duration_seconds")
           .Help("Wall time of attention requests (one stream message counts as one), seconds.")
           .Register(registry)
           .Add({}, DurationBuckets());
  auto& stages = prometheus::BuildHistogram()
                     .Name("spattn_stage_duration_seconds")
                     .Help("Time spent per request stage, seconds.")
                     .Register(registry);
  for (Stage s : kStages)
    stage_duration_[s] = &stages.Add({{"stage", StageName(s)}}, DurationBuckets());
  in_flight_ = &prometheus::BuildGauge()
                    .Name("spattn_requests_in_flight")
                    .Help("Attention requests admitted and not yet answered.")
                    .Register(registry)
                    .Add({});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("spattn_queue_depth")
                      .Help("Attention requests waiting in a device's queue (not yet running).")
                      .Register(registry);
  prefill_tokens_ = &prometheus::BuildCounter()
                         .Name("spattn_prefill_tokens_total")
                         .Help("Query tokens whose attention the worker computed.")
                         .Register(registry)
                         .Add({});
  auto& density = prometheus::BuildHistogram()
                      .Name("spattn_attention_density_ratio")
                      .Help("Computed (query, key) pairs / causal pairs, per head, by method.")
                      .Register(registry);
  auto& recall = prometheus::BuildHistogram()
                     .Name("spattn_attention_recall_ratio")
                     .Help(
                         "Attention-mass recall estimate per head (the recall guard's, or the "
                         "exact one when asked), by method.")
                     .Register(registry);
  auto& selected = prometheus::BuildCounter()
                       .Name("spattn_method_selected_total")
                       .Help("Heads computed with each method.")
                       .Register(registry);
  for (Method m : kAllMethods) {
    density_[m] = &density.Add({{"method", MethodName(m)}}, DensityBuckets());
    recall_[m] = &recall.Add({{"method", MethodName(m)}}, RecallBuckets());
    method_selected_[m] = &selected.Add({{"method", MethodName(m)}});
  }
  auto& transfer = prometheus::BuildCounter()
                       .Name("spattn_transfer_bytes_total")
                       .Help(
                           "Tensor bytes read (in) and written (out) through each handle "
                           "kind, and of those the bytes copied host to GPU (h2d) and GPU to "
                           "host (d2h) to reach the device that computed.")
                       .Register(registry);
  for (bool in : {true, false}) {
    for (HandleKind k : kHandleKinds) {
      transfer_[{in, k}] =
          &transfer.Add({{"direction", in ? "in" : "out"}, {"handle_kind", HandleKindName(k)}});
      copy_[{in, k}] =
          &transfer.Add({{"direction", in ? "h2d" : "d2h"}, {"handle_kind", HandleKindName(k)}});
    }
  }
  gpu_memory_ = &prometheus::BuildGauge()
                     .Name("spattn_gpu_memory_used_bytes")
                     .Help("GPU memory in use on the worker's devices (0 without a GPU).")
                     .Register(registry)
                     .Add({});
  auto& errors = prometheus::BuildCounter()
                     .Name("spattn_errors_total")
                     .Help("Failed RPCs and background failures, by kind.")
                     .Register(registry);
  for (ErrorKind k : kErrorKinds) errors_[k] = &errors.Add({{"kind", ErrorKindName(k)}});
  prometheus::BuildGauge()
      .Name("spattn_build_info")
      .Help("Constant 1, labelled with the worker's version and whether CUDA is compiled in.")
      .Register(registry)
      .Add({{"version", version}, {"cuda", cuda_compiled_in ? "true" : "false"}})
      .Set(1);
  index_service_up_ = &prometheus::BuildGauge()
                           .Name("spattn_index_service_up")
                           .Help(
                               "1 while the worker's link to the index service works (or none "
                               "is configured), 0 while it serves head configs from cache.")
                           .Register(registry)
                           .Add({});
  index_service_up_->Set(1);
}

void WorkerMetrics::RequestDone(const std::string& rpc, absl::StatusCode code, double seconds) {
  requests_->Add({{"rpc", rpc}, {"code", CodeName(code)}}).Increment();
  if (rpc == "ComputeAttention" || rpc == "ComputeAttentionStream") {
    request_duration_->Observe(seconds);
  }
  if (code != absl::StatusCode::kOk) Error(ErrorKindOf(code));
}

void WorkerMetrics::StageDone(Stage stage, double seconds) {
  stage_duration_.at(stage)->Observe(seconds);
}

void WorkerMetrics::InFlightAdd(int delta) { in_flight_->Increment(delta); }

void WorkerMetrics::QueueDepth(const std::string& device, int waiting) {
  // Family::Add returns the existing child for known labels (thread-safe).
  queue_depth_->Add({{"device", device}}).Set(waiting);
}

void WorkerMetrics::PrefillTokens(int64_t tokens) {
  prefill_tokens_->Increment(static_cast<double>(tokens));
}

void WorkerMetrics::HeadDone(Method method, double density) {
  method_selected_.at(method)->Increment();
  density_.at(method)->Observe(density);
}

void WorkerMetrics::Recall(Method method, double recall) { recall_.at(method)->Observe(recall); }

void WorkerMetrics::Transfer(bool inbound, HandleKind kind, int64_t bytes) {
  transfer_.at({inbound, kind})->Increment(static_cast<double>(bytes));
}

void WorkerMetrics::Copy(bool to_device, HandleKind kind, int64_t bytes) {
  copy_.at({to_device, kind})->Increment(static_cast<double>(bytes));
}

void WorkerMetrics::GpuMemoryUsed(uint64_t bytes) { gpu_memory_->Set(static_cast<double>(bytes)); }

void WorkerMetrics::Error(ErrorKind kind) { errors_.at(kind)->Increment(); }

void WorkerMetrics::IndexServiceUp(bool up) { index_service_up_->Set(up ? 1 : 0); }

}  // namespace spattn
