// The bitmap row assembler (row_assembly.cuh) on the GPU against RowKeys::Normalize on the CPU,
// with rows built to reach its fill pass's fallback: a 64K-key segment with more than
// kAsmStageRanges (1024) range starts / ends or more than kAsmStageCols (10240) columns writes
// that stream straight to global memory, the others through the shared-memory stage (no builder
// test reaches it on demand). Rows span several segments, mix staged and direct segments and
// streams, carry ranges across segment edges, set bits past key_end (ignored), and are written
// for two head slots. The rows and their CPU form are checked everywhere; the GPU part skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/sparse_index.h"
#ifdef SPATTN_ROW_ASSEMBLY_GPU
#include "kernels/cuda/common/row_assembly_gpu_testing.h"
#endif

namespace spattn {
namespace {

constexpr int kSegKeys = 64 * 1024;

struct BitRow {
  int key_end = 0;
  std::vector<uint32_t> r, c;  // words past key_end too (ceil(key_end / 32) + 2)
  explicit BitRow(int ke) : key_end(ke), r((ke + 31) / 32 + 2, 0u), c((ke + 31) / 32 + 2, 0u) {}
  int Keys() const { return static_cast<int>(r.size()) * 32; }
  void SetR(int k) { r[k >> 5] |= 1u << (k & 31); }
  void SetC(int k) { c[k >> 5] |= 1u << (k & 31); }
  void RangeSpan(int s, int e) {
    for (int k = s; k < e && k < Keys(); ++k) SetR(k);
  }
};

// The CPU builders' row from the same bits: each run of range bits a range, each column bit a
// column, normalized (min_run 16) below key_end.
RowKeys Cpu(const BitRow& b) {
  RowKeys row;
  const int n = b.Keys();
  for (int k = 0; k < n;) {
    if (!(b.r[k >> 5] >> (k & 31) & 1u)) {
      ++k;
      continue;
    }
    int e = k;
    while (e < n && (b.r[e >> 5] >> (e & 31) & 1u)) ++e;
    row.AddRange(k, e);
    k = e;
  }
  for (int k = 0; k < n; ++k) {
    if (b.c[k >> 5] >> (k & 31) & 1u) row.AddCol(k);
  }
  row.Normalize(b.key_end);
  return row;
}

// The most range starts and columns in one segment of the assembler (its segment s holds keys
// [s * 64K, (s + 1) * 64K)).
void SegmentMax(const RowKeys& row, int* max_ranges, int* max_cols) {
  std::vector<int> nr, nc;
  auto bump = [](std::vector<int>& v, int k) {
    const size_t s = static_cast<size_t>(k / kSegKeys);
    if (v.size() <= s) v.resize(s + 1, 0);
    ++v[s];
  };
  for (auto [s, e] : row.ranges) bump(nr, s);
  for (int32_t k : row.cols) bump(nc, k);
  *max_ranges = *max_cols = 0;
  for (int v : nr) *max_ranges = std::max(*max_ranges, v);
  for (int v : nc) *max_cols = std::max(*max_cols, v);
}

std::vector<BitRow> Rows() {
  std::vector<BitRow> rows;
  std::mt19937_64 rng(22);
  {  // Columns over the stage in segment 0 (every other key), a few ranges; segment 1 staged.
    BitRow b(150000);
    for (int k = 0; k < 40000; k += 2) b.SetC(k);
    b.RangeSpan(50000, 50100);
    b.RangeSpan(65500, 65600);  // across the segment edge
    for (int k = 70000; k < 71000; k += 3) b.SetC(k);
    rows.push_back(b);
  }
  {  // Ranges over the stage in segment 1 only (length 2, gap 2), columns staged.
    BitRow b(140000);
    for (int k = 70000; k < 90000; k += 4) b.RangeSpan(k, k + 2);
    for (int k = 1000; k < 3000; k += 5) b.SetC(k);
    b.RangeSpan(130000, 139990);
    rows.push_back(b);
  }
  {  // Runs of 17 columns (ranges by min_run) with 1-key gaps: > 1024 ranges from columns in
     // segments 0 and 1, single columns between them staged.
    BitRow b(131072 + 777);
    for (int k = 0; k + 17 < 131072; k += 18) {
      for (int i = 0; i < 17; ++i) b.SetC(k + i);
    }
    b.SetC(131072 + 100);
    b.SetC(131072 + 300);
    rows.push_back(b);
  }
  {  // Every stream over its stage in segment 2; ranges past key_end and to its last key.
    BitRow b(3 * kSegKeys + 5000);
    const int s0 = 2 * kSegKeys;
    for (int k = s0; k < s0 + 30000; k += 2) b.SetC(k);
    for (int k = s0 + 30000; k < s0 + 60000; k += 5) b.RangeSpan(k, k + 3);
    b.RangeSpan(3 * kSegKeys + 4990, b.Keys());
    for (int k = 3 * kSegKeys + 4000; k < b.Keys(); k += 2) b.SetC(k);
    rows.push_back(b);
  }
  {  // One segment, every stream staged (the records path writes lengths from the stages), a
     // range to the last key.
    BitRow b(40000);
    for (int k = 0; k + 7 < 39000; k += 100) b.RangeSpan(k, k + 7);
    for (int k = 20000; k < 30000; k += 13) b.SetC(k);
    b.RangeSpan(39990, b.Keys());
    rows.push_back(b);
  }
  {  // One segment with more range starts than the stage (lengths after the row).
    BitRow b(60000);
    for (int k = 0; k < 8000; k += 4) b.RangeSpan(k, k + 2);
    for (int k = 9000; k < 9100; k += 3) b.SetC(k);
    rows.push_back(b);
  }
  // Random rows, staged or not, and tiny / empty ones.
  for (int it = 0; it < 6; ++it) {
    BitRow b(1 + static_cast<int>(rng() % 200000));
    const double pc = it % 2 ? 0.3 : 0.02, pr = it % 3 ? 0.05 : 0.001;
    for (int k = 0; k < b.Keys(); ++k) {
      const double u = static_cast<double>(rng() % 1000000) / 1e6;
      if (u < pc) b.SetC(k);
      if (u > 1.0 - pr) b.RangeSpan(k, k + 1 + static_cast<int>(rng() % 40));
    }
    rows.push_back(b);
  }
  // Many short rows: more units than the assembler's grid (132 SMs x 8 CTAs on an H100), so a
  // CTA assembles several rows (with row records: the next row's record loaded during the
  // current row, two shared records by row parity).
  for (int it = 0; it < 2400; ++it) {
    BitRow b(1 + static_cast<int>(rng() % 6000));
    for (int k = 0; k < b.Keys(); k += 1 + static_cast<int>(rng() % 50)) {
      if (rng() % 3 == 0) {
        b.RangeSpan(k, k + 1 + static_cast<int>(rng() % 30));
      } else {
        b.SetC(k);
      }
    }
    rows.push_back(b);
  }
  rows.emplace_back(1);
  rows.emplace_back(33);
  rows.back().SetC(0);
  rows.back().SetC(40);  // past key_end
  return rows;
}

TEST(RowAssemblyGpuTest, FillFallbackMatchesNormalize) {
  const std::vector<BitRow> rows = Rows();
  std::vector<int> key_end;
  std::vector<int64_t> word_off{0};
  std::vector<uint32_t> rw, cw;
  std::vector<RowKeys> want;
  int fallback_rows = 0;
  for (const BitRow& b : rows) {
    key_end.push_back(b.key_end);
    rw.insert(rw.end(), b.r.begin(), b.r.end());
    cw.insert(cw.end(), b.c.begin(), b.c.end());
    word_off.push_back(static_cast<int64_t>(rw.size()));
    want.push_back(Cpu(b));
    int mr = 0, mc = 0;
    SegmentMax(want.back(), &mr, &mc);
    fallback_rows += mr > 1024 || mc > 10240;
  }
  // The rows reach the fallback (4 built for it, random ones may too).
  ASSERT_GE(fallback_rows, 4);
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_ROW_ASSEMBLY_GPU
  constexpr int kSlots = 2;
  // Both paths: Begin per row on thread 0, and the row records (made before the count pass).
  // Each also with kept words (the count pass's final words read by the fill pass) for some rows.
  for (const bool records : {false, true})
    for (const bool keep : {false, true}) {
      SCOPED_TRACE(records ? "row records" : "Begin per row");
      SCOPED_TRACE(keep ? "kept words" : "bitmaps in both passes");
      row_assembly::AssembledForTest got;
      ASSERT_EQ(row_assembly::AssembleBitmapRowsForTest(key_end, word_off, rw, cw, kSlots, &got,
                                                        records, keep),
                cudaSuccess);
      const int units = static_cast<int>(rows.size());
      ASSERT_EQ(got.off_ranges.size(), static_cast<size_t>(kSlots * units + 1));
      for (int s = 0; s < kSlots; ++s) {
        for (int u = 0; u < units; ++u) {
          const int64_t row = static_cast<int64_t>(s) * units + u;
          const RowKeys& w = want[u];
          const int64_t r0 = got.off_ranges[row], r1 = got.off_ranges[row + 1];
          const int64_t c0 = got.off_cols[row], c1 = got.off_cols[row + 1];
          ASSERT_EQ(r1 - r0, static_cast<int64_t>(w.ranges.size())) << "slot " << s << " row " << u;
          ASSERT_EQ(c1 - c0, static_cast<int64_t>(w.cols.size())) << "slot " << s << " row " << u;
          for (int64_t i = 0; i < r1 - r0; ++i) {
            ASSERT_EQ(got.range_start[r0 + i], w.ranges[i].first) << "row " << u << " range " << i;
            ASSERT_EQ(got.range_len[r0 + i], w.ranges[i].second - w.ranges[i].first)
                << "row " << u << " range " << i;
          }
          for (int64_t i = 0; i < c1 - c0; ++i) {
            ASSERT_EQ(got.col_idx[c0 + i], w.cols[i]) << "row " << u << " col " << i;
          }
        }
      }
    }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// Span rows (row_assembly.cuh): rows given as key spans take the span kernel (one warp a row,
// the spans sorted and merged) when they have at most span_cap spans, the bitmap passes
// otherwise; both against the union's maximal runs computed here, and against each other through
// the caps 512 (the default), 3 (most rows on the bitmaps, mixed in one launch) and 0 (none).
struct SpanRow {
  int key_end = 0;
  std::vector<std::pair<int64_t, int64_t>> spans;
};

std::vector<SpanRow> SpanRows() {
  std::vector<SpanRow> rows;
  std::mt19937_64 rng(30);
  auto rnd = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  // sample_attention-like rows: 128-key column blocks, slash spans of 255 keys a block apart,
  // the local window; some past key_end or before key 0, in the source's order.
  for (int it = 0; it < 3000; ++it) {
    SpanRow r;
    const int blocks = 1 + static_cast<int>(rnd(300));
    r.key_end = blocks * 128 - static_cast<int>(rnd(2) * rnd(128));
    const int64_t first = r.key_end - 128, last = r.key_end - 1;
    const int chunks = 1 + static_cast<int>(rnd(3));
    for (int c = 0; c < chunks; ++c) {
      const int nc = static_cast<int>(rnd(it % 50 == 0 ? 400 : 40));
      for (int k = 0; k < nc; ++k) {
        const int64_t cb = rnd(blocks + 1);
        r.spans.push_back({cb * 128, (cb + 1) * 128});
      }
      const int ns = static_cast<int>(rnd(it % 60 == 0 ? 300 : 30));
      for (int k = 0; k < ns; ++k) {
        const int64_t sb = rnd(blocks + 2) - 1;
        r.spans.push_back({first - (sb + 1) * 128 + 1, last - sb * 128 + 1});
      }
    }
    if (it % 3 != 0) r.spans.push_back({first - 300 + 1, last + 1});
    rows.push_back(r);
  }
  // Random spans: short and long, overlapping, touching, duplicated, empty, past both ends; rows
  // of several 64K-key segments (the bitmap passes' segment edges) and rows past the cap.
  for (int it = 0; it < 400; ++it) {
    SpanRow r;
    r.key_end = 1 + static_cast<int>(rnd(it % 10 == 0 ? 200000 : 5000));
    const int n = static_cast<int>(rnd(it % 7 == 0 ? 700 : 80));
    for (int k = 0; k < n; ++k) {
      const int64_t s = rnd(r.key_end + 100) - 50;
      const int64_t len = rnd(5) == 0 ? rnd(3000) : rnd(40);
      r.spans.push_back({s, s + len - (rnd(20) == 0 ? 60 : 0)});
      if (rnd(8) == 0) r.spans.push_back(r.spans.back());  // a duplicate
      if (rnd(8) == 0) {  // one that touches it
        const int64_t e = r.spans.back().second;
        r.spans.push_back({e, e + 1 + rnd(30)});
      }
    }
    rows.push_back(r);
  }
  // Exactly the cap, one past it; no spans; one key; a span covering everything.
  for (const int n : {512, 513}) {
    SpanRow r;
    r.key_end = 100000;
    for (int k = 0; k < n; ++k) r.spans.push_back({k * 150, k * 150 + 100 + (k % 3) * 25});
    rows.push_back(r);
  }
  rows.push_back({1000, {}});
  rows.push_back({1, {{0, 1}}});
  rows.push_back({70000, {{-5, 80000}}});
  rows.push_back({64, {{-100, 0}, {64, 90}, {10, 10}}});
  return rows;
}

// The union's maximal runs below key_end.
std::vector<std::pair<int32_t, int32_t>> Runs(const SpanRow& r) {
  std::vector<char> in(static_cast<size_t>(r.key_end), 0);
  for (auto [s, e] : r.spans) {
    for (int64_t k = std::max<int64_t>(s, 0); k < std::min<int64_t>(e, r.key_end); ++k) in[k] = 1;
  }
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (int k = 0; k < r.key_end;) {
    if (!in[k]) {
      ++k;
      continue;
    }
    int e = k;
    while (e < r.key_end && in[e]) ++e;
    runs.push_back({k, e});
    k = e;
  }
  return runs;
}

TEST(RowAssemblyGpuTest, SpanRowsMatchTheirUnion) {
  const std::vector<SpanRow> rows = SpanRows();
  std::vector<int> key_end;
  std::vector<int64_t> span_off{0}, starts, ends;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> want;
  int over_cap = 0, multi_seg = 0;
  for (const SpanRow& r : rows) {
    key_end.push_back(r.key_end);
    for (auto [s, e] : r.spans) {
      starts.push_back(s);
      ends.push_back(e);
    }
    span_off.push_back(static_cast<int64_t>(starts.size()));
    want.push_back(Runs(r));
    over_cap += r.spans.size() > 512;
    multi_seg += r.key_end > kSegKeys;
  }
  ASSERT_GE(over_cap, 3);
  ASSERT_GE(multi_seg, 3);
  std::string why;
  if (ListCudaDevices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
#ifdef SPATTN_ROW_ASSEMBLY_GPU
  constexpr int kSlots = 2;
  // The rows within the cap alone: the bitmap launches find no row of theirs.
  std::vector<int> key_end_in;
  std::vector<int64_t> span_off_in{0}, starts_in, ends_in;
  std::vector<int> in_rows;
  for (int u = 0; u < static_cast<int>(rows.size()); ++u) {
    if (rows[u].spans.size() > 512) continue;
    in_rows.push_back(u);
    key_end_in.push_back(key_end[u]);
    starts_in.insert(starts_in.end(), starts.begin() + span_off[u], starts.begin() + span_off[u + 1]);
    ends_in.insert(ends_in.end(), ends.begin() + span_off[u], ends.begin() + span_off[u + 1]);
    span_off_in.push_back(static_cast<int64_t>(starts_in.size()));
  }
  for (const int cap : {512, 3, 0, -1, -2}) {
    // -1: cap 512 without the rest word; -2: cap 512 on the rows within it.
    SCOPED_TRACE("span_cap " + std::to_string(cap));
    const bool within = cap == -2;
    row_assembly::AssembledForTest got;
    ASSERT_EQ(within ? row_assembly::AssembleSpanRowsForTest(key_end_in, span_off_in, starts_in,
                                                             ends_in, kSlots, 512, true, &got)
                     : row_assembly::AssembleSpanRowsForTest(key_end, span_off, starts, ends,
                                                             kSlots, cap < 0 ? 512 : cap,
                                                             cap != -1, &got),
              cudaSuccess);
    const int units = static_cast<int>(within ? in_rows.size() : rows.size());
    ASSERT_EQ(got.off_ranges.size(), static_cast<size_t>(kSlots * units + 1));
    EXPECT_TRUE(got.col_idx.empty());
    for (int s = 0; s < kSlots; ++s) {
      for (int u = 0; u < units; ++u) {
        const int64_t row = static_cast<int64_t>(s) * units + u;
        const auto& w = want[within ? in_rows[u] : u];
        const int64_t r0 = got.off_ranges[row], r1 = got.off_ranges[row + 1];
        ASSERT_EQ(r1 - r0, static_cast<int64_t>(w.size())) << "slot " << s << " row " << u;
        ASSERT_EQ(got.off_cols[row + 1], got.off_cols[row]) << "slot " << s << " row " << u;
        for (int64_t i = 0; i < r1 - r0; ++i) {
          ASSERT_EQ(got.range_start[r0 + i], w[i].first) << "row " << u << " range " << i;
          ASSERT_EQ(got.range_len[r0 + i], w[i].second - w[i].first)
              << "row " << u << " range " << i;
        }
      }
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace spattn
