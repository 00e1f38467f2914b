// spattn-server-bench as a library: what the worker adds on top of the kernel, per handle kind.
// Starts a worker in-process (WorkerServer::Start), sends the same problem through the C++
// client as inline bytes, through a POSIX shared-memory region and (with a GPU) through a CUDA
// IPC region held by a second process, and prints one JSON line per (seq_len, method, transport):
// end-to-end call time (p50/p99), the kernel time the worker reports, the overhead (call minus
// kernel) absolute and relative to the kernel, and for shared memory the time a plain
// cudaMemcpy of the same bytes takes (pinned and pageable), so that the shared-memory path can be
// judged against the copy it cannot avoid. `spattn-server-bench --help` lists the flags.
#ifndef SPATTN_TESTS_BENCH_SERVER_BENCH_LIB_H_
#define SPATTN_TESTS_BENCH_SERVER_BENCH_LIB_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spattn {

struct ServerBenchFlags {
  std::vector<int> seq_lens = {8192, 131072};  // Default: 8K and 128K keys (= queries).
  int heads = 32;                              // Default: 32 q heads.
  int kv_heads = 8;                            // Default: 8 kv heads.
  int head_dim = 128;                          // Default: 128.
  std::string dtype = "bf16";                  // Default: bf16.
  std::vector<std::string> methods = {"dense", "a_shape"};  // Default: dense, a_shape.
  // inline, shm, cuda_ipc. Default: all that the machine supports (cuda_ipc needs a GPU).
  std::vector<std::string> transports;
  int warmup = 2;                // Default: 2 calls not timed.
  int repeat = 10;               // Default: 10 timed calls.
  std::string devices = "auto";  // Default: auto (the worker's --devices).
  // Inline requests larger than this (in + out) are skipped. Default: 512 MiB.
  int64_t max_inline_total = int64_t{512} << 20;
  uint64_t seed = 1;  // Default: 1.
  // Internal: run as the CUDA IPC producer of one problem (seq_len = seq_lens[0]).
  // Default: false.
  bool ipc_producer = false;
  bool help = false;  // Default: false.
};

std::string ServerBenchUsage();
// --flag=value or --flag value. INVALID_ARGUMENT names the bad flag.
absl::StatusOr<ServerBenchFlags> ParseServerBenchFlags(const std::vector<std::string>& args);

// Runs the benchmark (or, with --ipc_producer, the producer). JSON lines to `out`, progress and
// errors to `err`. Returns the exit code: 0 ok (lines of transports that could not run carry
// "skipped"), 2 bad flags, 1 when the worker or the data could not be set up.
int RunServerBench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace spattn

#endif  // SPATTN_TESTS_BENCH_SERVER_BENCH_LIB_H_
