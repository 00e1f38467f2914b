#include "kernels/calibration/saap_calibration.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int kKeyChunk = 2048;  // keys de-roped per task
constexpr int kQueryTile = 32;   // sampled queries scored together
constexpr int kKeyTile = 256;

absl::Status CheckOptions(const AttentionProblem& problem, const SaapCalibrationOptions& o) {
  SPATTN_RETURN_IF_ERROR(problem.Validate());
  if (problem.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("saap calibration reads host memory only");
  }
  if (o.sink_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration.sink_tokens must be >= 0, got ", o.sink_tokens));
  }
  if (o.local_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration.local_tokens must be >= 0, got ", o.local_tokens));
  }
  if (o.long_range_distance < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration.long_range_distance must be >= 0, got ", o.long_range_distance));
  }
  if (o.max_queries <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration.max_queries must be > 0, got ", o.max_queries));
  }
  return absl::OkStatus();
}

// De-roped keys [k_len, d] of one (sequence, kv head), rows [first, first + count).
void DeRopedKeys(const AttentionProblem& p, int seq, int kvh, int first, int count,
                 const std::vector<double>& freq, bool interleaved, float* dst) {
  LoadRows(p, p.k, p.cu_seqlens_k[seq], kvh, first, count, dst);
  RotateRope(dst, count, p.head_dim, first, freq, interleaved, -1);
}

struct Sample {
  int seq, row;
};

}  // namespace

absl::StatusOr<ClassifierExamples> CollectClassifierExamples(const AttentionProblem& problem,
                                                             const LayerAssets& assets, int q_head,
                                                             const SaapCalibrationOptions& o) {
  SPATTN_RETURN_IF_ERROR(CheckOptions(problem, o));
  if (q_head < 0 || q_head >= problem.num_q_heads) {
    return absl::InvalidArgumentError(absl::StrCat("q_head ", q_head, " is not a q head"));
  }
  const int d = problem.head_dim, nc = assets.num_centroids;
  const int kvh = problem.kv_head_of(q_head);
  SPATTN_ASSIGN_OR_RETURN(const std::vector<double> freq, RopeInvFreq(assets, d));
  if (nc <= 0 || static_cast<int>(assets.centroids.size()) <= kvh ||
      assets.centroids[kvh].size() != static_cast<size_t>(nc) * d) {
    return absl::FailedPreconditionError(
        absl::StrCat("saap calibration: no [num_centroids, head_dim] centroids for kv head ", kvh));
  }
  std::vector<float> ct(static_cast<size_t>(d) * nc);
  Transpose(assets.centroids[kvh].data(), d, nc, d, ct.data(), nc);

  // Buckets of every key.
  const int nb = problem.batch();
  std::vector<std::vector<int32_t>> bucket_of(nb);
  std::vector<std::pair<int, int>> key_tasks;
  for (int b = 0; b < nb; ++b) {
    bucket_of[b].resize(problem.k_len(b));
    for (int j0 = 0; j0 < problem.k_len(b); j0 += kKeyChunk) key_tasks.emplace_back(b, j0);
  }
  ParallelFor(static_cast<int64_t>(key_tasks.size()), [&](int64_t t) {
    const auto [b, j0] = key_tasks[t];
    const int n = std::min(kKeyChunk, problem.k_len(b) - j0);
    std::vector<float> x(static_cast<size_t>(n) * d);
    DeRopedKeys(problem, b, kvh, j0, n, freq, assets.rope_interleaved, x.data());
    AssignNearestCentroid(x.data(), n, d, ct.data(), nc, bucket_of[b].data() + j0, nullptr);
  });

  // Queries that have keys outside the sink and their local window.
  std::vector<Sample> cand;
  for (int b = 0; b < nb; ++b) {
    const int kl = problem.k_len(b);
    for (int i = 0; i < problem.q_len(b); ++i) {
      const int64_t pos = problem.query_pos(b, i);
      const bool before = pos - o.local_tokens >= o.sink_tokens;
      const bool after =
          !problem.causal && std::max<int64_t>(pos + o.local_tokens, o.sink_tokens) <= kl - 1;
      if (before || after) cand.push_back({b, i});
    }
  }
  std::mt19937_64 rng(o.seed + 0x9e3779b97f4a7c15ull * (q_head + 1));
  if (static_cast<int64_t>(cand.size()) > o.max_queries) {
    for (int i = 0; i < o.max_queries; ++i) {
      std::uniform_int_distribution<size_t> pick(i, cand.size() - 1);
      std::swap(cand[i], cand[pick(rng)]);
    }
    cand.resize(o.max_queries);
    std::sort(cand.begin(), cand.end(), [](const Sample& a, const Sample& b) {
      return a.seq != b.seq ? a.seq < b.seq : a.row < b.row;
    });
  }
  // Tiles of queries of one sequence.
  std::vector<std::pair<size_t, size_t>> tiles;
  for (size_t i = 0; i < cand.size();) {
    size_t j = i + 1;
    while (j < cand.size() && j - i < kQueryTile && cand[j].seq == cand[i].seq) ++j;
    tiles.emplace_back(i, j);
    i = j;
  }
  std::vector<float> queries(cand.size() * d), targets(cand.size() * nc, 0.f);
  std::vector<uint8_t> usable(cand.size(), 0), long_range(cand.size(), 0);
  ParallelFor(static_cast<int64_t>(tiles.size()), [&](int64_t t) {
    const auto [i0, i1] = tiles[t];
    const int m = static_cast<int>(i1 - i0);
    const int seq = cand[i0].seq, kl = problem.k_len(seq);
    std::vector<float> q(static_cast<size_t>(m) * d), kt(static_cast<size_t>(d) * kKeyTile),
        scratch;
    for (int r = 0; r < m; ++r) {
      LoadRows(problem, problem.q, problem.cu_seqlens_q[seq], q_head, cand[i0 + r].row, 1,
               &q[static_cast<size_t>(r) * d]);
    }
    const int n_keys = problem.causal ? problem.query_pos(seq, cand[i1 - 1].row) + 1 : kl;
    std::vector<float> sc(static_cast<size_t>(m) * n_keys);
    std::vector<float> qs(q);
    for (float& v : qs) v *= problem.softmax_scale;
    for (int j0 = 0; j0 < n_keys; j0 += kKeyTile) {
      const int n = std::min(kKeyTile, n_keys - j0);
      LoadRowsTransposed(problem, problem.k, problem.cu_seqlens_k[seq], kvh, j0, n, kt.data(), n,
                         &scratch);
      Sgemm(m, n, d, qs.data(), d, kt.data(), n, false, sc.data() + j0, n_keys);
    }
    for (int r = 0; r < m; ++r) {
      const size_t e = i0 + r;
      const int64_t pos = problem.query_pos(seq, cand[e].row);
      const int limit = problem.causal ? static_cast<int>(pos) + 1 : kl;
      const float* s = &sc[static_cast<size_t>(r) * n_keys];
      // Long-range test: the best key after the sink.
      int arg = -1;
      float best = -INFINITY;
      for (int j = o.sink_tokens; j < limit; ++j) {
        if (s[j] > best) {
          best = s[j];
          arg = j;
        }
      }
      if (arg >= 0) long_range[e] = std::llabs(pos - arg) >= o.long_range_distance;
      // Target: softmax over the far keys, summed per bucket.
      float mx = -INFINITY;
      auto far = [&](int j) { return std::llabs(pos - j) >= o.local_tokens; };
      for (int j = o.sink_tokens; j < limit; ++j) {
        if (far(j) && s[j] > mx) mx = s[j];
      }
      if (!std::isfinite(mx)) continue;
      float* tgt = &targets[e * nc];
      double total = 0;
      std::vector<double> mass(nc, 0.0);
      for (int j = o.sink_tokens; j < limit; ++j) {
        if (!far(j)) continue;
        const double w = std::exp(double{s[j]} - mx);
        mass[bucket_of[seq][j]] += w;
        total += w;
      }
      for (int c = 0; c < nc; ++c) tgt[c] = static_cast<float>(mass[c] / total);
      float* qd = &queries[e * d];
      std::copy(q.begin() + static_cast<size_t>(r) * d, q.begin() + static_cast<size_t>(r + 1) * d,
                qd);
      RotateRope(qd, 1, d, pos, freq, assets.rope_interleaved, -1);
      usable[e] = 1;
    }
  });

  int64_t n_usable = 0, n_long = 0;
  for (size_t e = 0; e < cand.size(); ++e) {
    n_usable += usable[e];
    n_long += usable[e] && long_range[e];
  }
  ClassifierExamples ex;
  ex.long_range_filter_used =
      o.long_range_distance > 0 && n_long >= std::min<int64_t>(o.classifier.batch_size, n_usable);
  for (size_t e = 0; e < cand.size(); ++e) {
    if (!usable[e] || (ex.long_range_filter_used && !long_range[e])) continue;
    ex.queries.insert(ex.queries.end(), queries.begin() + e * d, queries.begin() + (e + 1) * d);
    ex.targets.insert(ex.targets.end(), targets.begin() + e * nc, targets.begin() + (e + 1) * nc);
    ++ex.count;
  }
  if (ex.count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saap calibration: no query of q head ", q_head,
        " has keys beyond sink_tokens and local_tokens (sequences too short for the dense part)"));
  }
  return ex;
}

absl::Status CalibrateSaap(const AttentionProblem& problem, const SaapCalibrationOptions& o,
                           LayerAssets* assets, SaapCalibrationReport* maybe_report) {
  SPATTN_RETURN_IF_ERROR(CheckOptions(problem, o));
  if (assets == nullptr) return absl::InvalidArgumentError("saap calibration: assets is null");
  const int d = problem.head_dim, nkv = problem.num_kv_heads, nb = problem.batch();
  SPATTN_ASSIGN_OR_RETURN(const std::vector<double> freq, RopeInvFreq(*assets, d));
  if (maybe_report) {
    maybe_report->kmeans_objective.assign(nkv, {});
    maybe_report->classifier_loss.assign(problem.num_q_heads, {});
    maybe_report->training_queries.assign(problem.num_q_heads, 0);
  }
  assets->num_centroids = o.kmeans.num_centroids;
  assets->centroids.assign(nkv, {});
  assets->classifiers.assign(problem.num_q_heads, {});
  for (int kvh = 0; kvh < nkv; ++kvh) {
    // De-roped keys of every sequence, sink excluded.
    std::vector<std::pair<int, int>> tasks;  // (seq, first key)
    std::vector<int64_t> dst_row;
    int64_t rows = 0;
    for (int b = 0; b < nb; ++b) {
      for (int j0 = std::min(o.sink_tokens, problem.k_len(b)); j0 < problem.k_len(b);
           j0 += kKeyChunk) {
        tasks.emplace_back(b, j0);
        dst_row.push_back(rows);
        rows += std::min(kKeyChunk, problem.k_len(b) - j0);
      }
    }
    std::vector<float> keys(static_cast<size_t>(rows) * d);
    ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
      const auto [b, j0] = tasks[t];
      const int n = std::min(kKeyChunk, problem.k_len(b) - j0);
      DeRopedKeys(problem, b, kvh, j0, n, freq, assets->rope_interleaved,
                  keys.data() + dst_row[t] * d);
    });
    if (rows < o.kmeans.num_centroids) {
      return absl::InvalidArgumentError(absl::StrCat(
          "saap calibration: kv head ", kvh, " has ", rows, " keys after the sink, fewer than ",
          "kmeans.num_centroids (", o.kmeans.num_centroids, ")"));
    }
    SPATTN_ASSIGN_OR_RETURN(SphericalKMeansResult km,
                            SphericalKMeans(keys.data(), rows, d, o.kmeans));
    assets->centroids[kvh] = std::move(km.centroids);
    if (maybe_report) maybe_report->kmeans_objective[kvh] = std::move(km.objective);
  }
  for (int h = 0; h < problem.num_q_heads; ++h) {
    SPATTN_ASSIGN_OR_RETURN(ClassifierExamples ex,
                            CollectClassifierExamples(problem, *assets, h, o));
    ClassifierTrainOptions co = o.classifier;
    co.seed = o.classifier.seed + h;
    SPATTN_ASSIGN_OR_RETURN(ClassifierTrainResult tr,
                            TrainQueryClassifier(ex.queries.data(), ex.targets.data(), ex.count, d,
                                                 o.kmeans.num_centroids, co));
    assets->classifiers[h] = std::move(tr.layers);
    if (maybe_report) {
      maybe_report->classifier_loss[h] = std::move(tr.loss);
      maybe_report->training_queries[h] = ex.count;
    }
  }
  return absl::OkStatus();
}

}  // namespace spattn
