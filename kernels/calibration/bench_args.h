// Flag reading and workload generation shared by the calibration benchmarks
// (pattern_search_bench, saap_rows_bench): plain `--name=value` flags, a bad value exits 2 with
// the flag's name, a workload error exits 1. Benchmarks only; servers and clients use
// client/flags.h.
#ifndef SPATTN_KERNELS_CALIBRATION_BENCH_ARGS_H_
#define SPATTN_KERNELS_CALIBRATION_BENCH_ARGS_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace bench_args {

// The value of --name=..., or `def` when absent.
inline std::string Flag(int argc, char** argv, const char* name, const std::string& def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return argv[i] + prefix.size();
    }
  }
  return def;
}

inline int IntFlag(int argc, char** argv, const char* name, int def) {
  int v = def;
  const std::string s = Flag(argc, argv, name, "");
  if (!s.empty() && !absl::SimpleAtoi(s, &v)) {
    std::fprintf(stderr, "--%s: not an integer\n", name);
    std::exit(2);
  }
  return v;
}

inline double DoubleFlag(int argc, char** argv, const char* name, double def) {
  double v = def;
  const std::string s = Flag(argc, argv, name, "");
  if (!s.empty() && !absl::SimpleAtod(s, &v)) {
    std::fprintf(stderr, "--%s: not a number\n", name);
    std::exit(2);
  }
  return v;
}

// --name=1,2,3 (default `def`, the same form).
inline std::vector<int> IntList(int argc, char** argv, const char* name, const std::string& def) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(Flag(argc, argv, name, def), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      std::fprintf(stderr, "--%s: not a list of integers\n", name);
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

// One llm_mix prompt of `seq` tokens (bf16, ProblemShape's default): `seed` draws the prompt,
// `model_seed` the "model" (head kinds and plans), so prompts of one model_seed are held-out
// draws of the same layer.
inline Workload LlmMix(int seq, int q_heads, int kv_heads, int head_dim, uint64_t seed,
                       uint64_t model_seed) {
  WorkloadOptions o;
  o.workload = "llm_mix";
  o.shape.q_lens = {seq};
  o.shape.num_q_heads = q_heads;
  o.shape.num_kv_heads = kv_heads;
  o.shape.head_dim = head_dim;
  o.seed = seed;
  o.model_seed = model_seed;
  absl::StatusOr<Workload> w = GenerateWorkload(o);
  if (!w.ok()) {
    std::fprintf(stderr, "workload: %s\n", w.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*w);
}

}  // namespace bench_args
}  // namespace spattn

#endif  // SPATTN_KERNELS_CALIBRATION_BENCH_ARGS_H_
