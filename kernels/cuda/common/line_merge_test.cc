// The one-row merge the GPU builders of vertical_slash and flex_prefill run per thread
// (common/line_merge.h), checked on the CPU against what the CPU builders do for a row:
// AddVerticalSlash (+ flex's kept blocks) followed by RowKeys::Normalize. Runs everywhere.
#include "kernels/cuda/common/line_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/builders/estimate.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace {

struct VecSink {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  std::vector<int32_t> cols;
  void Range(int s, int e) { ranges.emplace_back(s, e); }
  void Col(int c) { cols.push_back(c); }
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
  line_merge::RowGeo geo{g.first_pos, g.last_pos, g.key_end};
  line_merge::ExtraRanges extra;
  if (kept_block > 0) extra = line_merge::KeptBlocks(geo, kept_block);
  // Clusters for this row's block length, runs of consecutive columns.
  std::vector<int32_t> clusters(2 * offsets_asc.size() + 2), runs(2 * cols.size() + 2);
  line_merge::RowLines lines;
  lines.offsets = offsets_asc.data();
  lines.n_off = static_cast<int>(offsets_asc.size());
  lines.clusters = clusters.data();
  lines.n_clusters = line_merge::GroupRuns(offsets_asc.data(), lines.n_off,
                                           g.last_pos - g.first_pos + 1, clusters.data());
  lines.col_runs = runs.data();
  lines.n_runs = line_merge::GroupRuns(cols.data(), static_cast<int>(cols.size()), 1, runs.data());
  line_merge::CountSink count;
  line_merge::MergeRow(geo, extra, lines, 16, count);
  *counted_ranges = count.ranges;
  *counted_cols = count.cols;
  VecSink sink;
  line_merge::MergeRow(geo, extra, lines, 16, sink);
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
TEST(RowMergeATest, MatchesNormalizeOnRandomRows) {
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

TEST(RowMergeATest, EmptyLinesGiveEmptyRow) {
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
TEST(RowMergeATest, ForcedOffsetsAreTheCpuOnes) {
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
        const int n = line_merge::ForcedOffsets(forced, min_offset, max_offset, &lo, &hi);
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

}  // namespace
}  // namespace spattn
