#include "server/work_queue.h"

#include "absl/strings/str_cat.h"

namespace spattn {

WorkQueue::WorkQueue(const WorkQueueOptions& options) : options_(options) {
  const int n = options_.threads > 0 ? options_.threads : 1;
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkQueue::~WorkQueue() { Stop(); }

absl::Status WorkQueue::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      return absl::UnavailableError(absl::StrCat(options_.name, ": the worker is shutting down"));
    }
    if (static_cast<int>(tasks_.size()) >= options_.capacity) {
      return absl::ResourceExhaustedError(
          absl::StrCat(options_.name, ": queue full (", options_.capacity,
                       " requests waiting); retry later or on another worker"));
    }
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return absl::OkStatus();
}

int WorkQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(tasks_.size());
}

int WorkQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void WorkQueue::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return tasks_.empty() && running_ == 0; });
}

void WorkQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkQueue::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // Stopping and drained.
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
    }
    task();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace spattn
