// MInference vertical-slash builder: hand-checked merges, brute-force selection, index
// invariants, the CPU kernel under the densified mask, recall on planted lines, bad parameters.
#include "kernels/builders/vertical_slash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/estimate.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/builders/testing/builder_test_util.h"

namespace spattn {
namespace {

using testing::AllHeads;
using testing::Describe;
using testing::MakeShape;
using testing::RandomProblem;
using Ranges = std::vector<std::pair<int32_t, int32_t>>;

Ranges RowRanges(const SparseIndex& idx, int slot, int block) {
  Ranges out;
  const int64_t r = idx.row(slot, block);
  for (int e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
    out.emplace_back(idx.range_start[e], idx.range_start[e] + idx.range_len[e]);
  }
  return out;
}

std::vector<int32_t> RowCols(const SparseIndex& idx, int slot, int block) {
  const int64_t r = idx.row(slot, block);
  return std::vector<int32_t>(idx.col_idx.begin() + idx.col_indptr[r],
                              idx.col_idx.begin() + idx.col_indptr[r + 1]);
}

std::string DescribeParams(const VerticalSlashParams& p, int block_m) {
  return absl::StrCat("last_q=", p.last_q, " vertical=", p.vertical_size, " slash=", p.slash_size,
                      " forced_cols=", p.forced_columns, " forced_diags=", p.forced_diagonals,
                      " block_m=", block_m);
}

// Alg. 4 for one block, worked out by hand. Block rows sit at positions 100..163 (key_end 164).
//   offset 200 > last_pos: its segment [-100, -37] is before key 0 -> skipped;
//   offset 150: [100-150, 163-150] = [-50, 13]   -> [0, 14);
//   offset 60:  [40, 103]                        -> [40, 104);
//   offset 0:   [100, 163]                       -> [100, 164), overlaps -> [40, 164).
// Columns: 3 lies in [0, 14) and is dropped; 20, 30, 39 stay (39 touches [40, ...) but is not
// inside it); 170 >= key_end is cut by causality.
TEST(VerticalSlashMergeTest, HandCheckedBlock) {
  BlockGeometry g{0, 100, 164, 100, 163, 164};
  RowKeys row;
  AddVerticalSlash(g, {200, 150, 60, 0}, {3, 20, 30, 39, 170}, &row);
  EXPECT_EQ(row.ranges, (Ranges{{0, 14}, {40, 164}}));
  EXPECT_EQ(row.cols, (std::vector<int32_t>{20, 30, 39}));
}

// End to end on a planted input, by hand. S = 40, block_m = 16, scale 1, every query = e0, key 20
// = 10 * e0, all other keys 0: logits are 10 for key 20 and 0 elsewhere.
// last_q = 4 -> rows at positions 36..39.
//  * vertical: column 0 is forced; key 20 carries ~0.99 of every row; keys 1..36 are seen by all
//    four rows with the same probability (exact ties), keys 37..39 by fewer rows. vertical_size
//    = 3 -> {0 (forced), 20, 1 (lowest index among the ties)}.
//  * slash: offset 0 is forced; offsets 16..19 each hold one row's key 20; the row at position 36
//    has the fewest competing keys, so offset 16 is largest. slash_size = 2 -> {16, 0}.
//  * block 0 (pos 0..15): o=0 -> [0, 16); o=16 -> [-16, -1] empty; columns 0, 1 inside, 20 > 15.
//  * block 1 (pos 16..31): o=16 -> [0, 16), o=0 -> [16, 32): merged [0, 32); columns inside.
//  * block 2 (pos 32..39): o=16 -> [16, 24), o=0 -> [32, 40); 20 inside [16, 24); 0 and 1 stay
//    columns.
TEST(VerticalSlashIndexTest, HandCheckedPlantedIndex) {
  ProblemShape shape = MakeShape({40}, {}, 1, 1, 64, DType::kF32);
  shape.softmax_scale = 1.f;
  HostProblem hp(shape);
  std::vector<float> e0(64, 0.f);
  e0[0] = 1.f;
  for (int i = 0; i < 40; ++i) testing::SetQRow(&hp, i, 0, e0);
  std::vector<float> key(64, 0.f);
  key[0] = 10.f;
  testing::SetKRow(&hp, 20, 0, key);

  VerticalSlashParams params;
  params.last_q = 4;
  params.vertical_size = 3;
  params.slash_size = 2;
  params.forced_columns = 1;
  params.forced_diagonals = 1;
  VerticalSlashLines lines;
  ASSERT_TRUE(SelectVerticalSlashLines(hp.problem(), params, 0, 0, &lines).ok());
  EXPECT_EQ(lines.columns, (std::vector<int32_t>{0, 1, 20}));
  EXPECT_EQ(lines.offsets, (std::vector<int32_t>{16, 0}));

  SparseIndex idx;
  ASSERT_TRUE(BuildVerticalSlashIndex(hp.problem(), params, {0}, 16, &idx).ok());
  ASSERT_EQ(idx.num_blocks(), 3);
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{0, 16}}));
  EXPECT_TRUE(RowCols(idx, 0, 0).empty());
  EXPECT_EQ(RowRanges(idx, 0, 1), (Ranges{{0, 32}}));
  EXPECT_TRUE(RowCols(idx, 0, 1).empty());
  EXPECT_EQ(RowRanges(idx, 0, 2), (Ranges{{16, 24}, {32, 40}}));
  EXPECT_EQ(RowCols(idx, 0, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(ValidateSparseIndex(hp.problem(), idx).ok());
}

// Forced lines count towards the budgets and survive budgets smaller than them.
TEST(VerticalSlashIndexTest, ForcedLinesAreAlwaysKept) {
  auto hp = RandomProblem(MakeShape({300}, {}, 1, 1), 5);
  VerticalSlashParams params;
  params.last_q = 8;
  params.vertical_size = 2;
  params.forced_columns = 5;
  params.slash_size = 1;
  params.forced_diagonals = 7;
  VerticalSlashLines lines;
  ASSERT_TRUE(SelectVerticalSlashLines(hp->problem(), params, 0, 0, &lines).ok());
  EXPECT_EQ(lines.columns, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(lines.offsets, (std::vector<int32_t>{6, 5, 4, 3, 2, 1, 0}));
  params.vertical_size = 6;
  params.slash_size = 9;
  ASSERT_TRUE(SelectVerticalSlashLines(hp->problem(), params, 0, 0, &lines).ok());
  EXPECT_EQ(lines.columns.size(), 6u);
  EXPECT_EQ(lines.offsets.size(), 9u);
}

// ---------------------------------------------------------------------------------------------
// Brute force: the paper's rule with plain loops in double.

struct NaiveLines {
  std::vector<int> columns, offsets;
  bool fragile = false;  // a top-k boundary lies within rounding of a tie
};

// Top-k by (score desc, index asc) with an infinite score for forced entries.
std::vector<int> NaiveTopK(const std::map<int, double>& scores, int k, bool* fragile) {
  std::vector<std::pair<double, int>> all;
  for (const auto& [i, s] : scores) all.emplace_back(s, i);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  });
  k = std::min<int>(k, all.size());
  if (k > 0 && k < static_cast<int>(all.size()) && !std::isinf(all[k - 1].first)) {
    const double a = all[k - 1].first, b = all[k].first;
    if (a - b <= 1e-4 * std::max(std::fabs(a), 1e-12)) *fragile = true;
  }
  std::vector<int> out;
  for (int i = 0; i < k; ++i) out.push_back(all[i].second);
  return out;
}

NaiveLines NaiveSelect(const AttentionProblem& p, const VerticalSlashParams& vs, int q_head,
                       int seq) {
  NaiveLines out;
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  if (ql == 0) return out;
  const int n = std::min(vs.last_q, ql);
  const std::vector<double> probs = testing::ExactProbs(p, q_head, seq, ql - n, ql);
  std::map<int, double> vertical, slash;
  for (int i = 0; i < n; ++i) {
    const int pos = p.query_pos(seq, ql - n + i);
    const int visible = p.causal ? pos + 1 : kl;
    for (int key = 0; key < kl; ++key) vertical[key] += 0;
    for (int key = 0; key < visible; ++key) {
      vertical[key] += probs[static_cast<size_t>(i) * kl + key];
      slash[pos - key] += probs[static_cast<size_t>(i) * kl + key];
    }
  }
  const double inf = std::numeric_limits<double>::infinity();
  int forced_cols = 0;
  for (int c = 0; c < vs.forced_columns && c < kl; ++c, ++forced_cols) vertical[c] = inf;
  // Nearest diagonals: 0, 1, -1, 2, -2, ... among those that exist.
  std::vector<int> by_distance;
  for (const auto& [o, s] : slash) by_distance.push_back(o);
  std::sort(by_distance.begin(), by_distance.end(), [](int a, int b) {
    if (std::abs(a) != std::abs(b)) return std::abs(a) < std::abs(b);
    return a > b;
  });
  int forced_diags = 0;
  for (int o : by_distance) {
    if (forced_diags == vs.forced_diagonals) break;
    slash[o] = inf;
    ++forced_diags;
  }
  out.columns = NaiveTopK(vertical, std::max(vs.vertical_size, forced_cols), &out.fragile);
  out.offsets = NaiveTopK(slash, std::max(vs.slash_size, forced_diags), &out.fragile);
  return out;
}

// The mask the lines give: query row i of block [q0, q1] (positions p0..p1) sees key k if it is
// causal and k is a selected column or p0 - o <= k <= p1 - o for a selected offset o.
std::vector<uint8_t> NaiveMask(const AttentionProblem& p, int seq, int block_m,
                               const NaiveLines& lines) {
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  std::vector<uint8_t> mask(static_cast<size_t>(ql) * kl, 0);
  for (int i = 0; i < ql; ++i) {
    const int b = i / block_m;
    const int p0 = p.query_pos(seq, b * block_m);
    const int p1 = p.query_pos(seq, std::min(ql, (b + 1) * block_m) - 1);
    const int pos = p.query_pos(seq, i);
    for (int key = 0; key < kl; ++key) {
      if (p.causal && key > pos) continue;
      bool keep = std::find(lines.columns.begin(), lines.columns.end(), key) != lines.columns.end();
      for (int o : lines.offsets) keep = keep || (p0 - o <= key && key <= p1 - o);
      mask[static_cast<size_t>(i) * kl + key] = keep;
    }
  }
  return mask;
}

struct BruteCase {
  ProblemShape shape;
  int block_m;
};

TEST(VerticalSlashIndexTest, MatchesBruteForceSelection) {
  const std::vector<BruteCase> cases = {
      {MakeShape({150}, {}, 2, 1), 32},
      {MakeShape({97}, {}, 4, 1, 64, DType::kF32), 16},
      {MakeShape({200}, {}, 8, 1, 64, DType::kF16), 64},
      {MakeShape({37}, {300}, 4, 2), 32},                           // chunked prefill
      {MakeShape({1, 63, 130}, {1, 100, 200}, 2, 2), 32},           // varlen + chunked
      {MakeShape({70}, {150}, 2, 1, 64, DType::kBF16, false), 32},  // not causal
  };
  VerticalSlashParams params;
  params.last_q = 16;
  params.vertical_size = 12;
  params.slash_size = 24;
  params.forced_columns = 3;
  params.forced_diagonals = 5;
  int seed = 11, exact = 0, ties = 0;
  for (const BruteCase& c : cases) {
    auto hp = RandomProblem(c.shape, seed++);
    const AttentionProblem& p = hp->problem();
    const std::string config = Describe(c.shape) + " " + DescribeParams(params, c.block_m);
    SparseIndex idx;
    ASSERT_TRUE(BuildVerticalSlashIndex(p, params, AllHeads(p), c.block_m, &idx).ok()) << config;
    ASSERT_TRUE(ValidateSparseIndex(p, idx).ok()) << config;
    for (int s = 0; s < idx.num_heads(); ++s) {
      for (int b = 0; b < p.batch(); ++b) {
        const NaiveLines naive = NaiveSelect(p, params, idx.heads[s], b);
        const std::vector<uint8_t> want = NaiveMask(p, b, c.block_m, naive);
        const std::vector<uint8_t> got = DensifyMask(p, idx, s, b);
        if (got == want) {
          ++exact;
          continue;
        }
        // Only a near-tie at a top-k boundary may flip a line: then compare the recall.
        ASSERT_TRUE(naive.fragile) << config << " head " << s << " seq " << b;
        ++ties;
        EXPECT_NEAR(testing::MaskRecall(p, idx.heads[s], b, got),
                    testing::MaskRecall(p, idx.heads[s], b, want), 0.02)
            << config;
      }
    }
  }
  std::cout << "brute force: " << exact << " exact, " << ties << " near-tie\n";
  EXPECT_GT(exact, 10 * std::max(ties, 1));
}

// ---------------------------------------------------------------------------------------------

std::vector<BruteCase> ShapeSweep() {
  std::vector<BruteCase> out;
  for (int len : {1, 63, 64, 65, 127, 131}) {
    out.push_back({MakeShape({len}, {}, 4, 1), 64});
  }
  out.push_back({MakeShape({257}, {}, 8, 1, 128, DType::kF16), 64});  // GQA 8, d 128
  out.push_back({MakeShape({131}, {}, 2, 2, 64, DType::kF32), 32});   // GQA 1
  out.push_back({MakeShape({1, 63, 200}, {1, 100, 333}, 4, 2), 64});  // varlen + chunked
  out.push_back({MakeShape({50}, {1000}, 4, 1), 16});                 // small chunk, long keys
  out.push_back({MakeShape({70}, {150}, 2, 1, 64, DType::kBF16, false), 32});
  out.push_back({MakeShape({0, 77}, {10, 77}, 2, 1), 32});  // an empty chunk
  return out;
}

TEST(VerticalSlashIndexTest, InvariantsAcrossShapes) {
  VerticalSlashParams params;
  params.last_q = 16;
  params.vertical_size = 10;
  params.slash_size = 20;
  params.forced_columns = 3;
  params.forced_diagonals = 4;
  int seed = 100;
  for (const BruteCase& c : ShapeSweep()) {
    auto hp = RandomProblem(c.shape, seed++);
    const AttentionProblem& p = hp->problem();
    const std::string config = Describe(c.shape) + " " + DescribeParams(params, c.block_m);
    SparseIndex idx;
    ASSERT_TRUE(BuildVerticalSlashIndex(p, params, AllHeads(p), c.block_m, &idx).ok()) << config;
    const absl::Status valid = ValidateSparseIndex(p, idx);
    EXPECT_TRUE(valid.ok()) << config << ": " << valid;
    EXPECT_EQ(idx.block_m, c.block_m);
    // The forced main diagonal gives every query row its own key.
    for (int s = 0; s < idx.num_heads(); ++s) {
      for (int b = 0; b < p.batch(); ++b) {
        const std::vector<uint8_t> m = DensifyMask(p, idx, s, b);
        for (int i = 0; i < p.q_len(b); ++i) {
          EXPECT_TRUE(m[static_cast<size_t>(i) * p.k_len(b) + p.query_pos(b, i)])
              << config << " head " << s << " seq " << b << " row " << i;
        }
      }
    }
  }
}

TEST(VerticalSlashIndexTest, KernelMatchesReferenceUnderDensifiedMask) {
  VerticalSlashParams params;
  params.last_q = 16;
  params.vertical_size = 10;
  params.slash_size = 12;
  params.forced_columns = 2;
  params.forced_diagonals = 3;
  int seed = 200;
  for (const BruteCase& c : ShapeSweep()) {
    auto hp = RandomProblem(c.shape, seed++);
    const std::string config = Describe(c.shape) + " " + DescribeParams(params, c.block_m);
    SparseIndex idx;
    // A head subset: the other heads' outputs must stay untouched.
    std::vector<int> heads = {hp->problem().num_q_heads - 1};
    if (hp->problem().num_q_heads > 1) heads.push_back(0);
    ASSERT_TRUE(BuildVerticalSlashIndex(hp->problem(), params, heads, c.block_m, &idx).ok());
    testing::ExpectKernelMatchesMaskedReference(hp.get(), idx, config);
  }
}

// ---------------------------------------------------------------------------------------------
// Recall on planted lines.
//
// head_dim 128, scale 1. Dimension 0 carries vertical lines: every query has q[0] = 1, the planted
// columns have k[0] = 15. Dimensions 2..127 form 63 rotation pairs split into one group per
// planted slash offset o_g: q_i = A (cos(i t), sin(i t)), k_j = (cos((j + o_g) t), sin((j + o_g)
// t)) with random frequencies t in [0.3, 3], so q_i . k_j = A sum cos((i - j - o_g) t): ~31 A on
// the diagonal i - j = o_g and noise of std ~5.6 A elsewhere. With A = 0.5 the planted keys carry
// ~99% of each row's mass.
void PlantVerticalSlash(HostProblem* hp, int seq, const std::vector<int>& columns,
                        const std::vector<int>& offsets, uint64_t seed) {
  AttentionProblem& p = hp->problem();
  const int d = p.head_dim, pairs = (d - 2) / 2;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> freq(0.3f, 3.0f);
  std::vector<float> theta(pairs);
  for (float& t : theta) t = freq(rng);
  const float amp = 0.5f;
  const int groups = static_cast<int>(offsets.size());
  for (int h = 0; h < p.num_kv_heads; ++h) {
    for (int j = 0; j < p.k_len(seq); ++j) {
      std::vector<float> k(d, 0.f);
      if (std::find(columns.begin(), columns.end(), j) != columns.end()) k[0] = 15.f;
      for (int f = 0; f < pairs; ++f) {
        const float a = (j + offsets[f % groups]) * theta[f];
        k[2 + 2 * f] = std::cos(a);
        k[3 + 2 * f] = std::sin(a);
      }
      testing::SetKRow(hp, p.cu_seqlens_k[seq] + j, h, k);
    }
  }
  for (int h = 0; h < p.num_q_heads; ++h) {
    for (int i = 0; i < p.q_len(seq); ++i) {
      const int pos = p.query_pos(seq, i);
      std::vector<float> q(d, 0.f);
      q[0] = 1.f;
      for (int f = 0; f < pairs; ++f) {
        q[2 + 2 * f] = amp * std::cos(pos * theta[f]);
        q[3 + 2 * f] = amp * std::sin(pos * theta[f]);
      }
      testing::SetQRow(hp, p.cu_seqlens_q[seq] + i, h, q);
    }
  }
}

TEST(VerticalSlashIndexTest, RecallOnPlantedLines) {
  // Two sequences: a full prefill and a chunk of 512 queries at the end of 2048 keys.
  ProblemShape shape = MakeShape({2048, 512}, {2048, 2048}, 2, 1, 128);
  shape.softmax_scale = 1.f;
  HostProblem hp(shape);
  const std::vector<int> columns = {3, 200, 517, 1100};
  PlantVerticalSlash(&hp, 0, columns, {37, 300}, 1);
  PlantVerticalSlash(&hp, 1, columns, {37, 300}, 2);
  VerticalSlashParams params;
  params.last_q = 64;
  params.vertical_size = 8;
  params.slash_size = 8;
  params.forced_columns = 2;
  params.forced_diagonals = 4;
  const int block_m = 32;
  SparseIndex idx;
  ASSERT_TRUE(BuildVerticalSlashIndex(hp.problem(), params, {0, 1}, block_m, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp.problem(), idx).ok());
  for (int b = 0; b < 2; ++b) {
    VerticalSlashLines lines;
    ASSERT_TRUE(SelectVerticalSlashLines(hp.problem(), params, 1, b, &lines).ok());
    for (int c : columns) {
      EXPECT_TRUE(std::binary_search(lines.columns.begin(), lines.columns.end(), c)) << c;
    }
    for (int o : {37, 300}) {
      EXPECT_NE(std::find(lines.offsets.begin(), lines.offsets.end(), o), lines.offsets.end()) << o;
    }
  }
  const double recall = testing::IndexRecall(hp.problem(), idx);
  const double density = testing::IndexDensity(hp.problem(), idx);
  // A-shape with the same sink and a local window of the same density, for contrast.
  AShapeParams ashape;
  ashape.sink_tokens = 64;
  ashape.local_tokens = static_cast<int>(density * 1024);
  SparseIndex ashape_idx;
  ASSERT_TRUE(BuildAShapeIndex(hp.problem(), ashape, {0, 1}, block_m, &ashape_idx).ok());
  const double ashape_recall = testing::IndexRecall(hp.problem(), ashape_idx);
  // The stated bound: >= 0.95 of the attention mass at <= 25% density.
  EXPECT_GE(recall, 0.95) << "density " << density;
  EXPECT_LE(density, 0.25);
  EXPECT_GT(recall, ashape_recall + 0.2) << "a_shape recall " << ashape_recall;
  std::cout << "planted vertical-slash: recall " << recall << " density " << density
            << " (a_shape recall " << ashape_recall << ")\n";
}

// ---------------------------------------------------------------------------------------------

TEST(VerticalSlashIndexTest, NonFiniteInputsGiveAValidIndex) {
  auto hp = RandomProblem(MakeShape({130}, {}, 2, 1, 64, DType::kF32), 3);
  std::vector<float> bad(64, std::numeric_limits<float>::quiet_NaN());
  testing::SetKRow(hp.get(), 17, 0, bad);
  std::vector<float> inf(64, std::numeric_limits<float>::infinity());
  testing::SetQRow(hp.get(), 129, 1, inf);
  VerticalSlashParams params;
  params.last_q = 8;
  params.vertical_size = 5;
  params.slash_size = 5;
  SparseIndex idx;
  ASSERT_TRUE(BuildVerticalSlashIndex(hp->problem(), params, {0, 1}, 32, &idx).ok());
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
}

TEST(VerticalSlashIndexTest, RejectsBadParameters) {
  auto hp = RandomProblem(MakeShape({64}, {}, 2, 1), 1);
  const AttentionProblem& p = hp->problem();
  SparseIndex idx;
  auto expect = [&](const VerticalSlashParams& params, int block_m, const std::vector<int>& heads,
                    absl::StatusCode code, const std::string& name) {
    const absl::Status s = BuildVerticalSlashIndex(p, params, heads, block_m, &idx);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  };
  VerticalSlashParams params;
  params.last_q = 0;
  expect(params, 64, {0}, absl::StatusCode::kInvalidArgument, "vertical_slash.last_q");
  params = VerticalSlashParams();
  params.vertical_size = -1;
  expect(params, 64, {0}, absl::StatusCode::kInvalidArgument, "vertical_slash.vertical_size");
  params = VerticalSlashParams();
  params.slash_size = -3;
  expect(params, 64, {0}, absl::StatusCode::kInvalidArgument, "vertical_slash.slash_size");
  params = VerticalSlashParams();
  params.forced_columns = -1;
  expect(params, 64, {0}, absl::StatusCode::kInvalidArgument, "vertical_slash.forced_columns");
  params = VerticalSlashParams();
  params.forced_diagonals = 0;
  expect(params, 64, {0}, absl::StatusCode::kInvalidArgument, "vertical_slash.forced_diagonals");
  params = VerticalSlashParams();
  expect(params, 0, {0}, absl::StatusCode::kInvalidArgument, "block_m");
  expect(params, 64, {2}, absl::StatusCode::kInvalidArgument, "heads[0]");

  AttentionProblem device = p;
  device.space = MemorySpace::kCuda;
  EXPECT_EQ(BuildVerticalSlashIndex(device, params, {0}, 64, &idx).code(),
            absl::StatusCode::kFailedPrecondition);
  AttentionProblem broken = p;
  broken.head_dim = 7;
  const absl::Status s = BuildVerticalSlashIndex(broken, params, {0}, 64, &idx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s;

  // Through the dispatcher too.
  MethodConfig config;
  config.method = Method::kVerticalSlash;
  config.vertical_slash.last_q = -2;
  EXPECT_NE(BuildSparseIndex(p, config, {0}, BuildOptions(), &idx)
                .message()
                .find("vertical_slash.last_q"),
            std::string::npos);
  EXPECT_TRUE(CpuBuilderAvailable(Method::kVerticalSlash));
}

}  // namespace
}  // namespace spattn
