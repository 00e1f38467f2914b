#include "kernels/cuda/common/stage_timer.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace spattn {

StageTimer::StageTimer(cudaStream_t stream, const char* method)
    : stream_(stream), method_(method), on_(std::getenv("SPATTN_GPU_BUILDER_PROFILE") != nullptr) {
  Mark("start");
}

StageTimer::~StageTimer() {
  if (!on_) return;
  if (!cancelled_ && marks_.size() >= 2 && cudaStreamSynchronize(stream_) == cudaSuccess) {
    std::string line = std::string("gpu builder ") + method_ + ":";
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second) != cudaSuccess) break;
      char buf[96];
      std::snprintf(buf, sizeof(buf), " %s %.3f ms", marks_[i].first, ms);
      line += buf;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  cudaGetLastError();
  for (auto& m : marks_) cudaEventDestroy(m.second);
}

cudaEvent_t StageTimer::Event(const char* name) {
  if (!on_) return nullptr;
  cudaEvent_t e;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  marks_.emplace_back(name, e);
  return e;
}

void StageTimer::Mark(const char* name) {
  cudaEvent_t e = Event(name);
  if (e != nullptr) cudaEventRecord(e, stream_);
}

}  // namespace spattn
