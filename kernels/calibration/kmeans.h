// Spherical k-means (Saap, seed 001, Sec. 3-4 and App. A): partitions unit-normalised vectors
// (de-roped keys) by cosine similarity into num_centroids buckets with unit centroids. Lloyd
// iterations with a multi-threaded assignment step; random or k-means++ initialisation from a
// fixed seed, so a run is reproducible whatever the thread count.
#ifndef SPATTN_KERNELS_CALIBRATION_KMEANS_H_
#define SPATTN_KERNELS_CALIBRATION_KMEANS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace spattn {

enum class KMeansInit {
  kRandom,  // num_centroids distinct points drawn uniformly (Saap App. A).
  // Greedy k-means++ (as scikit-learn): each next seed is the best of 2 + ln(k) candidates drawn
  // with probability proportional to 1 - cos to the nearest seed so far.
  kKMeansPlusPlus,
};

struct SphericalKMeansOptions {
  int num_centroids = 1024;               // Default: 1024 (Saap).
  int iterations = 10;                    // Default: 10 (Saap App. A).
  KMeansInit init = KMeansInit::kRandom;  // Default: kRandom (Saap App. A).
  uint64_t seed = 1;                      // Default: 1.
  int64_t max_points = 0;                 // Default: 0 (all points); else a seeded subsample.
};

struct SphericalKMeansResult {
  std::vector<float> centroids;     // [num_centroids, dim], unit norm
  std::vector<int32_t> assignment;  // [points used] bucket of each (subsampled) point
  // Sum over points of 1 - cos(point, its centroid), after each assignment step: entry i is
  // measured before update i, the last after the final update. Never increases.
  std::vector<double> objective;
};

// Clusters the n points x [n, dim] (need not be normalised; zero rows count as cos 0).
// INVALID_ARGUMENT (naming the option) when num_centroids > points, sizes are not > 0, or
// iterations < 0. Thread-safe: reads x only; uses CpuThreads() threads.
absl::StatusOr<SphericalKMeansResult> SphericalKMeans(const float* x, int64_t n, int dim,
                                                      const SphericalKMeansOptions& options);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CALIBRATION_KMEANS_H_
