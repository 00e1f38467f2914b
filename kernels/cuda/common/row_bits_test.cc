// The GPU row assembler's word logic (row_bits.h), run on the CPU the way AssembleKernel
// runs it (segments of words with a halo word on each side, a carried last word), against
// RowKeys::Normalize on random rows; and LongRuns16 against a brute-force run finder.
#include "kernels/cuda/common/row_bits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/sparse_index.h"

namespace spattn {
namespace cuda {
namespace {

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

TEST(BuildersBBitsTest, LongRunsMatchBruteForce) {
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

TEST(BuildersBBitsTest, EmulatedAssemblyMatchesNormalize) {
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
}  // namespace cuda
}  // namespace spattn
