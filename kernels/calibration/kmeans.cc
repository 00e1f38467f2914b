#include "kernels/calibration/kmeans.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

constexpr int64_t kChunk = 4096;  // points per assignment task
constexpr int kMaxPartials = 16;  // partial centroid sums reduced per update

void NormalizeRow(float* v, int d) {
  double ss = 0;
  for (int c = 0; c < d; ++c) ss += double{v[c]} * v[c];
  if (!(ss > 0) || !std::isfinite(ss)) {
    std::fill(v, v + d, 0.f);
    return;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (int c = 0; c < d; ++c) v[c] *= inv;
}

// Assigns every point; fills best cos per point; returns the objective sum(1 - cos).
double Assign(const std::vector<float>& x, int64_t n, int d, const std::vector<float>& centroids,
              int k, std::vector<int32_t>* assign, std::vector<float>* best) {
  std::vector<float> ct(static_cast<size_t>(d) * k);
  Transpose(centroids.data(), d, k, d, ct.data(), k);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  ParallelFor(chunks, [&](int64_t c) {
    const int64_t i0 = c * kChunk;
    const int m = static_cast<int>(std::min(kChunk, n - i0));
    AssignNearestCentroid(x.data() + i0 * d, m, d, ct.data(), k, assign->data() + i0,
                          best->data() + i0);
    double acc = 0;
    for (int i = 0; i < m; ++i) acc += 1.0 - (*best)[i0 + i];
    partial[c] = acc;
  });
  return std::accumulate(partial.begin(), partial.end(), 0.0);
}

// New centroids: normalised member sums; empty clusters take the worst-fitting points.
void Update(const std::vector<float>& x, int64_t n, int d, int k,
            const std::vector<int32_t>& assign, const std::vector<float>& best,
            std::vector<float>* centroids) {
  const int parts = static_cast<int>(std::min<int64_t>(kMaxPartials, (n + kChunk - 1) / kChunk));
  const int64_t per = (n + parts - 1) / parts;
  std::vector<std::vector<float>> sums(parts);
  std::vector<std::vector<int64_t>> counts(parts);
  ParallelFor(parts, [&](int64_t p) {
    sums[p].assign(static_cast<size_t>(k) * d, 0.f);
    counts[p].assign(k, 0);
    const int64_t i1 = std::min(n, (p + 1) * per);
    for (int64_t i = p * per; i < i1; ++i) {
      const int32_t c = assign[i];
      ++counts[p][c];
      float* s = &sums[p][static_cast<size_t>(c) * d];
      const float* xi = &x[static_cast<size_t>(i) * d];
      for (int j = 0; j < d; ++j) s[j] += xi[j];
    }
  });
  std::vector<int32_t> empty;
  std::vector<double> acc(d);
  for (int c = 0; c < k; ++c) {
    int64_t count = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int p = 0; p < parts; ++p) {
      count += counts[p][c];
      const float* s = &sums[p][static_cast<size_t>(c) * d];
      for (int j = 0; j < d; ++j) acc[j] += s[j];
    }
    if (count == 0) {
      empty.push_back(c);
      continue;
    }
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += acc[j] * acc[j];
    if (!(ss > 0)) continue;  // Members cancel out: keep the old centroid.
    const double inv = 1.0 / std::sqrt(ss);
    float* dst = &(*centroids)[static_cast<size_t>(c) * d];
    for (int j = 0; j < d; ++j) dst[j] = static_cast<float>(acc[j] * inv);
  }
  if (empty.empty()) return;
  // Re-seed each empty cluster on one of the worst-fitting points (lowest cos, lowest index).
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const size_t take = std::min(empty.size(), static_cast<size_t>(n));
  std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](int64_t a, int64_t b) {
    return best[a] != best[b] ? best[a] < best[b] : a < b;
  });
  for (size_t e = 0; e < take; ++e) {
    std::copy(x.begin() + order[e] * d, x.begin() + (order[e] + 1) * d,
              centroids->begin() + static_cast<int64_t>(empty[e]) * d);
  }
}

void InitRandom(const std::vector<float>& x, int64_t n, int d, int k, std::mt19937_64* rng,
                std::vector<float>* centroids) {
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  for (int c = 0; c < k; ++c) {
    std::uniform_int_distribution<int64_t> pick(c, n - 1);
    std::swap(idx[c], idx[pick(*rng)]);
    std::copy(x.begin() + idx[c] * d, x.begin() + (idx[c] + 1) * d,
              centroids->begin() + static_cast<int64_t>(c) * d);
  }
}

// Greedy k-means++ (as scikit-learn): each next seed is the best, by total potential
// sum(1 - max cos), of 2 + ln(k) candidates drawn with probability proportional to 1 - max cos.
void InitPlusPlus(const std::vector<float>& x, int64_t n, int d, int k, std::mt19937_64* rng,
                  std::vector<float>* centroids) {
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  std::uniform_int_distribution<int64_t> first(0, n - 1);
  int64_t chosen = first(*rng);
  std::vector<float> best(n, -INFINITY);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> weight(n), cum(n);
  std::vector<int64_t> cand(trials);
  std::vector<std::vector<double>> potential(chunks, std::vector<double>(trials));
  auto dot = [&](int64_t i, int64_t j) {
    const float* a = &x[static_cast<size_t>(i) * d];
    const float* b = &x[static_cast<size_t>(j) * d];
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += a[c] * b[c];
    return acc;
  };
  for (int c = 0; c < k; ++c) {
    std::copy(x.begin() + chosen * d, x.begin() + (chosen + 1) * d,
              centroids->begin() + static_cast<int64_t>(c) * d);
    if (c + 1 == k) break;
    ParallelFor(chunks, [&](int64_t ch) {
      const int64_t i1 = std::min(n, (ch + 1) * kChunk);
      for (int64_t i = ch * kChunk; i < i1; ++i) best[i] = std::max(best[i], dot(i, chosen));
    });
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      weight[i] = std::max(0.0, 1.0 - double{best[i]});
      total += weight[i];
      cum[i] = total;
    }
    if (!(total > 0)) {  // Every point coincides with a seed: any point will do.
      chosen = first(*rng);
      continue;
    }
    std::uniform_real_distribution<double> u(0.0, total);
    for (int t = 0; t < trials; ++t) {
      const double r = u(*rng);
      int64_t i = std::upper_bound(cum.begin(), cum.end(), r) - cum.begin();
      i = std::min(i, n - 1);
      while (i > 0 && weight[i] == 0) --i;  // land on a point that can still be chosen
      cand[t] = i;
    }
    ParallelFor(chunks, [&](int64_t ch) {
      const int64_t i1 = std::min(n, (ch + 1) * kChunk);
      for (int t = 0; t < trials; ++t) {
        double pot = 0;
        for (int64_t i = ch * kChunk; i < i1; ++i) {
          pot += std::max(0.0, 1.0 - std::max(double{best[i]}, double{dot(i, cand[t])}));
        }
        potential[ch][t] = pot;
      }
    });
    double best_pot = INFINITY;
    for (int t = 0; t < trials; ++t) {
      double pot = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) pot += potential[ch][t];
      if (pot < best_pot) {
        best_pot = pot;
        chosen = cand[t];
      }
    }
  }
}

}  // namespace

absl::StatusOr<SphericalKMeansResult> SphericalKMeans(const float* x_in, int64_t n_in, int dim,
                                                      const SphericalKMeansOptions& o) {
  if (dim <= 0)
    return absl::InvalidArgumentError(absl::StrCat("kmeans: dim must be > 0, got ", dim));
  if (o.num_centroids <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans.num_centroids must be > 0, got ", o.num_centroids));
  }
  if (o.iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans.iterations must be >= 0, got ", o.iterations));
  }
  if (o.max_points < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans.max_points must be >= 0, got ", o.max_points));
  }
  std::mt19937_64 rng(o.seed);
  // Optional subsample (sorted, so the points keep their order).
  std::vector<int64_t> rows;
  if (o.max_points > 0 && n_in > o.max_points) {
    std::vector<int64_t> all(n_in);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i = 0; i < o.max_points; ++i) {
      std::uniform_int_distribution<int64_t> pick(i, n_in - 1);
      std::swap(all[i], all[pick(rng)]);
    }
    rows.assign(all.begin(), all.begin() + o.max_points);
    std::sort(rows.begin(), rows.end());
  }
  const int64_t n = rows.empty() ? n_in : static_cast<int64_t>(rows.size());
  const int k = o.num_centroids;
  if (n < k) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmeans.num_centroids (", k, ") exceeds the number of points (", n, ")"));
  }
  std::vector<float> x(static_cast<size_t>(n) * dim);
  ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t ch) {
    const int64_t i1 = std::min(n, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < i1; ++i) {
      const int64_t src = rows.empty() ? i : rows[i];
      std::copy(x_in + src * dim, x_in + (src + 1) * dim, x.begin() + i * dim);
      NormalizeRow(&x[static_cast<size_t>(i) * dim], dim);
    }
  });

  SphericalKMeansResult res;
  res.centroids.assign(static_cast<size_t>(k) * dim, 0.f);
  if (o.init == KMeansInit::kKMeansPlusPlus) {
    InitPlusPlus(x, n, dim, k, &rng, &res.centroids);
  } else {
    InitRandom(x, n, dim, k, &rng, &res.centroids);
  }
  res.assignment.assign(n, 0);
  std::vector<float> best(n);
  for (int it = 0; it < o.iterations; ++it) {
    res.objective.push_back(Assign(x, n, dim, res.centroids, k, &res.assignment, &best));
    Update(x, n, dim, k, res.assignment, best, &res.centroids);
  }
  res.objective.push_back(Assign(x, n, dim, res.centroids, k, &res.assignment, &best));
  return res;
}

}  // namespace spattn
