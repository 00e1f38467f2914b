// A minimal parallel-for for the CPU paths: dynamic scheduling over [0, n).
#ifndef SPATTN_KERNELS_PARALLEL_H_
#define SPATTN_KERNELS_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace spattn {

// Threads the CPU paths use. Default: std::thread::hardware_concurrency(). Thread-safe.
int CpuThreads();
void SetCpuThreads(int threads);  // <= 0 restores the default.

// Calls fn(i) once for every i in [0, n), spread over CpuThreads() threads (the caller's thread
// is one of them). Returns when all calls have returned.
void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace spattn

#endif  // SPATTN_KERNELS_PARALLEL_H_
