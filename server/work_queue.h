// A bounded FIFO of tasks run by a fixed pool of threads: one per device in the worker, so that
// attention work never runs on gRPC threads and a full device refuses work early
// (RESOURCE_EXHAUSTED) instead of piling up latency.
#ifndef SPATTN_SERVER_WORK_QUEUE_H_
#define SPATTN_SERVER_WORK_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace spattn {

struct WorkQueueOptions {
  // Threads running tasks. Default: 1.
  int threads = 1;
  // Tasks waiting (not counting running ones) before TrySubmit refuses. Default: 64.
  int capacity = 64;
  // For error messages, e.g. "cpu:0". Default: "queue".
  std::string name = "queue";
};

// Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(const WorkQueueOptions& options);
  ~WorkQueue();  // Stop().
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task`; RESOURCE_EXHAUSTED when `capacity` tasks already wait, UNAVAILABLE after
  // Stop().
  absl::Status TrySubmit(std::function<void()> task);
  int waiting() const;
  int running() const;
  // Blocks until nothing waits or runs.
  void WaitIdle();
  // Runs what is queued, then joins the threads. Later submissions fail with UNAVAILABLE.
  void Stop();

 private:
  void Loop();

  const WorkQueueOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;               // Work arrived or stopping.
  std::condition_variable idle_cv_;          // A task finished.
  std::deque<std::function<void()>> tasks_;  // Guarded by mu_.
  int running_ = 0;                          // Guarded by mu_.
  bool stopping_ = false;                    // Guarded by mu_.
  std::vector<std::thread> threads_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_WORK_QUEUE_H_
