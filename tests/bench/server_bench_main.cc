// spattn-server-bench: the worker's overhead on top of the kernel, per handle kind (inline,
// shared memory, CUDA IPC). `spattn-server-bench --help` lists the flags.
#include <iostream>
#include <string>
#include <vector>

#include "tests/bench/server_bench_lib.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return spattn::RunServerBench(args, std::cout, std::cerr);
}
