// Opt-in per-stage device times of one GPU build: with SPATTN_GPU_BUILDER_PROFILE set in the
// environment, a StageTimer records a CUDA event per mark and, when destroyed, prints one line
// "gpu builder <method>: <stage> <ms> ms ..." to stderr (the time from each mark to the next,
// named by the later mark). Unset (the default) it creates no events and prints nothing.
// Not thread-safe: one build, one stream.
#ifndef SPATTN_KERNELS_CUDA_COMMON_STAGE_TIMER_H_
#define SPATTN_KERNELS_CUDA_COMMON_STAGE_TIMER_H_

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

namespace spattn {

class StageTimer {
 public:
  StageTimer(cudaStream_t stream, const char* method);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  // Records the end of stage `name` on the stream (nothing when off).
  void Mark(const char* name);
  // An event for stage `name` that the caller records itself (inside a launcher, between
  // kernels); null when off. Stages print in the order of Mark / Event calls.
  cudaEvent_t Event(const char* name);
  // Drops the marks (a build that failed prints nothing).
  void Cancel() { cancelled_ = true; }
  // Whether SPATTN_GPU_BUILDER_PROFILE turned it on (builders' own profile lines follow it).
  bool on() const { return on_; }

 private:
  cudaStream_t stream_;
  const char* method_;
  bool on_;
  bool cancelled_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_STAGE_TIMER_H_
