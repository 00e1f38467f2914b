// spattn-bench: times every sparse attention method's index build and kernel on a synthetic
// LLM-like workload or on captured Q/K/V, and measures density, recall and output error.
// `spattn-bench --help` lists the flags.
#include <iostream>
#include <string>
#include <vector>

#include "tests/bench/bench_lib.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return spattn::RunBench(args, std::cout, std::cerr);
}
