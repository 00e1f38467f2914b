// Held-out recall of Saap against the number of query rows its classifier reads per index block
// (SaapParams::classify_rows): calibrates the layer's assets (k-means + classifier, as the index
// service's offline step) on one synthetic llm_mix prompt, then builds Saap indexes on other
// prompts through the same "model" (same model_seed, other seeds) for each classify_rows and
// prints recall (mean / min over sampled rows), density and the CPU build time. Usage:
//   saap_rows_bench [--seq_len=16384] [--q_heads=8] [--kv_heads=2] [--head_dim=128]
//       [--calib_len=8192] [--seed=2] [--holdout_seeds=3,4] [--model_seed=1]
//       [--num_centroids=1024] [--top_l=32] [--local_tokens=2047] [--hidden=1024] [--steps=100]
//       [--max_queries=4096] [--classify_rows=128,16,8,4,2,1] [--block_m=64]
//       [--sample_rows=128] [--threads=0]
// One line per (prompt, classify_rows); classify_rows >= block_m is every row (the seed).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/builders/build_index.h"
#include "kernels/calibration/bench_args.h"
#include "kernels/calibration/saap_calibration.h"
#include "kernels/fidelity.h"
#include "kernels/parallel.h"
#include "kernels/workload/workload.h"

namespace {

using spattn::bench_args::Flag;
using spattn::bench_args::IntFlag;
using spattn::bench_args::IntList;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int seq = IntFlag(argc, argv, "seq_len", 16384);
  const int qh = IntFlag(argc, argv, "q_heads", 8);
  const int kvh = IntFlag(argc, argv, "kv_heads", 2);
  const int dim = IntFlag(argc, argv, "head_dim", 128);
  const int calib_len = IntFlag(argc, argv, "calib_len", 8192);
  const int seed = IntFlag(argc, argv, "seed", 2);
  const int model_seed = IntFlag(argc, argv, "model_seed", 1);
  const int threads = IntFlag(argc, argv, "threads", 0);
  const int block_m = IntFlag(argc, argv, "block_m", 64);
  const int sample_rows = IntFlag(argc, argv, "sample_rows", 128);
  const std::vector<int> holdout = IntList(argc, argv, "holdout_seeds", "3,4");
  const std::vector<int> rows = IntList(argc, argv, "classify_rows", "128,16,8,4,2,1");
  if (threads > 0) spattn::SetCpuThreads(threads);

  spattn::SaapParams params;
  params.num_centroids = IntFlag(argc, argv, "num_centroids", 1024);
  params.top_l = IntFlag(argc, argv, "top_l", 32);
  params.local_tokens = IntFlag(argc, argv, "local_tokens", 2047);
  spattn::SaapCalibrationOptions co;
  co.kmeans.num_centroids = params.num_centroids;
  co.classifier.hidden = IntFlag(argc, argv, "hidden", 1024);
  co.classifier.steps = IntFlag(argc, argv, "steps", 100);
  co.local_tokens = params.local_tokens;
  co.max_queries = IntFlag(argc, argv, "max_queries", 4096);

  auto t0 = std::chrono::steady_clock::now();
  spattn::Workload calib = spattn::bench_args::LlmMix(calib_len, qh, kvh, dim, seed, model_seed);
  spattn::LayerAssets assets;
  assets.rope_theta = calib.options.rope_theta;
  const absl::Status cs = spattn::CalibrateSaap(calib.problem(), co, &assets, nullptr);
  if (!cs.ok()) {
    std::fprintf(stderr, "calibration: %s\n", cs.ToString().c_str());
    return 1;
  }
  std::printf(
      "# llm_mix %d q / %d kv heads, d %d; calibrated on seed %d (%d tokens, model %d) in %.1f "
      "s: %d centroids, hidden %d, %d steps; top_l %d, local %d, block_m %d\n",
      qh, kvh, dim, seed, calib_len, model_seed, Seconds(t0), params.num_centroids,
      co.classifier.hidden, co.classifier.steps, params.top_l, params.local_tokens, block_m);
  std::printf("%-6s %-6s %-13s %-8s %-8s %-8s %s\n", "prompt", "seq", "classify_rows", "recall",
              "min", "density", "cpu_build_s");
  for (int hs : holdout) {
    spattn::Workload w = spattn::bench_args::LlmMix(seq, qh, kvh, dim, hs, model_seed);
    std::vector<int> heads(qh);
    for (int h = 0; h < qh; ++h) heads[h] = h;
    for (int r : rows) {
      spattn::MethodConfig c;
      c.method = spattn::Method::kSaap;
      c.saap = params;
      c.saap.classify_rows = r;
      spattn::BuildOptions bo;
      bo.block_m = block_m;
      bo.maybe_assets = &assets;
      spattn::SparseIndex idx;
      t0 = std::chrono::steady_clock::now();
      const absl::Status bs = spattn::BuildSparseIndex(w.problem(), c, heads, bo, &idx);
      const double build_s = Seconds(t0);
      if (!bs.ok()) {
        std::fprintf(stderr, "build: %s\n", bs.ToString().c_str());
        return 1;
      }
      absl::StatusOr<spattn::FidelitySummary> f =
          spattn::SummarizeFidelity(w.problem(), idx, sample_rows, 7);
      if (!f.ok()) {
        std::fprintf(stderr, "fidelity: %s\n", f.status().ToString().c_str());
        return 1;
      }
      std::printf("%-6d %-6d %-13d %-8.4f %-8.4f %-8.4f %.2f\n", hs, seq, r, f->recall_mean,
                  f->recall_min, f->density_mean, build_s);
      std::fflush(stdout);
    }
  }
  return 0;
}
