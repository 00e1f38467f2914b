// Runs the pattern search on one synthetic llm_mix layer and prints, per head, the planted kind,
// the chosen config, its recall / density / cost, the runner-up and the recall of the chosen
// config on a held-out draw; then the time spent per candidate. Usage:
//   pattern_search_bench [--seq_len=8192] [--q_heads=32] [--kv_heads=8] [--head_dim=128]
//       [--seed=2] [--holdout_seed=1] [--model_seed=1] [--target=0.95] [--sample_rows=256]
//       [--threads=0]
//       [--candidates=all] [--build_cost_weight=1]
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kernels/calibration/bench_args.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/parallel.h"
#include "kernels/workload/workload.h"

namespace {

using spattn::bench_args::DoubleFlag;
using spattn::bench_args::Flag;
using spattn::bench_args::IntFlag;

}  // namespace

int main(int argc, char** argv) {
  const int seq = IntFlag(argc, argv, "seq_len", 8192);
  const int qh = IntFlag(argc, argv, "q_heads", 32);
  const int kvh = IntFlag(argc, argv, "kv_heads", 8);
  const int dim = IntFlag(argc, argv, "head_dim", 128);
  const int seed = IntFlag(argc, argv, "seed", 2);
  const int holdout = IntFlag(argc, argv, "holdout_seed", 1);
  // The held-out draw is another prompt through the same "model" (head kinds and plans).
  const int model_seed = IntFlag(argc, argv, "model_seed", 1);
  spattn::SetCpuThreads(IntFlag(argc, argv, "threads", 0));
  spattn::PatternSearchOptions options;
  options.target_recall = DoubleFlag(argc, argv, "target", 0.95);
  options.sample_rows = IntFlag(argc, argv, "sample_rows", 256);
  options.build_cost_weight = DoubleFlag(argc, argv, "build_cost_weight", 1.0);

  absl::StatusOr<std::vector<spattn::Method>> methods =
      spattn::ParseCandidateMethods(Flag(argc, argv, "candidates", "all"));
  if (!methods.ok()) {
    std::fprintf(stderr, "%s\n", methods.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::vector<spattn::MethodConfig>> candidates =
      spattn::CandidatesForMethods(*methods, nullptr);
  if (!candidates.ok()) {
    std::fprintf(stderr, "%s\n", candidates.status().ToString().c_str());
    return 2;
  }
  spattn::Workload calib = spattn::bench_args::LlmMix(seq, qh, kvh, dim, seed, model_seed);
  // More calibration prompts of the same model: seeds seed + 1000 i.
  const int draws = IntFlag(argc, argv, "draws", 1);
  std::vector<spattn::Workload> extra;
  std::vector<const spattn::AttentionProblem*> problems = {&calib.problem()};
  for (int i = 1; i < draws; ++i)
    extra.push_back(spattn::bench_args::LlmMix(seq, qh, kvh, dim, seed + 1000 * i, model_seed));
  for (const auto& w : extra) problems.push_back(&w.problem());
  spattn::Workload held = spattn::bench_args::LlmMix(seq, qh, kvh, dim, holdout, model_seed);
  std::printf(
      "seq=%d q_heads=%d kv_heads=%d dim=%d seed=%d holdout=%d target=%.3f rows=%d "
      "threads=%d candidates=%zu\n",
      seq, qh, kvh, dim, seed, holdout, options.target_recall, options.sample_rows,
      spattn::CpuThreads(), candidates->size());

  absl::StatusOr<spattn::PatternSearchResult> r =
      spattn::SearchHeadPatterns(problems, *candidates, options);
  if (!r.ok()) {
    std::fprintf(stderr, "search: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::vector<int> heads;
  std::vector<spattn::MethodConfig> chosen;
  for (const auto& h : r->heads) {
    heads.push_back(h.head);
    chosen.push_back(h.chosen.config);
  }
  absl::StatusOr<std::vector<spattn::HeadEvaluation>> eval =
      spattn::EvaluateHeadConfigs(held.problem(), heads, chosen, options.sample_rows, options.seed);
  if (!eval.ok()) {
    std::fprintf(stderr, "held-out: %s\n", eval.status().ToString().c_str());
    return 1;
  }
  const double allowed = static_cast<double>(spattn::AllowedPairs(calib.problem()));
  std::printf("%4s %-15s %-26s %7s %7s %7s %7s  %s\n", "head", "kind", "chosen", "recall",
              "density", "heldout", "cost", "runner-up (recall, density)");
  for (size_t i = 0; i < r->heads.size(); ++i) {
    const auto& h = r->heads[i];
    std::printf("%4d %-15s %-26s %7.4f %7.4f %7.4f %7.4f  %s (%.4f, %.4f)\n", h.head,
                spattn::HeadKindName(calib.heads[h.head].kind),
                spattn::ConfigLabel(h.chosen.config).c_str(), h.chosen.recall, h.chosen.density,
                (*eval)[i].recall, h.chosen.cost / allowed,
                spattn::ConfigLabel(h.runner_up.config).c_str(), h.runner_up.recall,
                h.runner_up.density);
  }
  const int verbose = IntFlag(argc, argv, "verbose_head", -1);
  if (verbose >= 0) {
    options.keep_all_scores = true;
    options.heads = {verbose};
    absl::StatusOr<spattn::PatternSearchResult> v =
        spattn::SearchHeadPatterns({&held.problem()}, *candidates, options);
    absl::StatusOr<spattn::PatternSearchResult> c =
        spattn::SearchHeadPatterns({&calib.problem()}, *candidates, options);
    if (v.ok() && c.ok()) {
      std::printf(
          "head %d: every candidate (calibration recall / held-out recall, density, cost)\n",
          verbose);
      for (size_t i = 0; i < v->heads[0].all.size(); ++i) {
        const auto& a = c->heads[0].all[i];
        std::printf("  %-100s %.4f / %.4f  %.4f  %.4f\n", a.config.DebugString().c_str(), a.recall,
                    v->heads[0].all[i].recall, a.density, a.cost / allowed);
      }
    }
  }
  std::printf("time: total %.2f s, exact %.2f s, score %.2f s\n", r->total_seconds,
              r->exact_seconds, r->score_seconds);
  for (size_t c = 0; c < candidates->size(); ++c) {
    std::printf("  build %-100s %6.3f s  skipped on %d heads\n",
                (*candidates)[c].DebugString().c_str(), r->build_seconds[c], r->skipped_heads[c]);
  }
  return 0;
}
