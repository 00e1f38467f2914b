#include "kernels/calibration/query_classifier.h"

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

constexpr int64_t kEvalChunk = 256;

// KL(t || softmax(logits)) of one row; writes softmax(logits) to p.
double KlRow(const float* logits, const float* t, int c_count, float* p) {
  float mx = -INFINITY;
  for (int c = 0; c < c_count; ++c) mx = std::max(mx, logits[c]);
  double sum = 0;
  for (int c = 0; c < c_count; ++c) sum += std::exp(double{logits[c]} - mx);
  const double log_z = mx + std::log(sum);
  double kl = 0;
  for (int c = 0; c < c_count; ++c) {
    const double logp = logits[c] - log_z;
    p[c] = static_cast<float>(std::exp(logp));
    if (t[c] > 0) kl += t[c] * (std::log(double{t[c]}) - logp);
  }
  return kl;
}

// Adam state of one parameter tensor.
struct AdamParam {
  std::vector<float> w, g, m, v;
  void Init(size_t n) {
    w.assign(n, 0.f);
    g.assign(n, 0.f);
    m.assign(n, 0.f);
    v.assign(n, 0.f);
  }
  void Step(const ClassifierTrainOptions& o, int t) {
    const double b1t = 1.0 - std::pow(double{o.adam_beta1}, t);
    const double b2t = 1.0 - std::pow(double{o.adam_beta2}, t);
    const float lr = static_cast<float>(o.learning_rate * std::sqrt(b2t) / b1t);
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = o.adam_beta1 * m[i] + (1.f - o.adam_beta1) * g[i];
      v[i] = o.adam_beta2 * v[i] + (1.f - o.adam_beta2) * g[i] * g[i];
      w[i] -= lr * m[i] / (std::sqrt(v[i]) + o.adam_epsilon);
    }
  }
};

void ColumnSums(const std::vector<float>& x, int rows, int cols, std::vector<float>* out) {
  out->assign(cols, 0.f);
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r) * cols];
    for (int c = 0; c < cols; ++c) (*out)[c] += xr[c];
  }
}

// Runs fn(first, count, logits) over chunks of the n examples in parallel.
template <typename Fn>
void ForEachLogitChunk(const std::vector<DenseLayerWeights>& layers, const float* queries,
                       int64_t n, int dim, int num_buckets, Fn fn) {
  const int64_t chunks = (n + kEvalChunk - 1) / kEvalChunk;
  ParallelFor(chunks, [&](int64_t ch) {
    const int64_t i0 = ch * kEvalChunk;
    const int m = static_cast<int>(std::min(kEvalChunk, n - i0));
    std::vector<float> logits(static_cast<size_t>(m) * num_buckets), scratch;
    ClassifierForward(layers, queries + i0 * dim, m, logits.data(), &scratch);
    fn(ch, i0, m, logits);
  });
}

}  // namespace

absl::StatusOr<ClassifierTrainResult> TrainQueryClassifier(const float* queries,
                                                           const float* targets, int64_t n, int dim,
                                                           int num_buckets,
                                                           const ClassifierTrainOptions& o) {
  if (n <= 0) return absl::InvalidArgumentError("classifier: no training examples");
  if (dim <= 0 || num_buckets <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "classifier: dim and num_buckets must be > 0, got ", dim, " and ", num_buckets));
  }
  if (o.hidden <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("classifier.hidden must be > 0, got ", o.hidden));
  }
  if (o.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("classifier.steps must be >= 0, got ", o.steps));
  }
  if (o.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("classifier.batch_size must be > 0, got ", o.batch_size));
  }
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("classifier.learning_rate must be > 0, got ", o.learning_rate));
  }
  const int bsz = static_cast<int>(std::min<int64_t>(o.batch_size, n));
  if (o.batch_norm && bsz < 2) {
    return absl::InvalidArgumentError(
        "classifier.batch_size: batch norm needs batches of at least 2 examples");
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < num_buckets; ++c) {
      const float t = targets[i * num_buckets + c];
      if (!(t >= 0) || !std::isfinite(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "classifier: targets row ", i, " has a negative or non-finite entry at ", c));
      }
    }
  }
  const int d = dim, h = o.hidden, nc = num_buckets;
  std::mt19937_64 rng(o.seed);
  AdamParam w1, b1, gamma, beta, w2, b2;
  w1.Init(static_cast<size_t>(d) * h);
  b1.Init(h);
  gamma.Init(h);
  beta.Init(h);
  w2.Init(static_cast<size_t>(h) * nc);
  b2.Init(nc);
  // PyTorch's nn.Linear initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  auto uniform = [&](std::vector<float>* v, int fan_in) {
    const float a = 1.f / std::sqrt(static_cast<float>(fan_in));
    std::uniform_real_distribution<float> u(-a, a);
    for (float& x : *v) x = u(rng);
  };
  uniform(&w1.w, d);
  uniform(&b1.w, d);
  uniform(&w2.w, h);
  uniform(&b2.w, h);
  std::fill(gamma.w.begin(), gamma.w.end(), 1.f);
  std::vector<double> run_mean(h, 0.0), run_var(h, 1.0);

  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t next = 0;

  std::vector<float> xb(static_cast<size_t>(bsz) * d), tb(static_cast<size_t>(bsz) * nc);
  std::vector<float> z(static_cast<size_t>(bsz) * h), zhat(z.size()), y(z.size()), a(z.size());
  std::vector<float> logits(static_cast<size_t>(bsz) * nc), dlog(logits.size()), p(nc);
  std::vector<float> at(z.size()), w2t(w2.w.size()), da(z.size()), xt(xb.size());
  std::vector<float> inv_std(h);
  ClassifierTrainResult res;
  res.loss.reserve(o.steps);
  for (int step = 1; step <= o.steps; ++step) {
    for (int r = 0; r < bsz; ++r) {
      if (next == n) {
        std::shuffle(order.begin(), order.end(), rng);
        next = 0;
      }
      const int64_t e = order[next++];
      std::copy(queries + e * d, queries + (e + 1) * d, xb.begin() + static_cast<size_t>(r) * d);
      std::copy(targets + e * nc, targets + (e + 1) * nc, tb.begin() + static_cast<size_t>(r) * nc);
    }
    // Forward.
    ParallelSgemm(bsz, h, d, xb.data(), d, w1.w.data(), h, false, z.data(), h);
    for (int r = 0; r < bsz; ++r) {
      for (int j = 0; j < h; ++j) z[static_cast<size_t>(r) * h + j] += b1.w[j];
    }
    if (o.batch_norm) {
      for (int j = 0; j < h; ++j) {
        double mean = 0, var = 0;
        for (int r = 0; r < bsz; ++r) mean += z[static_cast<size_t>(r) * h + j];
        mean /= bsz;
        for (int r = 0; r < bsz; ++r) {
          const double dz = z[static_cast<size_t>(r) * h + j] - mean;
          var += dz * dz;
        }
        var /= bsz;
        inv_std[j] = static_cast<float>(1.0 / std::sqrt(var + o.bn_epsilon));
        for (int r = 0; r < bsz; ++r) {
          const size_t i = static_cast<size_t>(r) * h + j;
          zhat[i] = static_cast<float>((z[i] - mean) * inv_std[j]);
          y[i] = gamma.w[j] * zhat[i] + beta.w[j];
        }
        run_mean[j] = (1 - o.bn_momentum) * run_mean[j] + o.bn_momentum * mean;
        run_var[j] =
            (1 - o.bn_momentum) * run_var[j] + o.bn_momentum * var * bsz / std::max(1, bsz - 1);
      }
    } else {
      y = z;
    }
    for (size_t i = 0; i < y.size(); ++i) a[i] = y[i] > 0.f ? y[i] : 0.f;
    ParallelSgemm(bsz, nc, h, a.data(), h, w2.w.data(), nc, false, logits.data(), nc);
    double loss = 0;
    for (int r = 0; r < bsz; ++r) {
      float* l = &logits[static_cast<size_t>(r) * nc];
      const float* t = &tb[static_cast<size_t>(r) * nc];
      for (int c = 0; c < nc; ++c) l[c] += b2.w[c];
      loss += KlRow(l, t, nc, p.data());
      double tsum = 0;
      for (int c = 0; c < nc; ++c) tsum += t[c];
      float* g = &dlog[static_cast<size_t>(r) * nc];
      for (int c = 0; c < nc; ++c) g[c] = static_cast<float>((p[c] * tsum - t[c]) / bsz);
    }
    res.loss.push_back(loss / bsz);
    // Backward.
    Transpose(a.data(), h, bsz, h, at.data(), bsz);
    ParallelSgemm(h, nc, bsz, at.data(), bsz, dlog.data(), nc, false, w2.g.data(), nc);
    ColumnSums(dlog, bsz, nc, &b2.g);
    Transpose(w2.w.data(), nc, h, nc, w2t.data(), h);
    ParallelSgemm(bsz, h, nc, dlog.data(), nc, w2t.data(), h, false, da.data(), h);
    for (size_t i = 0; i < da.size(); ++i) da[i] = y[i] > 0.f ? da[i] : 0.f;  // now dy
    if (o.batch_norm) {
      for (int j = 0; j < h; ++j) {
        double dgamma = 0, dbeta = 0;
        for (int r = 0; r < bsz; ++r) {
          const size_t i = static_cast<size_t>(r) * h + j;
          dgamma += double{da[i]} * zhat[i];
          dbeta += da[i];
        }
        gamma.g[j] = static_cast<float>(dgamma);
        beta.g[j] = static_cast<float>(dbeta);
        const double k = double{gamma.w[j]} * inv_std[j] / bsz;
        for (int r = 0; r < bsz; ++r) {
          const size_t i = static_cast<size_t>(r) * h + j;
          da[i] = static_cast<float>(k * (bsz * double{da[i]} - dbeta - zhat[i] * dgamma));
        }
      }
    }
    Transpose(xb.data(), d, bsz, d, xt.data(), bsz);
    ParallelSgemm(d, h, bsz, xt.data(), bsz, da.data(), h, false, w1.g.data(), h);
    ColumnSums(da, bsz, h, &b1.g);
    w1.Step(o, step);
    b1.Step(o, step);
    w2.Step(o, step);
    b2.Step(o, step);
    if (o.batch_norm) {
      gamma.Step(o, step);
      beta.Step(o, step);
    }
  }

  DenseLayerWeights l0, l1;
  l0.in = d;
  l0.out = h;
  l0.relu = true;
  l0.weight = w1.w;
  l0.bias = b1.w;
  if (o.batch_norm) {
    // Eval-mode BN folded: y = gamma (z - mean) / sqrt(var + eps) + beta = z s + (beta - mean s).
    for (int j = 0; j < h; ++j) {
      const double s = gamma.w[j] / std::sqrt(run_var[j] + o.bn_epsilon);
      for (int i = 0; i < d; ++i)
        l0.weight[static_cast<size_t>(i) * h + j] *= static_cast<float>(s);
      l0.bias[j] = static_cast<float>((b1.w[j] - run_mean[j]) * s + beta.w[j]);
    }
  }
  l1.in = h;
  l1.out = nc;
  l1.relu = false;
  l1.weight = w2.w;
  l1.bias = b2.w;
  res.layers = {std::move(l0), std::move(l1)};
  return res;
}

double MeanClassifierKl(const std::vector<DenseLayerWeights>& layers, const float* queries,
                        const float* targets, int64_t n, int dim, int num_buckets) {
  if (n <= 0) return 0;
  std::vector<double> part((n + kEvalChunk - 1) / kEvalChunk, 0.0);
  ForEachLogitChunk(layers, queries, n, dim, num_buckets,
                    [&](int64_t ch, int64_t i0, int m, std::vector<float>& logits) {
                      std::vector<float> p(num_buckets);
                      for (int i = 0; i < m; ++i) {
                        part[ch] += KlRow(&logits[static_cast<size_t>(i) * num_buckets],
                                          targets + (i0 + i) * num_buckets, num_buckets, p.data());
                      }
                    });
  return std::accumulate(part.begin(), part.end(), 0.0) / n;
}

double MeanTopBucketMass(const std::vector<DenseLayerWeights>& layers, const float* queries,
                         const float* targets, int64_t n, int dim, int num_buckets, int top_l) {
  if (n <= 0) return 0;
  top_l = std::max(0, std::min(top_l, num_buckets));
  std::vector<double> part((n + kEvalChunk - 1) / kEvalChunk, 0.0);
  ForEachLogitChunk(layers, queries, n, dim, num_buckets,
                    [&](int64_t ch, int64_t i0, int m, std::vector<float>& logits) {
                      std::vector<int32_t> order(num_buckets);
                      for (int i = 0; i < m; ++i) {
                        const float* l = &logits[static_cast<size_t>(i) * num_buckets];
                        std::iota(order.begin(), order.end(), 0);
                        std::partial_sort(order.begin(), order.begin() + top_l, order.end(),
                                          [&](int32_t a, int32_t b) {
                                            return l[a] != l[b] ? l[a] > l[b] : a < b;
                                          });
                        const float* t = targets + (i0 + i) * num_buckets;
                        for (int k = 0; k < top_l; ++k) part[ch] += t[order[k]];
                      }
                    });
  return std::accumulate(part.begin(), part.end(), 0.0) / n;
}

}  // namespace spattn
