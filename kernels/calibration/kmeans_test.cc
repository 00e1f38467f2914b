// Spherical k-means: monotone objective, recovery of planted clusters (objective and overlap, not
// ids), reproducibility across thread counts, empty-cluster handling, option errors.
#include "kernels/calibration/kmeans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "kernels/parallel.h"

namespace spattn {
namespace {

std::vector<float> Gaussian(int64_t n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (float& v : x) v = g(rng);
  return x;
}

// `k` unit directions in `d` dims; point i = dir[label[i]] * (1 + norm jitter) + noise.
struct Planted {
  std::vector<float> points, dirs;
  std::vector<int> label;
};

Planted MakePlanted(int64_t n, int d, int k, float noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  Planted p;
  p.dirs = Gaussian(k, d, seed + 1);
  for (int c = 0; c < k; ++c) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += p.dirs[c * d + j] * p.dirs[c * d + j];
    for (int j = 0; j < d; ++j) p.dirs[c * d + j] /= static_cast<float>(std::sqrt(ss));
  }
  std::uniform_int_distribution<int> pick(0, k - 1);
  std::uniform_real_distribution<float> scale(0.5f, 3.f);
  p.points.resize(static_cast<size_t>(n) * d);
  p.label.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int c = pick(rng);
    const float s = scale(rng);  // spherical k-means ignores the norm
    p.label[i] = c;
    for (int j = 0; j < d; ++j) p.points[i * d + j] = s * (p.dirs[c * d + j] + noise * g(rng));
  }
  return p;
}

double CosObjective(const std::vector<float>& x, int64_t n, int d, const std::vector<float>& cen,
                    const std::vector<int>& assign) {
  double obj = 0;
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0, xx = 0, cc = 0;
    for (int j = 0; j < d; ++j) {
      dot += double{x[i * d + j]} * cen[assign[i] * d + j];
      xx += double{x[i * d + j]} * x[i * d + j];
      cc += double{cen[assign[i] * d + j]} * cen[assign[i] * d + j];
    }
    obj += 1.0 - dot / std::sqrt(xx * cc);
  }
  return obj;
}

TEST(SphericalKMeansTest, ObjectiveNeverIncreases) {
  const int64_t n = 3000;
  const int d = 16;
  const std::vector<float> x = Gaussian(n, d, 1);
  for (KMeansInit init : {KMeansInit::kRandom, KMeansInit::kKMeansPlusPlus}) {
    SphericalKMeansOptions o;
    o.num_centroids = 32;
    o.iterations = 15;
    o.init = init;
    auto r = SphericalKMeans(x.data(), n, d, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->objective.size(), 16u);
    for (size_t i = 1; i < r->objective.size(); ++i) {
      // Float dot products: allow 1e-6 per point of rounding.
      EXPECT_LE(r->objective[i], r->objective[i - 1] + 1e-6 * n)
          << "init " << static_cast<int>(init) << " iteration " << i;
    }
    // Random seeds start far off; k-means++ seeds start close, but Lloyd still improves them.
    EXPECT_LT(r->objective.back(),
              (init == KMeansInit::kRandom ? 0.9 : 0.99) * r->objective.front());
    // Centroids are unit vectors and the reported objective matches the assignment.
    for (int c = 0; c < o.num_centroids; ++c) {
      double ss = 0;
      for (int j = 0; j < d; ++j) ss += r->centroids[c * d + j] * r->centroids[c * d + j];
      EXPECT_NEAR(ss, 1.0, 1e-5);
    }
    std::vector<int> assign(r->assignment.begin(), r->assignment.end());
    EXPECT_NEAR(CosObjective(x, n, d, r->centroids, assign), r->objective.back(), 1e-4 * n);
  }
}

TEST(SphericalKMeansTest, RecoversPlantedClusters) {
  const int64_t n = 6000;
  const int d = 24, k = 12;
  const Planted p = MakePlanted(n, d, k, 0.08f, 5);
  SphericalKMeansOptions o;
  o.num_centroids = k;
  o.iterations = 20;
  o.init = KMeansInit::kKMeansPlusPlus;
  o.seed = 3;
  auto r = SphericalKMeans(p.points.data(), n, d, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The planted directions are one (not the best) solution: k-means must do at least as well,
  // up to 1%.
  const double planted = CosObjective(p.points, n, d, p.dirs, p.label);
  EXPECT_LE(r->objective.back(), 1.01 * planted);
  // Overlap: every found cluster is (almost) one planted cluster, and all planted ones are hit.
  std::map<std::pair<int, int>, int> joint;
  for (int64_t i = 0; i < n; ++i) ++joint[{r->assignment[i], p.label[i]}];
  std::vector<int> majority(k, 0), size(k, 0);
  std::vector<bool> planted_hit(k, false);
  for (const auto& [key, count] : joint) {
    size[key.first] += count;
    if (count > majority[key.first]) majority[key.first] = count;
  }
  int agree = 0;
  for (int c = 0; c < k; ++c) agree += majority[c];
  for (const auto& [key, count] : joint) {
    if (count == majority[key.first] && count > 0) planted_hit[key.second] = true;
  }
  EXPECT_GE(agree, 0.99 * n);
  for (int c = 0; c < k; ++c) EXPECT_TRUE(planted_hit[c]) << "planted cluster " << c;
}

TEST(SphericalKMeansTest, SameResultWhateverTheThreadCount) {
  const int64_t n = 20000;
  const int d = 32;
  const std::vector<float> x = Gaussian(n, d, 9);
  SphericalKMeansOptions o;
  o.num_centroids = 40;
  o.iterations = 5;
  o.init = KMeansInit::kKMeansPlusPlus;
  SetCpuThreads(1);
  auto one = SphericalKMeans(x.data(), n, d, o);
  SetCpuThreads(3);
  auto three = SphericalKMeans(x.data(), n, d, o);
  SetCpuThreads(0);
  ASSERT_TRUE(one.ok() && three.ok());
  EXPECT_EQ(one->centroids, three->centroids);
  EXPECT_EQ(one->assignment, three->assignment);
  EXPECT_EQ(one->objective, three->objective);
}

TEST(SphericalKMeansTest, EmptyClustersAreReseeded) {
  // 100 copies of e_0, one e_1, one e_2 and 3 centroids: random seeds land on copies of e_0,
  // two clusters stay empty and must be re-seeded on the worst-fitting points (e_1, e_2).
  const int d = 8;
  std::vector<float> x(102 * d, 0.f);
  for (int i = 0; i < 100; ++i) x[i * d] = 1.f;
  x[100 * d + 1] = 1.f;
  x[101 * d + 2] = 1.f;
  SphericalKMeansOptions o;
  o.num_centroids = 3;
  o.iterations = 3;
  auto r = SphericalKMeans(x.data(), 102, d, o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (float v : r->centroids) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(r->objective.front(), 2.0, 1e-5);  // e_1 and e_2 at cos 0 from the seeds
  EXPECT_NEAR(r->objective.back(), 0.0, 1e-5);
  EXPECT_NE(r->assignment[100], r->assignment[0]);
  EXPECT_NE(r->assignment[101], r->assignment[100]);
}

TEST(SphericalKMeansTest, SubsampleAndErrors) {
  const std::vector<float> x = Gaussian(1000, 8, 2);
  SphericalKMeansOptions o;
  o.num_centroids = 10;
  o.max_points = 300;
  auto r = SphericalKMeans(x.data(), 1000, 8, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->assignment.size(), 300u);

  o.max_points = 5;
  r = SphericalKMeans(x.data(), 1000, 8, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("kmeans.num_centroids (10) exceeds"),
            std::string::npos)
      << r.status();
  o = SphericalKMeansOptions();
  o.iterations = -1;
  r = SphericalKMeans(x.data(), 1000, 8, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("kmeans.iterations"), std::string::npos);
  o = SphericalKMeansOptions();
  o.num_centroids = 0;
  r = SphericalKMeans(x.data(), 1000, 8, o);
  EXPECT_NE(std::string(r.status().message()).find("kmeans.num_centroids"), std::string::npos);
}

}  // namespace
}  // namespace spattn
