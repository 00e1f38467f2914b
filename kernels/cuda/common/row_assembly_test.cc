// row_assembly.h on the CPU, both input forms against what the CPU builders make of a row:
//  * spans and lines: the one-row merge the vertical_slash / flex_prefill GPU builders run per
//    thread, against AddVerticalSlash (+ flex's kept blocks) followed by RowKeys::Normalize;
//  * key bitmaps: the word logic run the way AssembleKernel (row_assembly.cuh) runs it (segments
//    of words with a halo word on each side, a carried last word), against RowKeys::Normalize on
//    random rows; and LongRuns16 against a brute-force run finder.
#include "kernels/cuda/common/row_assembly.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/builders/estimate.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace {

using row_assembly::FinalBits;
using row_assembly::LongRuns16;
using row_assembly::RangeEvents;
using row_assembly::SpanBits;
using row_assembly::WordMask;

// ---- Spans and lines ---------------------------------------------------------------------------

struct VecSink {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  std::vector<int32_t> cols;
  void Range(int s, int e) { ranges.emplace_back(s, e); }
  void Cols(int a, int b) {
    for (int c = a; c < b; ++c) cols.push_back(c);
  }
};

// The CPU builders' row: kept blocks (flex) added first, then Alg. 4, then Normalize.
RowKeys CpuRow(const BlockGeometry& g, const std::vector<int32_t>& offsets_asc,
               const std::vector<int32_t>& cols, int kept_block) {
  RowKeys row;
  if (kept_block > 0) {
    row.AddRange(0, kept_block);
    row.AddRange(int64_t{g.first_pos} / kept_block * kept_block,
                 (int64_t{g.last_pos} / kept_block + 1) * kept_block);
  }
  std::vector<int32_t> desc(offsets_asc.rbegin(), offsets_asc.rend());
  AddVerticalSlash(g, desc, cols, &row);
  return row;
}

VecSink GpuRow(const BlockGeometry& g, const std::vector<int32_t>& offsets_asc,
               const std::vector<int32_t>& cols, int kept_block, int* counted_ranges,
               int* counted_cols) {
  row_assembly::RowGeo geo{g.first_pos, g.last_pos, g.key_end};
  row_assembly::ExtraRanges extra;
  if (kept_block > 0) extra = row_assembly::KeptBlocks(geo, kept_block);
  // Clusters for this row's block length, runs of consecutive columns.
  std::vector<int32_t> clusters(2 * offsets_asc.size() + 2), runs(2 * cols.size() + 2);
  row_assembly::RowLines lines;
  lines.offsets = offsets_asc.data();
  lines.n_off = static_cast<int>(offsets_asc.size());
  lines.clusters = clusters.data();
  lines.n_clusters = row_assembly::GroupRuns(offsets_asc.data(), lines.n_off,
                                             g.last_pos - g.first_pos + 1, clusters.data());
  lines.col_runs = runs.data();
  lines.n_runs =
      row_assembly::GroupRuns(cols.data(), static_cast<int>(cols.size()), 1, runs.data());
  row_assembly::CountSink count;
  row_assembly::MergeRow(geo, extra, lines, 16, count);
  *counted_ranges = count.ranges;
  *counted_cols = count.cols;
  VecSink sink;
  row_assembly::MergeRow(geo, extra, lines, 16, sink);
  // The row in parts, as MergeRowsKernel's lanes make it: counts, continuations, prefix, fill,
  // ends made lengths; must be the same row for every number of parts, with equal key windows
  // (PartWindow) and windows cut at equal counts of lines (PartCut / PartBound, as the kernel's
  // lanes make them with a warp max-scan).
  const std::pair<int, bool> modes[] = {{1, false}, {2, false}, {3, false}, {7, false},
                                         {32, false}, {2, true},  {7, true},  {32, true}};
  for (const auto& [parts, balanced] : modes) {
    std::vector<int> lo_of(parts), hi_of(parts);
    if (balanced) {
      const row_assembly::RowItems items = row_assembly::CountRowItems(geo, lines);
      int shift = 0;
      int prev_cut = 0;
      for (int l = 0; l < parts; ++l) {
        const int cut = row_assembly::PartCut(geo, lines, items, parts, l);
        EXPECT_GE(cut, prev_cut) << "parts " << parts << " cut " << l;
        prev_cut = cut;
        shift = l == 0 ? cut : std::max(shift, cut - l);
        lo_of[l] = row_assembly::PartBound(geo.key_end, l, shift);
        if (l > 0) hi_of[l - 1] = lo_of[l];
      }
      hi_of[parts - 1] = geo.key_end;
      EXPECT_EQ(lo_of[0], 0);
      for (int l = 0; l < parts; ++l) {  // non-empty windows, then empty ones at key_end
        EXPECT_TRUE(lo_of[l] < hi_of[l] || lo_of[l] == geo.key_end) << "parts " << parts;
      }
    } else {
      for (int l = 0; l < parts; ++l) {
        row_assembly::PartWindow(geo.key_end, parts, l, &lo_of[l], &hi_of[l]);
      }
    }
    std::vector<row_assembly::PartSink> counts(parts);
    for (int l = 0; l < parts; ++l) {
      row_assembly::MergePart(geo, extra, lines, 16, lo_of[l], hi_of[l], counts[l]);
    }
    std::vector<int> base_r(parts + 1, 0), base_c(parts + 1, 0);
    std::vector<bool> cont(parts + 1, false);
    for (int l = 0; l < parts; ++l) {
      cont[l] = l > 0 && row_assembly::ContinuesPrev(counts[l - 1].ranges, counts[l - 1].ends_at_hi,
                                                     counts[l].ranges, counts[l].starts_at_lo);
      base_r[l + 1] = base_r[l] + counts[l].ranges - (cont[l] ? 1 : 0);
      base_c[l + 1] = base_c[l] + counts[l].cols;
    }
    EXPECT_EQ(base_r[parts], count.ranges) << "parts " << parts;
    EXPECT_EQ(base_c[parts], count.cols) << "parts " << parts;
    std::vector<int32_t> starts(base_r[parts], -7), ends(base_r[parts], -7),
        cols(base_c[parts], -7);
    for (int l = 0; l < parts; ++l) {
      row_assembly::PartSink fill;
      fill.range_start = starts.data() + base_r[l];
      fill.range_end = ends.data() + base_r[l];
      fill.col_idx = cols.data() + base_c[l];
      fill.merge_prev = cont[l];
      fill.merge_next = cont[l + 1];
      fill.n_ranges = counts[l].ranges;
      row_assembly::MergePart(geo, extra, lines, 16, lo_of[l], hi_of[l], fill);
    }
    std::vector<std::pair<int32_t, int32_t>> ranges;
    for (size_t i = 0; i < starts.size(); ++i) ranges.emplace_back(starts[i], ends[i] - starts[i]);
    std::vector<std::pair<int32_t, int32_t>> want;
    for (const auto& [s, e] : sink.ranges) want.emplace_back(s, e - s);
    EXPECT_EQ(ranges, want) << "parts " << parts;
    EXPECT_EQ(cols, sink.cols) << "parts " << parts;
  }
  return sink;
}

std::vector<int32_t> SampleSorted(std::mt19937_64& rng, int lo, int hi, int count) {
  std::vector<int32_t> all;
  for (int v = lo; v <= hi; ++v) all.push_back(v);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<size_t>(all.size(), static_cast<size_t>(std::max(count, 0))));
  std::sort(all.begin(), all.end());
  return all;
}

// Random rows: causal and full masks, chunked positions, dense and sparse line sets, runs of
// consecutive columns around the min_run threshold, kept blocks on and off.
TEST(RowAssemblySpansTest, MatchesNormalizeOnRandomRows) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const bool causal = trial % 3 != 0;
    const int kl = 1 + static_cast<int>(rng() % 700);
    const int block = 1 + static_cast<int>(rng() % 130);
    const int last_pos = static_cast<int>(rng() % kl);
    const int first_pos = std::max(0, last_pos - static_cast<int>(rng() % block));
    BlockGeometry g{0, 0, 0, first_pos, last_pos, causal ? last_pos + 1 : kl};
    const int min_offset = causal ? 0 : first_pos - (kl - 1);
    const int max_offset = last_pos;
    const int dense = static_cast<int>(rng() % 4);
    const int n_off = dense == 0 ? static_cast<int>(rng() % 8)
                                 : static_cast<int>(rng() % (max_offset - min_offset + 2));
    std::vector<int32_t> offsets = SampleSorted(rng, min_offset, max_offset, n_off);
    // Columns: sparse, or most keys (long runs broken by a few gaps).
    const int n_cols = trial % 7 == 0 ? kl - static_cast<int>(rng() % (kl / 8 + 1))
                                      : static_cast<int>(rng() % (kl / 2 + 2));
    std::vector<int32_t> cols = SampleSorted(rng, 0, kl - 1, n_cols);
    if (trial % 5 == 0 && kl > 40) {  // a planted run of 14..18 consecutive columns
      const int start = static_cast<int>(rng() % (kl - 20));
      const int len = 14 + static_cast<int>(rng() % 5);
      for (int c = start; c < start + len; ++c) cols.push_back(c);
      std::sort(cols.begin(), cols.end());
      cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    }
    const int kept = trial % 2 == 0 ? 16 << (rng() % 4) : 0;
    const std::string config =
        absl::StrCat("trial ", trial, " causal=", causal, " kl=", kl, " first_pos=", first_pos,
                     " last_pos=", last_pos, " kept=", kept, " offsets=[",
                     absl::StrJoin(offsets, ","), "] cols=[", absl::StrJoin(cols, ","), "]");
    const RowKeys want = CpuRow(g, offsets, cols, kept);
    int nr = 0, nc = 0;
    const VecSink got = GpuRow(g, offsets, cols, kept, &nr, &nc);
    ASSERT_EQ(got.ranges, want.ranges) << config;
    ASSERT_EQ(got.cols, want.cols) << config;
    ASSERT_EQ(nr, static_cast<int>(want.ranges.size())) << config;
    ASSERT_EQ(nc, static_cast<int>(want.cols.size())) << config;
    ++checked;
  }
  EXPECT_EQ(checked, 20000);
}

TEST(RowAssemblySpansTest, EmptyLinesGiveEmptyRow) {
  BlockGeometry g{0, 0, 0, 10, 20, 21};
  int nr = -1, nc = -1;
  const VecSink got = GpuRow(g, {}, {}, 0, &nr, &nc);
  EXPECT_TRUE(got.ranges.empty());
  EXPECT_TRUE(got.cols.empty());
  EXPECT_EQ(nr, 0);
  EXPECT_EQ(nc, 0);
}

// Offsets forced by distance from the main diagonal (0, 1, -1, 2, -2, ...) within the reachable
// offsets, as SelectVerticalSlashLines forces them.
TEST(RowAssemblySpansTest, ForcedOffsetsAreTheCpuOnes) {
  for (int min_offset : {0, -1, -3, -50}) {
    for (int max_offset : {0, 2, 7, 100}) {
      for (int forced : {1, 2, 5, 100, 1000}) {
        std::vector<int> cpu;
        const int reach = std::max(max_offset, -min_offset);
        for (int dist = 0; dist <= reach && static_cast<int>(cpu.size()) < forced; ++dist) {
          for (int sign = 0; sign < (dist == 0 ? 1 : 2); ++sign) {
            const int o = sign == 0 ? dist : -dist;
            if (static_cast<int>(cpu.size()) < forced && o >= min_offset && o <= max_offset) {
              cpu.push_back(o);
            }
          }
        }
        int lo = 0, hi = 0;
        const int n = row_assembly::ForcedOffsets(forced, min_offset, max_offset, &lo, &hi);
        std::vector<int> gpu;
        for (int o = lo; o < hi; ++o) gpu.push_back(o);
        std::sort(cpu.begin(), cpu.end());
        EXPECT_EQ(gpu, cpu) << "min " << min_offset << " max " << max_offset << " forced "
                            << forced;
        EXPECT_EQ(n, static_cast<int>(cpu.size()));
      }
    }
  }
}

// ---- Key bitmaps -------------------------------------------------------------------------------

struct Row {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  std::vector<int32_t> cols;
};

// AssembleKernel's algorithm for one row, with segments of `seg` words.
Row Emulate(int key_end, const std::vector<std::pair<int64_t, int64_t>>& spans,
            const std::vector<int64_t>& cols, int seg) {
  const int64_t num_words = (static_cast<int64_t>(key_end) + 31) / 32;
  uint32_t carry = 0;
  std::vector<int32_t> starts, ends;
  Row row;
  for (int64_t w0 = 0; w0 <= num_words; w0 += seg) {
    const int64_t wbase = w0 - 1;
    const int n = seg + 2;
    std::vector<uint32_t> r(n, 0), c(n, 0), f(n, 0);
    const int64_t lo_key = std::max<int64_t>(wbase, 0) * 32, hi_key = (wbase + n) * 32;
    for (auto [s, e] : spans) {
      s = std::max(s, lo_key);
      e = std::min(e, hi_key);
      for (int64_t w = s >> 5; s < e && w <= (e - 1) >> 5; ++w) r[w - wbase] |= SpanBits(w, s, e);
    }
    for (int64_t k : cols) {
      if (k >= lo_key && k < hi_key) c[(k >> 5) - wbase] |= 1u << (k & 31);
    }
    for (int i = 0; i < n; ++i) {
      r[i] &= WordMask(wbase + i, key_end);
      c[i] &= WordMask(wbase + i, key_end);
    }
    std::vector<uint32_t> cf(n, 0);
    for (int i = 1; i <= seg; ++i) {
      FinalBits(r[i - 1], c[i - 1], r[i], c[i], r[i + 1], c[i + 1], &f[i], &cf[i]);
    }
    f[0] = carry;
    for (int i = 1; i <= seg; ++i) {
      uint32_t st, en;
      RangeEvents(f[i - 1], f[i], &st, &en);
      const int32_t key0 = static_cast<int32_t>((wbase + i) * 32);
      for (int b = 0; b < 32; ++b) {
        if (st >> b & 1u) starts.push_back(key0 + b);
        if (en >> b & 1u) ends.push_back(key0 + b);
        if (cf[i] >> b & 1u) row.cols.push_back(key0 + b);
      }
    }
    carry = f[seg];
  }
  EXPECT_EQ(starts.size(), ends.size());
  for (size_t i = 0; i < std::min(starts.size(), ends.size()); ++i) {
    row.ranges.emplace_back(starts[i], ends[i]);
  }
  return row;
}

std::string Show(const Row& r) {
  std::string s;
  for (auto [a, b] : r.ranges) absl::StrAppend(&s, "[", a, ",", b, ")");
  for (int32_t c : r.cols) absl::StrAppend(&s, " ", c);
  return s;
}

TEST(RowAssemblyBitsTest, LongRunsMatchBruteForce) {
  std::mt19937_64 rng(1);
  for (int it = 0; it < 20000; ++it) {
    uint32_t w[3];
    for (uint32_t& x : w) {
      // Mostly long runs with holes, so that runs of 14..18 are common.
      x = static_cast<uint32_t>(rng());
      x |= static_cast<uint32_t>(rng()) | static_cast<uint32_t>(rng());
      if (rng() % 3 == 0) x = ~0u ^ (1u << (rng() % 32));
      if (rng() % 5 == 0) x = 0;
    }
    uint32_t want = 0;
    for (int b = 0; b < 32; ++b) {
      auto bit = [&](int i) { return (w[i / 32] >> (i % 32)) & 1u; };
      const int pos = 32 + b;
      if (!bit(pos)) continue;
      int lo = pos, hi = pos;
      while (lo > 0 && bit(lo - 1)) --lo;
      while (hi < 95 && bit(hi + 1)) ++hi;
      // Runs reaching the window's edge are at least as long as seen; only lengths up to 16
      // matter, and the window gives 32 bits of context on each side.
      if (hi - lo + 1 >= 16) want |= 1u << b;
    }
    ASSERT_EQ(LongRuns16(w[0], w[1], w[2]), want) << it;
  }
}

TEST(RowAssemblyBitsTest, EmulatedAssemblyMatchesNormalize) {
  std::mt19937_64 rng(2);
  for (int it = 0; it < 3000; ++it) {
    const int key_end = static_cast<int>(rng() % 1500);
    const int seg = std::vector<int>{1, 2, 3, 5, 8, 64}[rng() % 6];
    std::vector<std::pair<int64_t, int64_t>> spans;
    std::vector<int64_t> cols;
    RowKeys want;
    const int nspans = static_cast<int>(rng() % 6);
    for (int i = 0; i < nspans; ++i) {
      const int64_t s = static_cast<int64_t>(rng() % 1700) - 100;
      const int64_t len = static_cast<int64_t>(rng() % 200) - 10;
      spans.emplace_back(s, s + len);
      want.AddRange(s, s + len);
    }
    const int nruns = static_cast<int>(rng() % 8);
    for (int i = 0; i < nruns; ++i) {
      // Column runs of 1..40 consecutive keys (some >= 16), sometimes with gaps.
      const int64_t s = static_cast<int64_t>(rng() % 1600);
      const int len = 1 + static_cast<int>(rng() % 40);
      const bool gaps = rng() % 4 == 0;
      for (int k = 0; k < len; ++k) {
        if (gaps && rng() % 7 == 0) continue;
        cols.push_back(s + k);
        want.AddCol(s + k);
        if (rng() % 9 == 0) {
          cols.push_back(s + k);  // duplicate
          want.AddCol(s + k);
        }
      }
    }
    want.Normalize(key_end);
    const Row got = Emulate(key_end, spans, cols, seg);
    Row w;
    w.ranges = want.ranges;
    w.cols = want.cols;
    ASSERT_EQ(Show(got), Show(w)) << "iteration " << it << " key_end " << key_end << " seg " << seg;
  }
}

}  // namespace
}  // namespace spattn
