// sampled_lines index builder (issue 11): sampled rows, a hand-checked block, index invariants
// over awkward shapes, kernel equivalence under the densified mask, recall and density on planted
// structure and on the shared generator's head kinds (retrieval included), parameter errors.
#include "kernels/builders/sampled_lines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/builders/build_index.h"
#include "kernels/builders/testing/method_testing.h"
#include "kernels/fidelity.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

using method_testing::AllHeads;
using method_testing::AwkwardShapes;
using method_testing::CheckIndexesAcrossShapes;
using method_testing::Describe;
using method_testing::GeneratorWorkload;
using method_testing::KernelCheckShapes;
using method_testing::KernelMatchesMaskedReference;
using method_testing::RandomProblem;
using method_testing::RowString;

TEST(SampledLinesTest, SampledRowsSpreadOverTheBlock) {
  EXPECT_EQ(SampledLinesRows(0, 64, 2, false), (std::vector<int>{16, 48}));
  EXPECT_EQ(SampledLinesRows(64, 128, 1, false), (std::vector<int>{96}));
  EXPECT_EQ(SampledLinesRows(0, 64, 4, false), (std::vector<int>{8, 24, 40, 56}));
  EXPECT_EQ(SampledLinesRows(10, 11, 3, false), (std::vector<int>{10}));  // one row: once
  EXPECT_EQ(SampledLinesRows(5, 5, 2, false), (std::vector<int>{}));
}

TEST(SampledLinesTest, EdgeRowsIncludeTheBlocksFirstAndLastRows) {
  EXPECT_EQ(SampledLinesRows(0, 64, 2, true), (std::vector<int>{0, 63}));
  EXPECT_EQ(SampledLinesRows(64, 128, 3, true), (std::vector<int>{64, 95, 127}));
  EXPECT_EQ(SampledLinesRows(0, 64, 4, true), (std::vector<int>{0, 21, 42, 63}));
  EXPECT_EQ(SampledLinesRows(64, 128, 1, true), (std::vector<int>{96}));  // one: the centre
  EXPECT_EQ(SampledLinesRows(10, 12, 3, true), (std::vector<int>{10, 11}));
  EXPECT_EQ(SampledLinesRows(10, 11, 2, true), (std::vector<int>{10}));
  EXPECT_EQ(SampledLinesRows(5, 5, 2, true), (std::vector<int>{}));
}

// Query i attends (mass ~1) to key i - 20 only: q_i = L e_{i-20}, k_j = e_j. Every sampled row
// puts its mass on offset 20, which the pooled evidence explains as a diagonal (D(20) ~ 1 while
// each key is hit by one sampled row of many), so each block keeps the range of offset 20 and
// nothing else besides the forced sink/local keys.
TEST(SampledLinesTest, HandCheckedSlash) {
  auto hp = method_testing::OneKeyPerRow(256, 20);
  SampledLinesParams params;
  params.gamma = 0.9f;
  params.rows_per_block = 2;
  params.edge_rows = false;
  params.sink_tokens = 0;
  params.local_tokens = 1;   // the block's own keys [first_pos, last_pos]
  params.short_floor = 0.f;  // diagonal_floor at this length too
  SparseIndex idx;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  // Block 4 = rows 64..79: offset 20 -> keys [44, 60), local [64, 80).
  EXPECT_EQ(RowString(idx, 0, 4), "[44,60)[64,80)");
  EXPECT_EQ(RowString(idx, 0, 15), "[220,236)[240,256)");
  // The cost test: the range (16 keys per row) holds D(20) ~ 1 spread as ~1/16 per key over the
  // block's rows, the kept entries weigh ~1/2 (mass 1 over 2 sampled rows): diagonal_cost 0.1
  // (bar 0.1 x 16 x ~0.5 < D) keeps the range, 1 (bar ~8) keeps the sampled keys as columns.
  params.diagonal_cost = 0.1f;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  EXPECT_EQ(RowString(idx, 0, 4), "[44,60)[64,80)");
  params.diagonal_cost = 1.f;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  EXPECT_EQ(RowString(idx, 0, 4), "[64,80) c48 c56");
  params.diagonal_cost = 0.f;
  // clip_diagonals: both sampled rows (68, 76) see offset 20; their spans (rows 64..72, 73..79)
  // make up the block, so the range is the whole block's again.
  params.clip_diagonals = true;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  EXPECT_EQ(RowString(idx, 0, 4), "[44,60)[64,80)");
  params.clip_diagonals = false;
  // A diagonal floor above D(20) * k_len (~256) leaves the sampled rows' keys as columns: rows
  // 68 and 76 of block 4 keep keys 48 and 56.
  params.diagonal_floor = 1000.f;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  EXPECT_EQ(RowString(idx, 0, 4), "[64,80) c48 c56");
  // Edge rows: rows 64 and 79 keep keys 44 and 59.
  params.edge_rows = true;
  ASSERT_TRUE(BuildSampledLinesIndex(hp->problem(), params, {0}, 16, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  EXPECT_EQ(RowString(idx, 0, 4), "[64,80) c44 c59");
}

// clip_diagonals' spans (one function with the GPU twin): each sampled row stands for the rows
// nearer to it than to its neighbours (ties to the earlier one); together they cover the block
// once.
TEST(SampledLinesTest, RowSpansSplitTheBlockBetweenTheSampledRows) {
  auto span = [](int rel, int n, int s, bool edges) {
    int lo, hi;
    SampledLinesRowSpan(rel, n, s, edges, &lo, &hi);
    return std::to_string(lo) + ".." + std::to_string(hi);
  };
  EXPECT_EQ(span(0, 128, 3, true), "0..31");
  EXPECT_EQ(span(63, 128, 3, true), "32..95");
  EXPECT_EQ(span(127, 128, 3, true), "96..127");
  EXPECT_EQ(span(16, 64, 2, false), "0..32");
  EXPECT_EQ(span(48, 64, 2, false), "33..63");
  EXPECT_EQ(span(96 - 64, 64, 1, true), "0..63");  // one row: the whole block
  for (int n : {1, 2, 5, 64, 100, 128}) {
    for (int s : {1, 2, 3, 4, 7}) {
      for (bool edges : {false, true}) {
        int next = 0;
        for (int r : SampledLinesRows(0, n, s, edges)) {
          int lo, hi;
          SampledLinesRowSpan(r, n, s, edges, &lo, &hi);
          EXPECT_EQ(lo, next) << n << " " << s << " " << edges << " row " << r;
          EXPECT_LE(lo, r);
          EXPECT_GE(hi, r);
          next = hi + 1;
        }
        EXPECT_EQ(next, n) << n << " " << s << " " << edges;
      }
    }
  }
}

// clip_diagonals keeps the same columns and, of each diagonal's range, the rows its sampled rows
// stand for: every row's keys are a subset of the unclipped row's, at a lower density on slash
// heads (lines that only some sampled rows see).
TEST(SampledLinesTest, ClippedDiagonalsKeepASubsetOfTheBlocksRanges) {
  Workload w = GeneratorWorkload("slash");
  SampledLinesParams whole, clipped;
  whole.clip_diagonals = false;
  clipped.clip_diagonals = true;
  SparseIndex a, b;
  ASSERT_TRUE(BuildSampledLinesIndex(w.problem(), whole, AllHeads(w.problem()), 64, &a).ok());
  ASSERT_TRUE(BuildSampledLinesIndex(w.problem(), clipped, AllHeads(w.problem()), 64, &b).ok());
  ASSERT_TRUE(ValidateSparseIndex(w.problem(), b).ok());
  auto keys = [](const SparseIndex& x, int slot, int blk) {
    std::vector<int64_t> k;
    const int64_t r = x.row(slot, blk);
    for (int i = x.range_indptr[r]; i < x.range_indptr[r + 1]; ++i) {
      for (int64_t j = x.range_start[i]; j < x.range_start[i] + x.range_len[i]; ++j) k.push_back(j);
    }
    for (int i = x.col_indptr[r]; i < x.col_indptr[r + 1]; ++i) k.push_back(x.col_idx[i]);
    std::sort(k.begin(), k.end());
    return k;
  };
  int64_t na = 0, nb = 0;
  for (int slot = 0; slot < a.num_heads(); ++slot) {
    for (int blk = 0; blk < a.num_blocks(); ++blk) {
      const std::vector<int64_t> ka = keys(a, slot, blk), kb = keys(b, slot, blk);
      EXPECT_TRUE(std::includes(ka.begin(), ka.end(), kb.begin(), kb.end()))
          << "slot " << slot << " block " << blk;
      na += static_cast<int64_t>(ka.size());
      nb += static_cast<int64_t>(kb.size());
    }
  }
  EXPECT_LT(nb, na);
  const FidelitySummary f = SummarizeFidelity(w.problem(), b, 128, 1).value();
  EXPECT_GE(f.recall_mean, 0.95) << "density " << f.density_mean;
}

// The diagonal floor (one function with the GPU twin): short_floor below 64K keys, else
// diagonal_floor, in uniform shares.
TEST(SampledLinesTest, ShortSequencesTakeTheShortFloor) {
  EXPECT_EQ(SampledLinesFloor(7.f, 9.f, 32768), 9.f / 32768.f);
  EXPECT_EQ(SampledLinesFloor(7.f, 9.f, 65535), 9.f / 65535.f);
  EXPECT_EQ(SampledLinesFloor(7.f, 9.f, 65536), 7.f / 65536.f);
  EXPECT_EQ(SampledLinesFloor(7.f, 9.f, 131072), 7.f / 131072.f);
  EXPECT_EQ(SampledLinesFloor(7.f, 0.f, 4096), 7.f / 4096.f);  // off
  SampledLinesParams d;
  EXPECT_TRUE(d.clip_diagonals);
  EXPECT_EQ(d.diagonal_floor, 7.f);
  EXPECT_EQ(d.short_floor, 9.f);
}

// The cost bar (one function with the GPU twin): cost x rows x the lower edge of bin thr; bin
// 257's edge is 1.0 (fp32 bits 1016 << 20), each bin down is 2^(1/8) lower at octave edges.
TEST(SampledLinesTest, DiagonalBarIsCostTimesRowsTimesTheBinEdge) {
  EXPECT_EQ(SampledLinesBinEdge(kSampledLinesBins - 1), 1.f);
  EXPECT_EQ(SampledLinesBinEdge(kSampledLinesBins - 1 - 8), 0.5f);
  EXPECT_EQ(SampledLinesDiagonalBar(0.5f, 128, kSampledLinesBins - 1), 64.f);
  EXPECT_EQ(SampledLinesDiagonalBar(0.25f, 64, kSampledLinesBins - 9), 8.f);
  EXPECT_EQ(SampledLinesBin(SampledLinesBinEdge(100)), 100);
  EXPECT_EQ(SampledLinesDiagonalBar(0.f, 128, 100), 0.f);                // off
  EXPECT_EQ(SampledLinesDiagonalBar(1.f, 128, kSampledLinesBins), 0.f);  // nothing kept
  EXPECT_EQ(SampledLinesDiagonalBar(1.f, 128, -1), 0.f);
}

TEST(SampledLinesTest, IndexInvariantsOnAwkwardShapes) {
  SampledLinesParams params;
  params.gamma = 0.8f;
  for (int block_m : {16, 64}) {
    EXPECT_EQ(CheckIndexesAcrossShapes(AwkwardShapes(), 40,
                                       [&](const HostProblem& hp, uint64_t, SparseIndex* idx) {
                                         return BuildSampledLinesIndex(hp.problem(), params,
                                                                       AllHeads(hp.problem()),
                                                                       block_m, idx);
                                       }),
              "")
        << "block_m " << block_m;
  }
  // A subset of heads, through the dispatcher.
  ProblemShape s;
  s.q_lens = {100};
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  auto hp = RandomProblem(s, 3);
  MethodConfig cfg;
  cfg.method = Method::kSampledLines;
  SparseIndex idx;
  ASSERT_TRUE(BuildSparseIndex(hp->problem(), cfg, {5, 2}, BuildOptions(), &idx).ok());
  EXPECT_EQ(idx.heads, (std::vector<int32_t>{5, 2}));
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
  EXPECT_TRUE(CpuBuilderAvailable(Method::kSampledLines));
}

TEST(SampledLinesTest, KernelMatchesReferenceUnderDensifiedMask) {
  SampledLinesParams params;
  params.gamma = 0.3f;  // sparse enough to drop keys of random heads
  params.sink_tokens = 1;
  params.local_tokens = 16;
  EXPECT_EQ(CheckIndexesAcrossShapes(
                KernelCheckShapes(), 70,
                [&](const HostProblem& hp, uint64_t, SparseIndex* idx) {
                  return BuildSampledLinesIndex(hp.problem(), params, AllHeads(hp.problem()), 16,
                                                idx);
                },
                KernelMatchesMaskedReference(/*max_density=*/0.95,
                                             /*needs_columns=*/true)),
            "");
}

// Columns and slashes planted in random heads: the lines are found per block and kept at a small
// density (the kept slashes are 64-key ranges per block, the columns single keys).
TEST(SampledLinesTest, RecallOnPlantedColumnsAndSlashes) {
  auto hp = method_testing::PlantedColumnsAndSlashes();
  SparseIndex idx;
  ASSERT_TRUE(
      BuildSampledLinesIndex(hp->problem(), SampledLinesParams(), AllHeads(hp->problem()), 64, &idx)
          .ok());
  EXPECT_EQ(method_testing::CheckRecallAndDensity(hp->problem(), idx, 7, 0.95, 0.2,
                                                  "planted columns/slashes"),
            "");
}

// The shared generator's head kinds (S = 4096, 4 q heads) at the defaults; recall over 128
// sampled rows. Retrieval heads keep their query-specific keys (per-block samples) at a density
// no fixed vertical/slash budget reaches them with; a retrieval group wholly between two sampled
// rows of a block is missed by that block (the method's estimate error on rows it did not
// sample; with 3 edge rows only groups shorter than half a block can be).
// Measured (defaults: 3 edge rows, clipped diagonals, floor 9 at this length): vertical_slash
// 0.969 at density 0.115, slash 0.964 at 0.157, sink_local 0.967 at 0.066, retrieval 0.967 at
// 0.064, topic_blocks 0.963 at 0.146 (whole-block diagonals, floor 7: 0.971 / 0.12, 0.966 / 0.16,
// 0.972 / 0.07, 0.967 / 0.06, 0.964 / 0.15; 2 centred rows, floor 3: 0.966 / 0.11, 0.964 / 0.15,
// 0.977 / 0.07, 0.921 / 0.06, 0.934 / 0.13).
TEST(SampledLinesTest, RecallOnGeneratorWorkloads) {
  struct Want {
    const char* kind;
    double min_recall, max_density;
  };
  for (const Want& want :
       {Want{"vertical_slash", 0.95, 0.2}, Want{"slash", 0.95, 0.25}, Want{"sink_local", 0.95, 0.1},
        Want{"retrieval", 0.95, 0.1}, Want{"topic_blocks", 0.95, 0.2}}) {
    Workload w = GeneratorWorkload(want.kind);
    SparseIndex idx;
    ASSERT_TRUE(
        BuildSampledLinesIndex(w.problem(), SampledLinesParams(), AllHeads(w.problem()), 64, &idx)
            .ok());
    const FidelitySummary f = SummarizeFidelity(w.problem(), idx, 128, 1).value();
    std::printf("sampled_lines %s: recall %.4f density %.4f\n", want.kind, f.recall_mean,
                f.density_mean);
    EXPECT_GE(f.recall_mean, want.min_recall) << want.kind << " density " << f.density_mean;
    EXPECT_LE(f.density_mean, want.max_density) << want.kind << " recall " << f.recall_mean;
  }
}

// Retrieval groups switch their target keys at arbitrary rows; a group's part of a block that
// lies before the first (after the last) centred sampled row is missed by the block, and edge rows
// sample every part that touches the block's ends.
TEST(SampledLinesTest, EdgeRowsCatchRetrievalGroupsAtBlockEnds) {
  Workload w = GeneratorWorkload("retrieval");
  SampledLinesParams centred, edges;
  centred.rows_per_block = edges.rows_per_block = 2;
  centred.edge_rows = false;
  edges.edge_rows = true;
  double recall[2];
  for (int e = 0; e < 2; ++e) {
    SparseIndex idx;
    ASSERT_TRUE(
        BuildSampledLinesIndex(w.problem(), e ? edges : centred, AllHeads(w.problem()), 64, &idx)
            .ok());
    const FidelitySummary f = SummarizeFidelity(w.problem(), idx, 128, 1).value();
    std::printf("sampled_lines retrieval, %s rows: recall %.4f density %.4f\n",
                e ? "edge" : "centred", f.recall_mean, f.density_mean);
    recall[e] = f.recall_mean;
  }
  EXPECT_GT(recall[1], recall[0] + 0.01);
}

// Per-head gammas (BuildOptions::sampled_lines_gammas, what lets the worker build heads of
// different gammas at once): each head's rows are those of a build of that head alone at its
// gamma, in any slot order, through BuildSparseIndex too; heads at other gammas than the config's
// differ from the single-gamma build.
TEST(SampledLinesTest, PerHeadGammasEqualEachHeadsOwnBuild) {
  const float kGammas[] = {0.95f, 0.9646f, 0.5f, 0.9823f};  // s24's four, one made far apart
  for (const char* kind : {"vertical_slash", "retrieval"}) {
    Workload w = GeneratorWorkload(kind);
    const AttentionProblem& p = w.problem();
    std::vector<int> heads = AllHeads(p);
    std::reverse(heads.begin(), heads.end());
    std::vector<float> gammas;
    for (size_t i = 0; i < heads.size(); ++i) gammas.push_back(kGammas[i % 4]);
    for (int block_m : {64, 128}) {
      SparseIndex mixed, single, via_options;
      ASSERT_TRUE(
          BuildSampledLinesIndex(p, SampledLinesParams(), heads, block_m, &mixed, gammas).ok());
      ASSERT_TRUE(ValidateSparseIndex(p, mixed).ok());
      ASSERT_TRUE(BuildSampledLinesIndex(p, SampledLinesParams(), heads, block_m, &single).ok());
      MethodConfig config;
      config.method = Method::kSampledLines;
      BuildOptions bo;
      bo.sampled_lines_block_m = block_m;
      bo.sampled_lines_gammas = gammas;
      ASSERT_TRUE(BuildSparseIndex(p, config, heads, bo, &via_options).ok());
      EXPECT_EQ(via_options.col_idx, mixed.col_idx);
      EXPECT_EQ(via_options.range_start, mixed.range_start);
      EXPECT_EQ(via_options.range_len, mixed.range_len);
      for (int slot = 0; slot < mixed.num_heads(); ++slot) {
        SampledLinesParams own;
        own.gamma = gammas[slot];
        SparseIndex alone;
        ASSERT_TRUE(BuildSampledLinesIndex(p, own, {heads[slot]}, block_m, &alone).ok());
        ASSERT_EQ(alone.num_blocks(), mixed.num_blocks());
        int differ_from_single = 0;
        for (int b = 0; b < mixed.num_blocks(); ++b) {
          ASSERT_EQ(RowString(mixed, slot, b), RowString(alone, 0, b))
              << kind << " block_m " << block_m << " slot " << slot << " gamma " << own.gamma
              << " block " << b;
          differ_from_single += RowString(mixed, slot, b) != RowString(single, slot, b);
        }
        if (own.gamma == SampledLinesParams().gamma) {
          EXPECT_EQ(differ_from_single, 0) << kind << " slot " << slot;
        } else if (own.gamma == 0.5f) {
          EXPECT_GT(differ_from_single, 0) << kind << " slot " << slot;
        }
      }
    }
  }
  // One gamma per head, each in (0, 1].
  Workload w = GeneratorWorkload("slash");
  SparseIndex idx;
  absl::Status st =
      BuildSampledLinesIndex(w.problem(), SampledLinesParams(), {0, 1}, 64, &idx, {0.9f});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("sampled_lines_gammas"), std::string::npos) << st;
  st = BuildSampledLinesIndex(w.problem(), SampledLinesParams(), {0, 1}, 64, &idx, {0.9f, 0.f});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("sampled_lines_gammas[1]"), std::string::npos) << st;
}

// Heads whose configs differ only in sampled_lines' gamma share a build (SameBuildGroup,
// BuildGroupKey); BuildOptionsForHeads sets the gammas only where they differ.
TEST(SampledLinesTest, GammaIsAPerHeadParameterOfOneBuild) {
  MethodConfig a, b;
  a.method = b.method = Method::kSampledLines;
  a.sampled_lines.gamma = 0.95f;
  b.sampled_lines.gamma = 0.975f;
  EXPECT_TRUE(SameBuildGroup(a, b));
  EXPECT_FALSE(SameGroupConfig(a, b));
  EXPECT_EQ(BuildGroupKey(a), BuildGroupKey(b));
  MethodConfig c = b;
  c.sampled_lines.diagonal_floor = 5.f;  // another parameter: another build
  EXPECT_FALSE(SameBuildGroup(a, c));
  EXPECT_NE(BuildGroupKey(a), BuildGroupKey(c));
  MethodConfig f1, f2;  // flex_prefill's gamma is not per head
  f1.method = f2.method = Method::kFlexPrefill;
  f2.flex_prefill.gamma = 0.99f;
  EXPECT_FALSE(SameBuildGroup(f1, f2));
  EXPECT_NE(BuildGroupKey(f1), BuildGroupKey(f2));

  BuildOptions base;
  base.block_m = 128;
  base.sampled_lines_gammas = {0.1f};  // replaced
  EXPECT_TRUE(BuildOptionsForHeads(base, {a, a}).sampled_lines_gammas.empty());
  EXPECT_EQ(BuildOptionsForHeads(base, {a, b, a}).sampled_lines_gammas,
            (std::vector<float>{0.95f, 0.975f, 0.95f}));
  EXPECT_EQ(BuildOptionsForHeads(base, {a, b}).block_m, 128);
  EXPECT_TRUE(BuildOptionsForHeads(base, {f1, f2}).sampled_lines_gammas.empty());
}

TEST(SampledLinesTest, RejectsBadParametersByName) {
  ProblemShape s;
  s.q_lens = {10};
  auto hp = RandomProblem(s, 1);
  MethodConfig base;
  base.method = Method::kSampledLines;
  EXPECT_EQ(method_testing::CheckBadSettingsNamed(
                hp->problem(), base,
                {
                    {[](MethodConfig* c) { c->sampled_lines.gamma = 0.f; }, "sampled_lines.gamma"},
                    {[](MethodConfig* c) { c->sampled_lines.gamma = 1.5f; }, "sampled_lines.gamma"},
                    {[](MethodConfig* c) { c->sampled_lines.rows_per_block = 0; },
                     "sampled_lines.rows_per_block"},
                    {[](MethodConfig* c) { c->sampled_lines.last_q = 0; }, "sampled_lines.last_q"},
                    {[](MethodConfig* c) { c->sampled_lines.sink_tokens = -1; },
                     "sampled_lines.sink_tokens"},
                    {[](MethodConfig* c) { c->sampled_lines.local_tokens = -1; },
                     "sampled_lines.local_tokens"},
                    {[](MethodConfig* c) { c->sampled_lines.diagonal_floor = 0.f; },
                     "sampled_lines.diagonal_floor"},
                    {[](MethodConfig* c) { c->sampled_lines.diagonal_cost = -1.f; },
                     "sampled_lines.diagonal_cost"},
                }),
            "");
  SparseIndex idx;
  const absl::Status st = BuildSampledLinesIndex(hp->problem(), SampledLinesParams(), {0}, 0, &idx);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("block_m"), std::string::npos) << st;
}

}  // namespace
}  // namespace spattn
