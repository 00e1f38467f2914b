// The worker's request path after validation (DESIGN §6): resolve handles -> head configs ->
// plan -> index builders -> kernel -> output -> stats, each stage timed, with the deadline and
// cancellation checked between stages and between head groups. Runs on an executor thread.
#ifndef SPATTN_SERVER_PIPELINE_H_
#define SPATTN_SERVER_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/method_config.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "server/recall_guard.h"
#include "server/regions.h"
#include "server/request.h"
#include "spattn/v1/attention_service.pb.h"

namespace spattn {

struct PipelineOptions {
  // Requests whose sequences all have fewer keys than this run dense (explicit overrides
  // excepted). 0 = never. Default: 0.
  int dense_below_tokens = 0;
  // Method of heads when the request names no model and no override. Default: dense.
  MethodConfig default_method;
  // Query rows sampled per head for estimate_recall. Default: 64.
  int recall_sample_rows = 64;
  // Seed of the recall sample (fixed, so repeated requests get the same estimate).
  // Default: 0x5eed.
  uint64_t recall_seed = 0x5eed;
  // Query rows per index block for methods without their own block size. Default: 64.
  int block_m = 64;
  // Query rows per index block of sampled_lines (which has no block size of its own); 0 =
  // block_m. 128-row blocks are its fast setting (NVIDIA H100, llm_mix 32/8 heads d128 at recall
  // 0.95: index + kernel 0.44x / 0.33x cuDNN SDPA at 32K / 128K, against 0.65x / 0.51x on 64-row
  // blocks; kernels/cuda/NOTES.md "Session 20 — s20-sldensity"). Default: 128.
  int sampled_lines_block_m = 128;
  // The online recall guard (server/recall_guard.h): every head's recall estimate, and widening
  // of heads that run their published / default config when short of guard.target.
  // guard.probe_rows = 0 turns it off; < 0 (the default here) = 32 on the CPU backend and 64 on
  // CUDA (where the estimate runs on the GPU, BackendCall::MassRecall).
  RecallGuardOptions guard = [] {
    RecallGuardOptions o;
    o.probe_rows = -1;
    return o;
  }();
};

// How the caller can stop a request: its deadline and a cancellation probe.
struct CallControl {
  absl::Time deadline = absl::InfiniteFuture();  // Default: none.
  std::function<bool()> cancelled;               // Default: never.
};

// Thread-safe: Run may be called from several executor threads at once.
class AttentionPipeline {
 public:
  // `regions` must outlive the pipeline; `maybe_cache` and `maybe_metrics` may be null.
  AttentionPipeline(const PipelineOptions& options, RegionManager* regions,
                    ConfigCache* maybe_cache, WorkerMetrics* maybe_metrics);

  // Runs `request` (already validated by ParseAttentionRequest; it still points into the
  // AttentionRequest message, which must stay alive) on `backend` and writes `response`.
  // `parse_seconds` (the validation time on the gRPC thread) counts in the resolve stage.
  absl::Status Run(ParsedRequest& request, AttentionBackend& backend, const CallControl& control,
                   double parse_seconds, v1::AttentionResponse* response);

 private:
  // Reports GPU memory in use on the devices CUDA handles have touched so far.
  void UpdateGpuMemory(uint64_t devices_now);

  const PipelineOptions options_;
  GuardMemory guard_memory_;  // What the recall guard widened heads to, per length class.
  std::atomic<uint64_t> touched_devices_{0};  // Bit d: CUDA device d was used.
  RegionManager* const regions_;
  ConfigCache* const cache_;
  WorkerMetrics* const metrics_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_PIPELINE_H_
