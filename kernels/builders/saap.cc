#include "kernels/builders/saap.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/builders/tile_math.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int kKeyChunk = 2048;  // keys de-roped and assigned per task
constexpr int kQueryRows = 256;  // query rows classified per task (whole blocks)

// CSR bucket lists of one (sequence, kv head): members of bucket c are
// idx[off[c] .. off[c+1]), ascending key positions.
struct Buckets {
  std::vector<int32_t> off;
  std::vector<int32_t> idx;
};

}  // namespace

absl::Status BuildSaapIndex(const AttentionProblem& problem, const SaapParams& params,
                            const std::vector<int>& heads, const LayerAssets* assets, int block_m,
                            SparseIndex* out) {
  SPATTN_RETURN_IF_ERROR(problem.Validate());
  if (block_m <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_m must be > 0, got ", block_m));
  }
  if (params.classify_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap.classify_rows must be > 0, got ", params.classify_rows));
  }
  SPATTN_RETURN_IF_ERROR(CheckSaapAssets(problem, params, heads, assets));
  InitSparseIndex(problem, heads, block_m, out);
  std::vector<RowKeys> rows(out->num_rows());
  if (heads.empty()) {
    CompactRows(&rows, out);
    return absl::OkStatus();
  }
  SPATTN_ASSIGN_OR_RETURN(const std::vector<double> freq, RopeInvFreq(*assets, problem.head_dim));
  const int d = problem.head_dim, nc = params.num_centroids, nb = problem.batch();
  const int nkv = problem.num_kv_heads;
  const bool interleaved = assets->rope_interleaved;

  // Requested q heads (unique) and head slots of every kv head.
  std::vector<std::vector<int>> group_heads(nkv), group_slots(nkv);
  for (int s = 0; s < out->num_heads(); ++s) {
    const int h = out->heads[s], kvh = problem.kv_head_of(h);
    group_slots[kvh].push_back(s);
    auto& gh = group_heads[kvh];
    if (std::find(gh.begin(), gh.end(), h) == gh.end()) gh.push_back(h);
  }
  std::vector<int> kv_used;
  for (int kvh = 0; kvh < nkv; ++kvh) {
    if (!group_slots[kvh].empty()) kv_used.push_back(kvh);
  }
  std::vector<std::vector<float>> centroids_t(nkv);
  for (int kvh : kv_used) {
    centroids_t[kvh].resize(static_cast<size_t>(d) * nc);
    Transpose(assets->centroids[kvh].data(), d, nc, d, centroids_t[kvh].data(), nc);
  }

  // Keys: de-rope and assign, chunk by chunk.
  std::vector<std::vector<int32_t>> bucket_of(static_cast<size_t>(nb) * nkv);
  struct KeyTask {
    int seq, kvh, first, count;
  };
  std::vector<KeyTask> key_tasks;
  for (int b = 0; b < nb; ++b) {
    for (int kvh : kv_used) {
      bucket_of[static_cast<size_t>(b) * nkv + kvh].resize(problem.k_len(b));
      for (int j0 = 0; j0 < problem.k_len(b); j0 += kKeyChunk) {
        key_tasks.push_back({b, kvh, j0, std::min(kKeyChunk, problem.k_len(b) - j0)});
      }
    }
  }
  ParallelFor(static_cast<int64_t>(key_tasks.size()), [&](int64_t t) {
    const KeyTask& task = key_tasks[t];
    std::vector<float> x(static_cast<size_t>(task.count) * d);
    LoadRows(problem, problem.k, problem.cu_seqlens_k[task.seq], task.kvh, task.first, task.count,
             x.data());
    RotateRope(x.data(), task.count, d, task.first, freq, interleaved, -1);
    AssignNearestCentroid(
        x.data(), task.count, d, centroids_t[task.kvh].data(), nc,
        bucket_of[static_cast<size_t>(task.seq) * nkv + task.kvh].data() + task.first, nullptr);
  });
  std::vector<Buckets> buckets(static_cast<size_t>(nb) * nkv);
  ParallelFor(static_cast<int64_t>(nb) * nkv, [&](int64_t u) {
    const std::vector<int32_t>& of = bucket_of[u];
    if (of.empty()) return;
    Buckets& bk = buckets[u];
    bk.off.assign(nc + 1, 0);
    for (int32_t c : of) ++bk.off[c + 1];
    for (int c = 0; c < nc; ++c) bk.off[c + 1] += bk.off[c];
    bk.idx.resize(of.size());
    std::vector<int32_t> fill(bk.off.begin(), bk.off.end() - 1);
    for (int32_t j = 0; j < static_cast<int32_t>(of.size()); ++j) bk.idx[fill[of[j]]++] = j;
  });

  // Queries: classifier distributions summed per (block, kv group), top-l buckets, rows. A task
  // takes consecutive blocks of one sequence, up to kQueryRows classified rows, so the
  // classifier's products are tall enough to run near GEMM speed. With classify_rows below
  // block_m only that many evenly spaced rows of each block are classified (SampledRow), each
  // de-roped at its own position; otherwise every row, de-roped in one call from the first.
  const bool sampled = params.classify_rows < block_m;
  const int rows_per_block = sampled ? params.classify_rows : block_m;
  struct QueryTask {
    int kvh, first_block, blocks;
  };
  std::vector<QueryTask> query_tasks;
  const int per_task = std::max(1, kQueryRows / rows_per_block);
  for (int kvh : kv_used) {
    for (int b = 0; b < nb; ++b) {
      for (int blk = out->block_offsets[b]; blk < out->block_offsets[b + 1]; blk += per_task) {
        query_tasks.push_back({kvh, blk, std::min(per_task, out->block_offsets[b + 1] - blk)});
      }
    }
  }
  ParallelFor(static_cast<int64_t>(query_tasks.size()), [&](int64_t t) {
    const QueryTask& task = query_tasks[t];
    const int kvh = task.kvh;
    const BlockGeometry g0 = GetBlockGeometry(problem, *out, task.first_block);
    const BlockGeometry g1 = GetBlockGeometry(problem, *out, task.first_block + task.blocks - 1);
    // Classified rows of the task: row offset from g0.q_begin, position, block within the task.
    std::vector<int> row_at, block_of;
    std::vector<int64_t> pos_of;
    for (int k = 0; k < task.blocks; ++k) {
      const BlockGeometry g = GetBlockGeometry(problem, *out, task.first_block + k);
      const int n = g.q_end - g.q_begin;
      const int count = sampled ? std::min(rows_per_block, n) : n;
      for (int j = 0; j < count; ++j) {
        const int r = sampled ? SaapSampledRow(j, count, n) : j;
        row_at.push_back(g.q_begin - g0.q_begin + r);
        pos_of.push_back(int64_t{g.first_pos} + r);
        block_of.push_back(k);
      }
    }
    const int m = static_cast<int>(row_at.size());
    const int span = g1.q_end - g0.q_begin;
    std::vector<float> x(static_cast<size_t>(sampled ? m : span) * d),
        logits(static_cast<size_t>(m) * nc), scratch;
    std::vector<double> score(static_cast<size_t>(task.blocks) * nc, 0.0);
    for (int h : group_heads[kvh]) {
      if (sampled) {
        for (int i = 0; i < m; ++i) {
          float* xi = &x[static_cast<size_t>(i) * d];
          LoadRows(problem, problem.q, problem.cu_seqlens_q[g0.seq], h, g0.q_begin + row_at[i], 1,
                   xi);
          RotateRope(xi, 1, d, pos_of[i], freq, interleaved, -1);
        }
      } else {
        LoadRows(problem, problem.q, problem.cu_seqlens_q[g0.seq], h, g0.q_begin, span, x.data());
        RotateRope(x.data(), span, d, g0.first_pos, freq, interleaved, -1);
      }
      ClassifierForward(assets->classifiers[h], x.data(), m, logits.data(), &scratch);
      for (int i = 0; i < m; ++i) {
        float* l = &logits[static_cast<size_t>(i) * nc];
        float mx = -INFINITY;
        for (int c = 0; c < nc; ++c) mx = l[c] > mx ? l[c] : mx;
        if (!std::isfinite(mx)) continue;  // NaN/Inf query: no vote.
        double sum = 0;
        for (int c = 0; c < nc; ++c) {
          l[c] = ExpApprox(l[c] - mx);
          sum += l[c];
        }
        if (!std::isfinite(sum)) continue;
        const double inv = 1.0 / sum;
        double* sc = &score[static_cast<size_t>(block_of[i]) * nc];
        for (int c = 0; c < nc; ++c) sc[c] += l[c] * inv;
      }
    }
    std::vector<int32_t> order(nc);
    for (int k = 0; k < task.blocks; ++k) {
      const int block = task.first_block + k;
      const BlockGeometry g = GetBlockGeometry(problem, *out, block);
      const double* sc = &score[static_cast<size_t>(k) * nc];
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(
          order.begin(), order.begin() + params.top_l, order.end(),
          [&](int32_t a, int32_t b) { return sc[a] != sc[b] ? sc[a] > sc[b] : a < b; });
      RowKeys row;
      row.AddRange(0, params.sink_tokens);
      if (params.local_tokens > 0) {
        row.AddRange(int64_t{g.first_pos} - params.local_tokens + 1, int64_t{g.last_pos} + 1);
      }
      const Buckets& bk = buckets[static_cast<size_t>(g.seq) * nkv + kvh];
      if (!bk.off.empty()) {
        for (int i = 0; i < params.top_l; ++i) {
          const int c = order[i];
          for (int32_t e = bk.off[c]; e < bk.off[c + 1] && bk.idx[e] < g.key_end; ++e) {
            row.AddCol(bk.idx[e]);
          }
        }
      }
      row.Normalize(g.key_end);
      const std::vector<int>& slots = group_slots[kvh];
      for (size_t i = 0; i + 1 < slots.size(); ++i) rows[out->row(slots[i], block)] = row;
      rows[out->row(slots.back(), block)] = std::move(row);
    }
  });
  CompactRows(&rows, out);
  return absl::OkStatus();
}

}  // namespace spattn
