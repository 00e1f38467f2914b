#include "kernels/builders/saap_math.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/builders/tile_math.h"

namespace spattn {

absl::StatusOr<std::vector<double>> RopeInvFreq(const LayerAssets& assets, int head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap: head_dim must be even to undo RoPE, got ", head_dim));
  }
  const int half = head_dim / 2;
  std::vector<double> f(half);
  if (!assets.rope_inv_freq.empty()) {
    if (static_cast<int>(assets.rope_inv_freq.size()) != half) {
      return absl::InvalidArgumentError(absl::StrCat("saap: layer assets rope_inv_freq has ",
                                                     assets.rope_inv_freq.size(),
                                                     " entries, expected head_dim / 2 = ", half));
    }
    for (int i = 0; i < half; ++i) {
      if (!std::isfinite(assets.rope_inv_freq[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("saap: layer assets rope_inv_freq[", i, "] is not finite"));
      }
      f[i] = assets.rope_inv_freq[i];
    }
    return f;
  }
  if (!(assets.rope_theta > 0) || !std::isfinite(assets.rope_theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap: layer assets rope_theta must be > 0, got ", assets.rope_theta));
  }
  for (int i = 0; i < half; ++i) {
    f[i] = std::pow(assets.rope_theta, -2.0 * i / head_dim);
  }
  return f;
}

void RotateRope(float* x, int count, int head_dim, int64_t first_pos,
                const std::vector<double>& inv_freq, bool interleaved, int sign) {
  const int half = head_dim / 2;
  // cos/sin of (first_pos + i) * f = base + step: base once per 64 rows, steps once per call,
  // combined by the angle-addition formulas in double.
  constexpr int kSpan = 64;
  const int steps = std::min(count, kSpan);
  std::vector<double> step_cos(static_cast<size_t>(steps) * half),
      step_sin(static_cast<size_t>(steps) * half);
  for (int k = 0; k < steps; ++k) {
    for (int i = 0; i < half; ++i) {
      const double a = k * inv_freq[i];
      step_cos[static_cast<size_t>(k) * half + i] = std::cos(a);
      step_sin[static_cast<size_t>(k) * half + i] = std::sin(a);
    }
  }
  std::vector<double> base_cos(half), base_sin(half);
  std::vector<float> c(half), s(half);
  for (int r0 = 0; r0 < count; r0 += kSpan) {
    for (int i = 0; i < half; ++i) {
      // fmod keeps the angle small before cos/sin; 2 pi in double is exact enough here.
      const double a = std::fmod(static_cast<double>(first_pos + r0) * inv_freq[i], 2 * M_PI);
      base_cos[i] = std::cos(a);
      base_sin[i] = std::sin(a);
    }
    const int r1 = std::min(count, r0 + kSpan);
    for (int r = r0; r < r1; ++r) {
      const double* sc = &step_cos[static_cast<size_t>(r - r0) * half];
      const double* ss = &step_sin[static_cast<size_t>(r - r0) * half];
      for (int i = 0; i < half; ++i) {
        c[i] = static_cast<float>(base_cos[i] * sc[i] - base_sin[i] * ss[i]);
        s[i] = static_cast<float>(sign * (base_sin[i] * sc[i] + base_cos[i] * ss[i]));
      }
      float* v = x + static_cast<int64_t>(r) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        const float x1 = v[a], x2 = v[b];
        v[a] = x1 * c[i] - x2 * s[i];
        v[b] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

void AssignNearestCentroid(const float* x, int n, int d, const float* centroids_t,
                           int num_centroids, int32_t* out, float* maybe_best) {
  constexpr int kRows = 256;
  std::vector<float> sims(static_cast<size_t>(std::min(n, kRows)) * num_centroids);
  for (int r0 = 0; r0 < n; r0 += kRows) {
    const int m = std::min(kRows, n - r0);
    Sgemm(m, num_centroids, d, x + static_cast<int64_t>(r0) * d, d, centroids_t, num_centroids,
          false, sims.data(), num_centroids);
    for (int i = 0; i < m; ++i) {
      const float* s = &sims[static_cast<size_t>(i) * num_centroids];
      int32_t best = 0;
      float best_v = -INFINITY;
      for (int c = 0; c < num_centroids; ++c) {
        if (s[c] > best_v) {
          best_v = s[c];
          best = c;
        }
      }
      out[r0 + i] = best;
      if (maybe_best) maybe_best[r0 + i] = best_v;
    }
  }
}

absl::Status CheckClassifier(const std::vector<DenseLayerWeights>& layers, int head_dim,
                             int num_centroids, int q_head) {
  auto where = [&](size_t l) {
    return absl::StrCat("saap: query classifier of q head ", q_head, ", layer ", l);
  };
  int prev = head_dim;
  for (size_t l = 0; l < layers.size(); ++l) {
    const DenseLayerWeights& w = layers[l];
    if (w.in != prev) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(l), ": reads ", w.in, " inputs, expected ", prev));
    }
    if (w.out <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where(l), ": out must be > 0, got ", w.out));
    }
    if (w.weight.size() != static_cast<size_t>(w.in) * w.out) {
      return absl::InvalidArgumentError(absl::StrCat(where(l), ": weight has ", w.weight.size(),
                                                     " floats, expected in * out = ", w.in, " * ",
                                                     w.out));
    }
    if (w.bias.size() != static_cast<size_t>(w.out)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(l), ": bias has ", w.bias.size(), " floats, expected ", w.out));
    }
    prev = w.out;
  }
  if (prev != num_centroids) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap: query classifier of q head ", q_head, " outputs ", prev,
                     " logits, expected num_centroids = ", num_centroids));
  }
  return absl::OkStatus();
}

void ClassifierForward(const std::vector<DenseLayerWeights>& layers, const float* x, int m,
                       float* logits, std::vector<float>* scratch) {
  // Ping-pong between two halves of scratch; the last layer writes logits.
  size_t widest = 0;
  for (const DenseLayerWeights& w : layers) widest = std::max(widest, static_cast<size_t>(w.out));
  scratch->resize(2 * widest * m);
  const float* in = x;
  for (size_t l = 0; l < layers.size(); ++l) {
    const DenseLayerWeights& w = layers[l];
    float* dst = l + 1 == layers.size() ? logits : scratch->data() + (l % 2) * widest * m;
    Sgemm(m, w.out, w.in, in, w.in, w.weight.data(), w.out, false, dst, w.out);
    for (int i = 0; i < m; ++i) {
      float* row = dst + static_cast<int64_t>(i) * w.out;
      for (int o = 0; o < w.out; ++o) {
        const float v = row[o] + w.bias[o];
        row[o] = w.relu && v < 0.f ? 0.f : v;
      }
    }
    in = dst;
  }
}

absl::Status CheckSaapAssets(const AttentionProblem& problem, const SaapParams& params,
                             const std::vector<int>& heads, const LayerAssets* assets) {
  if (assets == nullptr) {
    return absl::FailedPreconditionError(
        "saap: no layer assets (k-means centroids and query classifiers) for this layer");
  }
  if (params.top_l > params.num_centroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saap.top_l (", params.top_l, ") exceeds saap.num_centroids (", params.num_centroids, ")"));
  }
  if (assets->num_centroids != params.num_centroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saap.num_centroids (", params.num_centroids,
        ") does not match the layer assets' num_centroids (", assets->num_centroids, ")"));
  }
  if (heads.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<double>> freq = RopeInvFreq(*assets, problem.head_dim);
  if (!freq.ok()) return freq.status();
  const int d = problem.head_dim, nc = params.num_centroids;
  std::vector<bool> kv_seen(problem.num_kv_heads, false);
  for (int h : heads) {
    const int kvh = problem.kv_head_of(h);
    if (!kv_seen[kvh]) {
      kv_seen[kvh] = true;
      if (static_cast<int>(assets->centroids.size()) <= kvh || assets->centroids[kvh].empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("saap: layer assets have no centroids for kv head ", kvh));
      }
      if (assets->centroids[kvh].size() != static_cast<size_t>(nc) * d) {
        return absl::InvalidArgumentError(absl::StrCat(
            "saap: centroids of kv head ", kvh, " have ", assets->centroids[kvh].size(),
            " floats, expected num_centroids * head_dim = ", nc, " * ", d));
      }
    }
    if (static_cast<int>(assets->classifiers.size()) <= h || assets->classifiers[h].empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("saap: layer assets have no query classifier for q head ", h));
    }
    absl::Status s = CheckClassifier(assets->classifiers[h], d, nc, h);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace spattn
