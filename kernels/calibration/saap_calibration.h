// Saap's offline side (seed 001, Sec. 4 and App. A) on a calibration workload: per kv head,
// spherical k-means over de-roped keys; per q head, a query classifier trained on the true
// attention mass per bucket of sampled long-range queries. Produces the LayerAssets that
// BuildSaapIndex reads (the index service stores them; tests and benches calibrate on the fly).
#ifndef SPATTN_KERNELS_CALIBRATION_SAAP_CALIBRATION_H_
#define SPATTN_KERNELS_CALIBRATION_SAAP_CALIBRATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/calibration/kmeans.h"
#include "kernels/calibration/query_classifier.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"

namespace spattn {

struct SaapCalibrationOptions {
  SphericalKMeansOptions kmeans;      // Default: 1024 centroids, 10 iterations, random init.
  ClassifierTrainOptions classifier;  // Default: hidden 1024, batch norm, Adam.
  // Leading keys of each sequence left out of k-means and of the targets: the attention sink,
  // which Saap always reads densely (App. A trains without it). Default: 1.
  int sink_tokens = 1;
  // A query's target only counts keys outside its dense local window, i.e. at distance >=
  // local_tokens ("(key, query) pairs more than 2047 steps apart", Sec. 4). Default: 2047.
  int local_tokens = 2047;
  // Keep only queries whose best-scoring key (sink excluded) is at least this far away, to
  // favour long-range queries (App. A); 0 keeps all. If fewer than one batch survive, the filter
  // is dropped for that head. Default: 1024.
  int long_range_distance = 1024;
  // Training queries sampled per q head over the whole batch. Default: 16384.
  int max_queries = 16384;
  uint64_t seed = 1;  // Default: 1 (query sampling).
};

// Training examples of one q head: de-roped queries and their attention mass per bucket.
struct ClassifierExamples {
  int64_t count = 0;
  std::vector<float> queries;  // [count, head_dim]
  std::vector<float> targets;  // [count, num_centroids], rows sum to 1
  bool long_range_filter_used = false;
};

// Collects examples for q head `q_head` of `problem`, using the RoPE settings and the kv head's
// centroids in `assets` (k-means must have run). Thread-safe; uses CpuThreads() threads.
absl::StatusOr<ClassifierExamples> CollectClassifierExamples(const AttentionProblem& problem,
                                                             const LayerAssets& assets, int q_head,
                                                             const SaapCalibrationOptions& options);

struct SaapCalibrationReport {
  std::vector<std::vector<double>> kmeans_objective;  // [kv head] per iteration
  std::vector<std::vector<double>> classifier_loss;   // [q head] per step
  std::vector<int64_t> training_queries;              // [q head]
};

// Fills assets->centroids, ->num_centroids and ->classifiers for every head of `problem`
// (host memory), reading assets->rope_* for de-roping. INVALID_ARGUMENT naming the option or
// the shortfall (e.g. fewer keys than centroids). Thread-safe for distinct outputs.
absl::Status CalibrateSaap(const AttentionProblem& problem, const SaapCalibrationOptions& options,
                           LayerAssets* assets, SaapCalibrationReport* maybe_report);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CALIBRATION_SAAP_CALIBRATION_H_
