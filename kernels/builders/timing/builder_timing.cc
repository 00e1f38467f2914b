// Times the CPU index builders (paper defaults) on random Q/K and, for comparison, the CPU sparse
// kernel on each index. Usage:
//   builder_timing [--seq=16384] [--q_heads=8] [--kv_heads=8] [--dim=128] [--reps=3]
//                  [--threads=0] [--kernel=1]
// Prints one line per method: median build seconds over reps, density, kernel seconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/builders/build_index.h"
#include "kernels/builders/flex_prefill.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/host_problem.h"
#include "kernels/parallel.h"

namespace {

int Flag(int argc, char** argv, const char* name, int def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoi(argv[i] + prefix.size());
    }
  }
  return def;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  using spattn::Method;
  const int seq = Flag(argc, argv, "seq", 16384);
  const int q_heads = Flag(argc, argv, "q_heads", 8);
  const int kv_heads = Flag(argc, argv, "kv_heads", 8);
  const int dim = Flag(argc, argv, "dim", 128);
  const int reps = std::max(1, Flag(argc, argv, "reps", 3));
  const int threads = Flag(argc, argv, "threads", 0);
  const bool kernel = Flag(argc, argv, "kernel", 1) != 0;
  spattn::SetCpuThreads(threads);

  spattn::ProblemShape shape;
  shape.q_lens = {seq};
  shape.num_q_heads = q_heads;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = dim;
  shape.dtype = spattn::DType::kBF16;
  spattn::HostProblem hp(shape);
  hp.FillRandom(1);
  std::vector<int> heads(q_heads);
  for (int h = 0; h < q_heads; ++h) heads[h] = h;
  std::printf("seq=%d q_heads=%d kv_heads=%d dim=%d bf16 threads=%d reps=%d\n", seq, q_heads,
              kv_heads, dim, spattn::CpuThreads(), reps);

  for (Method m : {Method::kVerticalSlash, Method::kBlockSparse, Method::kFlexPrefill}) {
    spattn::MethodConfig config;
    config.method = m;
    spattn::SparseIndex index;
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status s =
          spattn::BuildSparseIndex(hp.problem(), config, heads, spattn::BuildOptions(), &index);
      const auto t1 = std::chrono::steady_clock::now();
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", spattn::MethodName(m), s.ToString().c_str());
        return 1;
      }
      times.push_back(Seconds(t0, t1));
    }
    std::sort(times.begin(), times.end());
    double density = 0;
    for (int slot = 0; slot < index.num_heads(); ++slot) {
      density += static_cast<double>(spattn::ComputedPairs(hp.problem(), index, slot)) /
                 spattn::AllowedPairs(hp.problem()) / index.num_heads();
    }
    double kernel_s = 0;
    if (kernel) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!spattn::SparseAttentionCpu(hp.problem(), index).ok()) return 1;
      kernel_s = Seconds(t0, std::chrono::steady_clock::now());
    }
    std::printf("%-15s build median %.4f s (min %.4f, max %.4f)  density %.3f  cpu kernel %.3f s\n",
                spattn::MethodName(m), times[times.size() / 2], times.front(), times.back(),
                density, kernel_s);
    if (m == Method::kFlexPrefill) {
      std::vector<spattn::FlexPrefillChoice> choices;
      if (!spattn::BuildFlexPrefillIndexWithChoices(hp.problem(), config.flex_prefill, heads,
                                                    &index, &choices)
               .ok()) {
        return 1;
      }
      int qa = 0;
      for (const auto& c : choices) qa += c.query_aware;
      std::printf("flex_prefill heads: %d query-aware, %d vertical-slash\n", qa,
                  static_cast<int>(choices.size()) - qa);
    }
  }
  return 0;
}
