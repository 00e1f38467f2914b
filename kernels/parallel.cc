#include "kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace spattn {
namespace {
std::atomic<int> g_threads{0};
}  // namespace

int CpuThreads() {
  const int t = g_threads.load();
  if (t > 0) return t;
  return std::max(1u, std::thread::hardware_concurrency());
}

void SetCpuThreads(int threads) { g_threads.store(threads > 0 ? threads : 0); }

void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(CpuThreads(), n));
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace spattn
