// Times the SampleAttention, AnchorAttention and Saap CPU index builders (paper defaults) on a
// planted workload: median wall time over --reps builds after one warm-up, with density and,
// with --recall, the attention-mass recall of sampled rows.
//
//   bazel run -c opt //kernels:planted_workload_timing -- --seq=16384 --q_heads=8 --kv_heads=8 --d=128
//
// --workload=KIND runs every method on the shared generator's heads (kernels/workload) instead.
// Saap needs centroids and classifiers: random ones of the paper's shapes by default (the
// builder's cost does not depend on the values), or --calibrate to fit them on a second draw of
// the workload (slow at paper sizes on few cores).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/builders/build_index.h"
#include "kernels/calibration/saap_calibration.h"
#include "kernels/builders/testing/method_testing.h"
#include "kernels/parallel.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

struct Flags {
  int seq = 16384;
  int q_heads = 8;
  int kv_heads = 8;
  int d = 128;
  int reps = 3;
  int threads = 0;
  bool recall = false;
  bool calibrate = false;
  std::string methods = "sample_attention,anchor,saap";
  std::string workload;  // a kernels/workload kind for all methods instead of the planted heads
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    auto val = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      return std::strncmp(a, name, n) == 0 && a[n] == '=' ? a + n + 1 : nullptr;
    };
    if (const char* v = val("--seq")) {
      f->seq = std::atoi(v);
    } else if (const char* v = val("--q_heads")) {
      f->q_heads = std::atoi(v);
    } else if (const char* v = val("--kv_heads")) {
      f->kv_heads = std::atoi(v);
    } else if (const char* v = val("--d")) {
      f->d = std::atoi(v);
    } else if (const char* v = val("--reps")) {
      f->reps = std::max(1, std::atoi(v));
    } else if (const char* v = val("--threads")) {
      f->threads = std::atoi(v);
    } else if (const char* v = val("--methods")) {
      f->methods = v;
    } else if (const char* v = val("--workload")) {
      f->workload = v;
    } else if (std::strcmp(a, "--recall") == 0) {
      f->recall = true;
    } else if (std::strcmp(a, "--calibrate") == 0) {
      f->calibrate = true;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a);
      return false;
    }
  }
  return f->seq > 0 && f->q_heads > 0 && f->kv_heads > 0 && f->q_heads % f->kv_heads == 0 &&
         f->d >= 64;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int Main(int argc, char** argv) {
  Flags f;
  if (!Parse(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: planted_workload_timing [--seq=N] [--q_heads=N] [--kv_heads=N] [--d=N>=64] "
                 "[--reps=N] [--threads=N] [--methods=a,b] [--workload=KIND] [--recall] "
                 "[--calibrate]\n");
    return 2;
  }
  SetCpuThreads(f.threads);
  ProblemShape shape;
  shape.q_lens = {f.seq};
  shape.num_q_heads = f.q_heads;
  shape.num_kv_heads = f.kv_heads;
  shape.head_dim = f.d;
  shape.dtype = DType::kBF16;
  std::printf("S=%d q_heads=%d kv_heads=%d d=%d bf16, %d threads, median of %d\n", f.seq, f.q_heads,
              f.kv_heads, f.d, CpuThreads(), f.reps);

  // Structured heads (sink, local, columns, slashes) for SampleAttention and AnchorAttention.
  auto structured = method_testing::RandomProblem(shape, 1);
  method_testing::PlantedHead a, b;
  // Logit gaps like those of LLM heads (sink ~20 above the bulk), so that the paper defaults
  // (alpha 0.95, theta 12) select structure rather than everything.
  a.sink_logit = 20.f;
  a.slash_offsets = {0};
  a.slash_logit = 18.f;
  a.column_logit = 17.f;
  for (int j = 97; j < f.seq; j += f.seq / 24 + 13) a.columns.push_back(j);
  b = a;
  b.slash_offsets = {0, 1, 1000};
  b.columns.resize(a.columns.size() / 2);
  method_testing::PlantStructure(structured.get(), {a, b}, 2);
  // Clustered keys / topic queries under RoPE for Saap.
  method_testing::ClusterSpec spec;
  spec.clusters = 256;
  auto clustered = method_testing::RandomProblem(shape, 3);
  method_testing::PlantClusters(clustered.get(), spec, 4);

  Workload generated;
  if (!f.workload.empty()) {
    WorkloadOptions wo;
    wo.workload = f.workload;
    wo.shape = shape;
    absl::StatusOr<Workload> w = GenerateWorkload(wo);
    if (!w.ok()) {
      std::fprintf(stderr, "workload: %s\n", w.status().ToString().c_str());
      return 1;
    }
    generated = std::move(*w);
    std::printf("workload %s (kernels/workload)\n", f.workload.c_str());
  }
  MethodConfig saap_cfg;
  saap_cfg.method = Method::kSaap;
  LayerAssets assets;
  if (f.calibrate) {
    // Planted clusters: a second draw of the same "model". Generator workloads: the same prompt
    // (its content vectors depend on the seed).
    auto calib = method_testing::RandomProblem(shape, 5);
    method_testing::ClusterSpec cs = spec;
    cs.segment = 1;
    method_testing::PlantClusters(calib.get(), cs, 6);
    assets.rope_theta = f.workload.empty() ? spec.rope_theta : generated.options.rope_theta;
    SaapCalibrationOptions co;
    co.kmeans.num_centroids = saap_cfg.saap.num_centroids;
    co.classifier.steps = 200;
    co.max_queries = 8192;
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status st = CalibrateSaap(
        f.workload.empty() ? calib->problem() : generated.problem(), co, &assets, nullptr);
    if (!st.ok()) {
      std::fprintf(stderr, "calibration: %s\n", st.ToString().c_str());
      return 1;
    }
    std::printf("saap calibration: %.2f s\n", Seconds(t0, std::chrono::steady_clock::now()));
  } else {
    assets = method_testing::RandomSaapAssets(f.q_heads, f.kv_heads, f.d,
                                                 saap_cfg.saap.num_centroids, 1024, 7);
    assets.rope_theta = f.workload.empty() ? spec.rope_theta : generated.options.rope_theta;
  }

  const std::vector<int> heads = method_testing::AllHeads(structured->problem());
  for (Method m : {Method::kSampleAttention, Method::kAnchor, Method::kSaap}) {
    if (f.methods.find(MethodName(m)) == std::string::npos) continue;
    MethodConfig cfg;
    cfg.method = m;
    const AttentionProblem& p = !f.workload.empty()  ? generated.problem()
                                : m == Method::kSaap ? clustered->problem()
                                                     : structured->problem();
    BuildOptions opt;
    opt.maybe_assets = &assets;
    SparseIndex idx;
    std::vector<double> times;
    for (int r = 0; r <= f.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status st = BuildSparseIndex(p, cfg, heads, opt, &idx);
      const auto t1 = std::chrono::steady_clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", MethodName(m), st.ToString().c_str());
        return 1;
      }
      if (r > 0) times.push_back(Seconds(t0, t1));
    }
    std::sort(times.begin(), times.end());
    std::printf("%-17s %s\n  build: median %.1f ms (min %.1f, max %.1f); density %.4f",
                MethodName(m), cfg.DebugString().c_str(), 1e3 * times[times.size() / 2],
                1e3 * times.front(), 1e3 * times.back(), method_testing::Density(p, idx));
    if (f.recall) {
      std::printf("; recall %.4f", method_testing::MassRecall(p, idx, std::max(1, f.seq / 64)));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) { return spattn::Main(argc, argv); }
