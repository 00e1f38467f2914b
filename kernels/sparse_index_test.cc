#include "kernels/sparse_index.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kernels/builders/build_index.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/host_problem.h"

namespace spattn {
namespace {

using Ranges = std::vector<std::pair<int32_t, int32_t>>;

TEST(RowKeysTest, NormalizeMergesClipsAndDropsCoveredColumns) {
  RowKeys row;
  row.AddRange(10, 20);
  row.AddRange(15, 30);   // overlaps
  row.AddRange(30, 35);   // adjacent
  row.AddRange(50, 500);  // clipped to key_end
  row.AddRange(-5, 3);    // clipped to 0
  for (int c : {7, 3, 12, 40, 40, 45, 60, 2000}) row.AddCol(c);
  row.Normalize(/*key_end=*/100);
  EXPECT_EQ(row.ranges, (Ranges{{0, 3}, {10, 35}, {50, 100}}));
  // 3 touches [0, 3) but is not inside it.
  EXPECT_EQ(row.cols, (std::vector<int32_t>{3, 7, 40, 45}));
}

TEST(RowKeysTest, NormalizeTurnsLongColumnRunsIntoRanges) {
  RowKeys row;
  for (int c = 100; c < 120; ++c) row.AddCol(c);  // run of 20
  for (int c = 200; c < 205; ++c) row.AddCol(c);  // run of 5 stays columns
  row.AddRange(120, 130);                         // touches the run: merged
  row.Normalize(1000, /*min_run=*/16);
  EXPECT_EQ(row.ranges, (Ranges{{100, 130}}));
  EXPECT_EQ(row.cols, (std::vector<int32_t>{200, 201, 202, 203, 204}));
}

ProblemShape Shape(std::vector<int32_t> q, std::vector<int32_t> k, int hq = 2, int hkv = 1) {
  ProblemShape s;
  s.q_lens = std::move(q);
  s.k_lens = std::move(k);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = 64;
  return s;
}

Ranges RowRanges(const SparseIndex& idx, int slot, int block) {
  Ranges out;
  const int64_t r = idx.row(slot, block);
  for (int e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
    out.emplace_back(idx.range_start[e], idx.range_start[e] + idx.range_len[e]);
  }
  return out;
}

// Worked out by hand: S = 300, block_m = 64, sink 16, local 100.
TEST(AShapeIndexTest, HandCheckedBlocks) {
  HostProblem hp(Shape({300}, {}));
  AShapeParams params;
  params.sink_tokens = 16;
  params.local_tokens = 100;
  SparseIndex idx;
  ASSERT_TRUE(BuildAShapeIndex(hp.problem(), params, {0, 1}, 64, &idx).ok());
  ASSERT_EQ(idx.num_blocks(), 5);  // ceil(300 / 64)
  // Block 0: rows 0..63, window [-36, 64) -> [0, 64) swallows the sink.
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{0, 64}}));
  // Block 1: rows 64..127, window [64 - 99, 128) = [-35, 128) -> [0, 128).
  EXPECT_EQ(RowRanges(idx, 0, 1), (Ranges{{0, 128}}));
  // Block 2: rows 128..191, window [29, 192): sink [0, 16) stays separate.
  EXPECT_EQ(RowRanges(idx, 1, 2), (Ranges{{0, 16}, {29, 192}}));
  // Block 4: rows 256..299 (partial), window [157, 300).
  EXPECT_EQ(RowRanges(idx, 1, 4), (Ranges{{0, 16}, {157, 300}}));
  EXPECT_TRUE(ValidateSparseIndex(hp.problem(), idx).ok());
}

TEST(DenseIndexTest, ChunkedPrefillOffsetsPositions) {
  // 100 queries at the end of 300 keys: query 0 sits at position 200.
  HostProblem hp(Shape({100}, {300}));
  SparseIndex idx;
  ASSERT_TRUE(BuildDenseIndex(hp.problem(), {1}, 64, &idx).ok());
  ASSERT_EQ(idx.num_blocks(), 2);
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{0, 264}}));
  EXPECT_EQ(RowRanges(idx, 0, 1), (Ranges{{0, 300}}));
  EXPECT_EQ(ComputedPairs(hp.problem(), idx, 0), AllowedPairs(hp.problem()));
}

TEST(DenseIndexTest, ComputedPairsMatchesAllowedPairsOnVarlenBatch) {
  for (bool causal : {true, false}) {
    ProblemShape s = Shape({1, 63, 64, 65, 131}, {1, 100, 64, 200, 131});
    s.causal = causal;
    HostProblem hp(s);
    SparseIndex idx;
    ASSERT_TRUE(BuildDenseIndex(hp.problem(), {0}, 64, &idx).ok());
    ASSERT_TRUE(ValidateSparseIndex(hp.problem(), idx).ok());
    EXPECT_EQ(ComputedPairs(hp.problem(), idx, 0), AllowedPairs(hp.problem())) << causal;
  }
}

TEST(SparseIndexTest, ComputedPairsEqualsDensifiedMaskCount) {
  HostProblem hp(Shape({257, 97}, {300, 97}));
  AShapeParams params;
  params.sink_tokens = 4;
  params.local_tokens = 37;
  SparseIndex idx;
  ASSERT_TRUE(BuildAShapeIndex(hp.problem(), params, {0}, 32, &idx).ok());
  int64_t ones = 0;
  for (int b = 0; b < 2; ++b) {
    const std::vector<uint8_t> m = DensifyMask(hp.problem(), idx, 0, b);
    ones += std::accumulate(m.begin(), m.end(), int64_t{0});
  }
  EXPECT_EQ(ComputedPairs(hp.problem(), idx, 0), ones);
  EXPECT_LT(ones, AllowedPairs(hp.problem()));
}

TEST(SparseIndexTest, ValidateRejectsBrokenIndexes) {
  HostProblem hp(Shape({128}, {}));
  SparseIndex good;
  ASSERT_TRUE(BuildDenseIndex(hp.problem(), {0}, 64, &good).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp.problem(), good).ok());

  SparseIndex beyond_causal = good;
  beyond_causal.range_len[0] = 65;  // block 0's last query is at 63
  absl::Status s = ValidateSparseIndex(hp.problem(), beyond_causal);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block 0"), std::string::npos) << s;

  SparseIndex col_in_range = good;
  col_in_range.col_idx = {5};
  col_in_range.col_indptr = {0, 1, 1};
  s = ValidateSparseIndex(hp.problem(), col_in_range);
  EXPECT_NE(s.message().find("inside a range"), std::string::npos) << s;

  SparseIndex bad_head = good;
  bad_head.heads = {7};
  EXPECT_EQ(ValidateSparseIndex(hp.problem(), bad_head).code(), absl::StatusCode::kInvalidArgument);
}

// The per-slot check reads only its slot's rows, but still the index-wide shape.
TEST(SparseIndexTest, ValidateSlotChecksOneSlotAndTheShape) {
  HostProblem hp(Shape({128}, {}));
  SparseIndex two;
  ASSERT_TRUE(BuildDenseIndex(hp.problem(), {0, 1}, 64, &two).ok());
  ASSERT_EQ(two.num_heads(), 2);
  ASSERT_TRUE(ValidateSparseIndexSlot(hp.problem(), two, 0).ok());
  ASSERT_TRUE(ValidateSparseIndexSlot(hp.problem(), two, 1).ok());

  SparseIndex broken = two;
  broken.range_len[two.range_indptr[two.row(1, 0)]] = 65;  // slot 1, block 0: beyond causal
  EXPECT_TRUE(ValidateSparseIndexSlot(hp.problem(), broken, 0).ok());
  absl::Status s = ValidateSparseIndexSlot(hp.problem(), broken, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head slot 1, block 0"), std::string::npos) << s;
  EXPECT_EQ(ValidateSparseIndex(hp.problem(), broken).message(), s.message());

  EXPECT_EQ(ValidateSparseIndexSlot(hp.problem(), two, 2).code(),
            absl::StatusCode::kInvalidArgument);
  SparseIndex bad_head = two;
  bad_head.heads = {0, 7};
  EXPECT_EQ(ValidateSparseIndexSlot(hp.problem(), bad_head, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MethodConfigTest, ValidationNamesTheParameter) {
  MethodConfig c;
  c.method = Method::kVerticalSlash;
  c.vertical_slash.last_q = -1;
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vertical_slash.last_q"), std::string::npos) << s;

  c = MethodConfig();
  c.method = Method::kFlexPrefill;
  c.flex_prefill.gamma = 1.5f;
  EXPECT_NE(c.Validate().message().find("flex_prefill.gamma"), std::string::npos);

  c = MethodConfig();
  c.method = Method::kBlockSparse;
  c.block_sparse.block_size = 48;
  EXPECT_NE(c.Validate().message().find("block_sparse.block_size"), std::string::npos);

  EXPECT_EQ(ParseMethod("vertical_slash").value(), Method::kVerticalSlash);
  EXPECT_EQ(ParseMethod("nope").status().code(), absl::StatusCode::kInvalidArgument);
  for (Method m : kAllMethods) EXPECT_EQ(ParseMethod(MethodName(m)).value(), m);
}

TEST(ProblemTest, ValidateNamesTheField) {
  HostProblem hp(Shape({10}, {5}));
  absl::Status s = hp.problem().Validate();
  EXPECT_NE(s.message().find("cu_seqlens_q"), std::string::npos) << s;

  HostProblem gqa(Shape({10}, {}, 6, 4));
  s = gqa.problem().Validate();
  EXPECT_NE(s.message().find("num_q_heads"), std::string::npos) << s;

  HostProblem ok(Shape({10}, {}, 8, 2));
  ok.problem().softmax_scale = -1.f;
  EXPECT_NE(ok.problem().Validate().message().find("softmax_scale"), std::string::npos);
}

}  // namespace
}  // namespace spattn
