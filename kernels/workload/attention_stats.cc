#include "kernels/workload/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"
#include "kernels/fidelity.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

absl::Status CheckHost(const AttentionProblem& p, const char* what) {
  absl::Status s = p.Validate();
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  if (p.space != MemorySpace::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs host tensors"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> HeadList(const AttentionProblem& p, std::vector<int> heads) {
  if (heads.empty()) {
    for (int h = 0; h < p.num_q_heads; ++h) heads.push_back(h);
  }
  for (int h : heads) {
    if (h < 0 || h >= p.num_q_heads) {
      return absl::InvalidArgumentError(absl::StrCat("heads: ", h, " is not a q head"));
    }
  }
  return heads;
}

// K of one kv head as fp32, [total_k, head_dim].
std::vector<float> LoadKeys(const AttentionProblem& p, int kv) {
  const int d = p.head_dim;
  const int es = DTypeSize(p.dtype);
  std::vector<float> out(static_cast<size_t>(p.total_k()) * d);
  const auto* base = static_cast<const uint8_t*>(p.k.data);
  ParallelFor((p.total_k() + 1023) / 1024, [&](int64_t c) {
    const int lo = static_cast<int>(c) * 1024, hi = std::min(p.total_k(), lo + 1024);
    for (int t = lo; t < hi; ++t) {
      ToFloat(base + (t * p.k.token_stride + int64_t{kv} * p.k.head_stride) * es, p.dtype, d,
              out.data() + static_cast<size_t>(t) * d);
    }
  });
  return out;
}

int AllowedKeys(const AttentionProblem& p, int seq, int row) {
  return p.causal ? p.query_pos(seq, row) + 1 : p.k_len(seq);
}

// Exact probabilities of query row `row` of sequence `seq`, head `head`, over keys
// [0, AllowedKeys) of the sequence; `keys` from LoadKeys of the head's kv head.
void RowProbs(const AttentionProblem& p, const std::vector<float>& keys, int head, int seq, int row,
              std::vector<float>* probs) {
  const int d = p.head_dim;
  float q[256];
  const auto* qb = static_cast<const uint8_t*>(p.q.data);
  const int64_t qtok = p.cu_seqlens_q[seq] + row;
  ToFloat(qb + (qtok * p.q.token_stride + int64_t{head} * p.q.head_stride) * DTypeSize(p.dtype),
          p.dtype, d, q);
  const int n = AllowedKeys(p, seq, row);
  probs->resize(n);
  const float* kb = keys.data() + static_cast<size_t>(p.cu_seqlens_k[seq]) * d;
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float* k = kb + static_cast<size_t>(j) * d;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int c = 0; c < d; c += 8) {
      for (int u = 0; u < 8; ++u) acc[u] += q[c + u] * k[c + u];
    }
    const float s = p.softmax_scale * (((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                                       ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    (*probs)[j] = s;
    mx = std::max(mx, s);
  }
  double sum = 0;
  for (int j = 0; j < n; ++j) {
    const double e = std::exp(static_cast<double>((*probs)[j]) - mx);
    (*probs)[j] = static_cast<float>(e);
    sum += e;
  }
  const double inv = sum > 0 ? 1.0 / sum : 0.0;
  for (int j = 0; j < n; ++j) (*probs)[j] = static_cast<float>((*probs)[j] * inv);
}

// The fewest entries of `v[0, n)` whose sum reaches `target` times the total (largest first).
// Returns their count; with `selected`, also their indices (unordered). O(n) plus a sort of one
// narrow bin of values.
int64_t SmallestSetReaching(const float* v, int n, double target, std::vector<int>* selected) {
  constexpr int kBins = 1024;  // log2 bins of width 1/8: [2^-(b+1)/8, 2^-b/8)
  double total = 0;
  for (int j = 0; j < n; ++j) total += v[j];
  if (selected) selected->clear();
  if (n == 0 || total <= 0) return 0;
  const double need = target * total;
  std::vector<double> mass(kBins, 0.0);
  std::vector<int> bin(n);
  for (int j = 0; j < n; ++j) {
    int b = kBins - 1;
    if (v[j] > 0) {
      b = static_cast<int>(-std::log2(static_cast<double>(v[j]) / total) * 8.0);
      b = std::min(std::max(b, 0), kBins - 1);
    }
    bin[j] = b;
    mass[b] += v[j];
  }
  double cum = 0;
  int last = 0;
  for (; last < kBins - 1 && cum + mass[last] < need; ++last) cum += mass[last];
  int64_t count = 0;
  std::vector<std::pair<float, int>> edge;
  for (int j = 0; j < n; ++j) {
    if (bin[j] < last) {
      ++count;
      if (selected) selected->push_back(j);
    } else if (bin[j] == last) {
      edge.push_back({v[j], j});
    }
  }
  std::sort(edge.begin(), edge.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& e : edge) {
    if (cum >= need * (1 - 1e-9)) break;
    cum += e.first;
    ++count;
    if (selected) selected->push_back(e.second);
  }
  return count;
}

uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

absl::StatusOr<std::vector<HeadTopKRecall>> TopKRecall(const AttentionProblem& a,
                                                       const AttentionProblem& b,
                                                       const TopKRecallOptions& options) {
  absl::Status s = CheckHost(a, "a");
  if (s.ok()) s = CheckHost(b, "b");
  if (!s.ok()) return s;
  if (a.cu_seqlens_q != b.cu_seqlens_q || a.cu_seqlens_k != b.cu_seqlens_k ||
      a.num_q_heads != b.num_q_heads || a.num_kv_heads != b.num_kv_heads ||
      a.head_dim != b.head_dim || a.causal != b.causal) {
    return absl::InvalidArgumentError("b: must have a's sequences, heads and head_dim");
  }
  if (options.top_k <= 0) return absl::InvalidArgumentError("top_k must be > 0");
  auto heads = HeadList(a, options.heads);
  if (!heads.ok()) return heads.status();
  const std::vector<SampledRow> rows = SampleQueryRows(a, options.sample_rows, options.seed);
  std::vector<HeadTopKRecall> out;
  int loaded = -1;
  std::vector<float> ka, kb;
  std::vector<int> order(heads->size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return a.kv_head_of((*heads)[x]) < a.kv_head_of((*heads)[y]);
  });
  out.resize(heads->size());
  for (int hi : order) {
    const int h = (*heads)[hi];
    if (a.kv_head_of(h) != loaded) {
      loaded = a.kv_head_of(h);
      ka = LoadKeys(a, loaded);
      kb = LoadKeys(b, loaded);
    }
    std::vector<double> same(rows.size()), cross(rows.size());
    ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
      thread_local std::vector<float> pa, pb;
      thread_local std::vector<int> idx;
      RowProbs(a, ka, h, rows[i].seq, rows[i].row, &pa);
      RowProbs(b, kb, h, rows[i].seq, rows[i].row, &pb);
      const int n = static_cast<int>(pa.size());
      if (n <= options.top_k) {
        same[i] = cross[i] = 1.0;
        return;
      }
      idx.resize(n);
      std::iota(idx.begin(), idx.end(), 0);
      std::nth_element(idx.begin(), idx.begin() + options.top_k, idx.end(),
                       [&](int x, int y) { return pa[x] > pa[y]; });
      double sa = 0, sb = 0;
      for (int t = 0; t < options.top_k; ++t) {
        sa += pa[idx[t]];
        sb += pb[idx[t]];
      }
      same[i] = sa;
      cross[i] = sb;
    });
    HeadTopKRecall r;
    r.head = h;
    for (size_t i = 0; i < rows.size(); ++i) {
      r.same += same[i] / rows.size();
      r.cross += cross[i] / rows.size();
    }
    out[hi] = r;
  }
  return out;
}

absl::StatusOr<std::vector<HeadOracle>> OracleDensities(const AttentionProblem& p,
                                                        const OracleOptions& options) {
  absl::Status s = CheckHost(p, "problem");
  if (!s.ok()) return s;
  if (!(options.target > 0 && options.target <= 1)) {
    return absl::InvalidArgumentError("target must be in (0, 1]");
  }
  if (options.block <= 0 || options.sample_blocks <= 0) {
    return absl::InvalidArgumentError("block and sample_blocks must be > 0");
  }
  auto heads = HeadList(p, options.heads);
  if (!heads.ok()) return heads.status();
  // Every (sequence, query block), then a stratified sample of them.
  struct QBlock {
    int seq, row0, rows;
  };
  std::vector<QBlock> all;
  for (int b = 0; b < p.batch(); ++b) {
    for (int r = 0; r < p.q_len(b); r += options.block) {
      all.push_back({b, r, std::min(options.block, p.q_len(b) - r)});
    }
  }
  std::vector<QBlock> blocks;
  if (static_cast<int>(all.size()) <= options.sample_blocks) {
    blocks = all;
  } else {
    uint64_t st = options.seed ^ 0x0a5c1e5ull;
    for (int i = 0; i < options.sample_blocks; ++i) {
      const int64_t lo = static_cast<int64_t>(all.size()) * i / options.sample_blocks;
      const int64_t hi = static_cast<int64_t>(all.size()) * (i + 1) / options.sample_blocks;
      blocks.push_back(
          all[lo + static_cast<int64_t>(SplitMix(&st) % static_cast<uint64_t>(hi - lo))]);
    }
  }
  const int B = options.block;
  std::vector<HeadOracle> out(heads->size());
  int loaded = -1;
  std::vector<float> keys;
  for (size_t hi = 0; hi < heads->size(); ++hi) {
    const int h = (*heads)[hi];
    if (p.kv_head_of(h) != loaded) {
      loaded = p.kv_head_of(h);
      keys = LoadKeys(p, loaded);
    }
    double allowed = 0, row_pairs = 0, col_pairs = 0, tile_pairs = 0;
    for (const QBlock& qb : blocks) {
      const int n = AllowedKeys(p, qb.seq, qb.row0 + qb.rows - 1);  // widest row of the block
      std::vector<std::vector<float>> probs(qb.rows);
      std::vector<int64_t> row_count(qb.rows);
      ParallelFor(qb.rows, [&](int64_t r) {
        RowProbs(p, keys, h, qb.seq, qb.row0 + static_cast<int>(r), &probs[r]);
        row_count[r] = SmallestSetReaching(probs[r].data(), static_cast<int>(probs[r].size()),
                                           options.target, nullptr);
      });
      std::vector<float> col(n, 0.f);
      std::vector<int> limit(qb.rows);
      for (int r = 0; r < qb.rows; ++r) {
        limit[r] = static_cast<int>(probs[r].size());
        allowed += limit[r];
        row_pairs += static_cast<double>(row_count[r]);
        for (int j = 0; j < limit[r]; ++j) col[j] += probs[r][j] / qb.rows;
      }
      // Rows of the block that may see key j (limits grow with the row).
      auto rows_seeing = [&](int j) {
        return static_cast<int>(limit.end() - std::upper_bound(limit.begin(), limit.end(), j));
      };
      std::vector<int> sel;
      SmallestSetReaching(col.data(), n, options.target, &sel);
      for (int j : sel) col_pairs += rows_seeing(j);
      const int tiles = (n + B - 1) / B;
      std::vector<float> tile(tiles, 0.f);
      for (int j = 0; j < n; ++j) tile[j / B] += col[j];
      SmallestSetReaching(tile.data(), tiles, options.target, &sel);
      for (int t : sel) {
        for (int j = t * B; j < std::min(n, (t + 1) * B); ++j) tile_pairs += rows_seeing(j);
      }
    }
    HeadOracle o;
    o.head = h;
    if (allowed > 0) {
      o.row = row_pairs / allowed;
      o.column = col_pairs / allowed;
      o.block = tile_pairs / allowed;
    }
    out[hi] = o;
  }
  return out;
}

}  // namespace spattn
