#include "kernels/sparse_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace spattn {

SparseIndexView SparseIndex::view() const {
  SparseIndexView v;
  v.block_m = block_m;
  v.num_heads = num_heads();
  v.num_blocks = num_blocks();
  v.heads = heads.data();
  v.block_offsets = block_offsets.data();
  v.range_indptr = range_indptr.data();
  v.range_start = range_start.data();
  v.range_len = range_len.data();
  v.col_indptr = col_indptr.data();
  v.col_idx = col_idx.data();
  return v;
}

void RowKeys::AddRange(int64_t start, int64_t end) {
  if (start < 0) start = 0;
  if (end <= start) return;
  ranges.emplace_back(static_cast<int32_t>(start), static_cast<int32_t>(end));
}

void RowKeys::Normalize(int64_t key_end, int min_run) {
  // Ranges: clip, sort, merge overlapping or touching spans.
  std::vector<std::pair<int32_t, int32_t>> merged;
  for (auto [s, e] : ranges) {
    if (e > key_end) e = static_cast<int32_t>(key_end);
    if (s < 0) s = 0;
    if (e > s) merged.emplace_back(s, e);
  }
  std::sort(merged.begin(), merged.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const auto& r : merged) {
    if (!out.empty() && r.first <= out.back().second) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  // Columns: clip, sort, dedup, drop those inside a range.
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  std::vector<int32_t> kept;
  kept.reserve(cols.size());
  size_t ri = 0;
  for (int32_t c : cols) {
    if (c < 0 || c >= key_end) continue;
    while (ri < out.size() && out[ri].second <= c) ++ri;
    if (ri < out.size() && out[ri].first <= c) continue;
    kept.push_back(c);
  }
  // Long runs of consecutive columns become ranges.
  std::vector<int32_t> final_cols;
  bool added_ranges = false;
  for (size_t i = 0; i < kept.size();) {
    size_t j = i + 1;
    while (j < kept.size() && kept[j] == kept[j - 1] + 1) ++j;
    if (static_cast<int>(j - i) >= min_run) {
      out.emplace_back(kept[i], kept[j - 1] + 1);
      added_ranges = true;
    } else {
      final_cols.insert(final_cols.end(), kept.begin() + i, kept.begin() + j);
    }
    i = j;
  }
  if (added_ranges) {
    std::sort(out.begin(), out.end());
    std::vector<std::pair<int32_t, int32_t>> remerged;
    for (const auto& r : out) {
      if (!remerged.empty() && r.first <= remerged.back().second) {
        remerged.back().second = std::max(remerged.back().second, r.second);
      } else {
        remerged.push_back(r);
      }
    }
    out.swap(remerged);
  }
  ranges.swap(out);
  cols.swap(final_cols);
}

void InitSparseIndex(const AttentionProblem& problem, const std::vector<int>& heads, int block_m,
                     SparseIndex* index) {
  index->block_m = block_m;
  index->heads.assign(heads.begin(), heads.end());
  index->block_offsets.assign(problem.batch() + 1, 0);
  for (int b = 0; b < problem.batch(); ++b) {
    const int blocks = (problem.q_len(b) + block_m - 1) / block_m;
    index->block_offsets[b + 1] = index->block_offsets[b] + blocks;
  }
  index->range_indptr.clear();
  index->range_start.clear();
  index->range_len.clear();
  index->col_indptr.clear();
  index->col_idx.clear();
}

BlockGeometry GetBlockGeometry(const AttentionProblem& problem, const SparseIndex& index,
                               int block) {
  const auto& off = index.block_offsets;
  const int seq =
      static_cast<int>(std::upper_bound(off.begin(), off.end(), block) - off.begin()) - 1;
  BlockGeometry g;
  g.seq = seq;
  g.q_begin = (block - off[seq]) * index.block_m;
  g.q_end = std::min(g.q_begin + index.block_m, problem.q_len(seq));
  g.first_pos = problem.query_pos(seq, g.q_begin);
  g.last_pos = problem.query_pos(seq, g.q_end - 1);
  g.key_end = problem.causal ? g.last_pos + 1 : problem.k_len(seq);
  return g;
}

void CompactRows(std::vector<RowKeys>* rows, SparseIndex* index) {
  const size_t n = rows->size();
  index->range_indptr.assign(n + 1, 0);
  index->col_indptr.assign(n + 1, 0);
  for (size_t r = 0; r < n; ++r) {
    index->range_indptr[r + 1] =
        index->range_indptr[r] + static_cast<int32_t>((*rows)[r].ranges.size());
    index->col_indptr[r + 1] = index->col_indptr[r] + static_cast<int32_t>((*rows)[r].cols.size());
  }
  index->range_start.resize(index->range_indptr[n]);
  index->range_len.resize(index->range_indptr[n]);
  index->col_idx.resize(index->col_indptr[n]);
  for (size_t r = 0; r < n; ++r) {
    RowKeys& row = (*rows)[r];
    int32_t o = index->range_indptr[r];
    for (const auto& [s, e] : row.ranges) {
      index->range_start[o] = s;
      index->range_len[o] = e - s;
      ++o;
    }
    std::copy(row.cols.begin(), row.cols.end(), index->col_idx.begin() + index->col_indptr[r]);
    row = RowKeys();  // Release memory as we go.
  }
}

namespace {

// The index-wide invariants: block_m, block offsets, heads, indptr sizes and ends.
absl::Status ValidateIndexShape(const AttentionProblem& problem, const SparseIndex& index) {
  if (index.block_m <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("index.block_m must be > 0, got ", index.block_m));
  }
  if (static_cast<int>(index.block_offsets.size()) != problem.batch() + 1) {
    return absl::InvalidArgumentError("index.block_offsets: size does not match the batch");
  }
  for (int b = 0; b < problem.batch(); ++b) {
    const int want = (problem.q_len(b) + index.block_m - 1) / index.block_m;
    if (index.block_offsets[b + 1] - index.block_offsets[b] != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("index.block_offsets: sequence ", b, " should have ", want, " blocks"));
    }
  }
  for (int s = 0; s < index.num_heads(); ++s) {
    if (index.heads[s] < 0 || index.heads[s] >= problem.num_q_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("index.heads[", s, "] = ", index.heads[s], " is not a q head"));
    }
  }
  const int64_t rows = index.num_rows();
  if (static_cast<int64_t>(index.range_indptr.size()) != rows + 1 ||
      static_cast<int64_t>(index.col_indptr.size()) != rows + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("index: indptr arrays need ", rows + 1, " entries"));
  }
  if (index.range_indptr[0] != 0 || index.col_indptr[0] != 0 ||
      index.range_indptr[rows] != static_cast<int32_t>(index.range_start.size()) ||
      index.range_start.size() != index.range_len.size() ||
      index.col_indptr[rows] != static_cast<int32_t>(index.col_idx.size())) {
    return absl::InvalidArgumentError("index: indptr ends do not match the entry arrays");
  }
  return absl::OkStatus();
}

// The per-row invariants of head slot s (the caller checked the shape).
absl::Status ValidateSlotRows(const AttentionProblem& problem, const SparseIndex& index, int s) {
  for (int b = 0; b < index.num_blocks(); ++b) {
    const int64_t r = index.row(s, b);
    const BlockGeometry g = GetBlockGeometry(problem, index, b);
    auto where = [&] { return absl::StrCat("index: head slot ", s, ", block ", b); };
    if (index.range_indptr[r + 1] < index.range_indptr[r] ||
        index.col_indptr[r + 1] < index.col_indptr[r]) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": indptr decreases"));
    }
    int64_t prev_end = -1;
    for (int32_t i = index.range_indptr[r]; i < index.range_indptr[r + 1]; ++i) {
      const int64_t st = index.range_start[i], len = index.range_len[i];
      if (len <= 0 || st < 0 || st + len > g.key_end) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": range [", st, ", ", st + len,
                                                       ") outside [0, ", g.key_end, ")"));
      }
      if (st <= prev_end) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": ranges unsorted, overlapping or adjacent at ", st));
      }
      prev_end = st + len;
    }
    int64_t prev = -1;
    int32_t ri = index.range_indptr[r];
    for (int32_t i = index.col_indptr[r]; i < index.col_indptr[r + 1]; ++i) {
      const int64_t c = index.col_idx[i];
      if (c < 0 || c >= g.key_end) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": column ", c, " outside [0, ", g.key_end, ")"));
      }
      if (c <= prev) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": columns unsorted or repeated at ", c));
      }
      prev = c;
      while (ri < index.range_indptr[r + 1] && index.range_start[ri] + index.range_len[ri] <= c) {
        ++ri;
      }
      if (ri < index.range_indptr[r + 1] && index.range_start[ri] <= c) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": column ", c, " lies inside a range"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSparseIndex(const AttentionProblem& problem, const SparseIndex& index) {
  absl::Status st = ValidateIndexShape(problem, index);
  for (int s = 0; st.ok() && s < index.num_heads(); ++s) st = ValidateSlotRows(problem, index, s);
  return st;
}

absl::Status ValidateSparseIndexSlot(const AttentionProblem& problem, const SparseIndex& index,
                                     int slot) {
  absl::Status st = ValidateIndexShape(problem, index);
  if (!st.ok()) return st;
  if (slot < 0 || slot >= index.num_heads()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot: ", slot, " is not a head slot of the index (", index.num_heads(), " slots)"));
  }
  return ValidateSlotRows(problem, index, slot);
}

int64_t ComputedPairs(const AttentionProblem& problem, const SparseIndex& index, int slot) {
  int64_t total = 0;
  for (int b = 0; b < index.num_blocks(); ++b) {
    const int64_t r = index.row(slot, b);
    const BlockGeometry g = GetBlockGeometry(problem, index, b);
    const int rows = g.q_end - g.q_begin;
    // Keys visible to the row at position p: those <= p when causal, all otherwise.
    auto visible_count = [&](int64_t key) -> int64_t {
      if (!problem.causal) return rows;
      // Rows with first_pos + i >= key.
      const int64_t first_row = std::max<int64_t>(0, key - g.first_pos);
      return std::max<int64_t>(0, rows - first_row);
    };
    for (int32_t i = index.range_indptr[r]; i < index.range_indptr[r + 1]; ++i) {
      const int64_t st = index.range_start[i], en = st + index.range_len[i];
      // Keys up to first_pos are visible to every row; key first_pos + j (j >= 1) to rows - j
      // of them: an arithmetic series, so every range costs O(1).
      const int64_t full_end =
          problem.causal ? std::min<int64_t>(en, int64_t{g.first_pos} + 1) : en;
      if (full_end > st) total += (full_end - st) * static_cast<int64_t>(rows);
      const int64_t j0 = std::max(st, full_end) - g.first_pos;
      const int64_t j1 = std::min<int64_t>(en - g.first_pos, rows);  // j >= rows: seen by none.
      if (problem.causal && j1 > j0) total += (j1 - j0) * rows - (j0 + j1 - 1) * (j1 - j0) / 2;
    }
    for (int32_t i = index.col_indptr[r]; i < index.col_indptr[r + 1]; ++i) {
      total += visible_count(index.col_idx[i]);
    }
  }
  return total;
}

std::vector<uint8_t> DensifyMask(const AttentionProblem& problem, const SparseIndex& index,
                                 int slot, int seq) {
  const int ql = problem.q_len(seq), kl = problem.k_len(seq);
  std::vector<uint8_t> mask(static_cast<size_t>(ql) * kl, 0);
  for (int b = index.block_offsets[seq]; b < index.block_offsets[seq + 1]; ++b) {
    const int64_t r = index.row(slot, b);
    const BlockGeometry g = GetBlockGeometry(problem, index, b);
    for (int i = g.q_begin; i < g.q_end; ++i) {
      const int pos = problem.query_pos(seq, i);
      const int limit = problem.causal ? pos + 1 : kl;
      uint8_t* m = &mask[static_cast<size_t>(i) * kl];
      for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
        const int st = index.range_start[e];
        const int en = std::min(limit, st + index.range_len[e]);
        for (int key = st; key < en; ++key) m[key] = 1;
      }
      for (int32_t e = index.col_indptr[r]; e < index.col_indptr[r + 1]; ++e) {
        if (index.col_idx[e] < limit) m[index.col_idx[e]] = 1;
      }
    }
  }
  return mask;
}

}  // namespace spattn
