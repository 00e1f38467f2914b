#include "kernels/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/host_problem.h"

namespace spattn {
namespace {

std::vector<int> AllHeads(const AttentionProblem& p) {
  std::vector<int> h(p.num_q_heads);
  for (int i = 0; i < p.num_q_heads; ++i) h[i] = i;
  return h;
}

ProblemShape Shape(std::vector<int32_t> q, std::vector<int32_t> k, int hq, int hkv, int d,
                   DType t) {
  ProblemShape s;
  s.q_lens = std::move(q);
  s.k_lens = std::move(k);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.dtype = t;
  return s;
}

TEST(SampleQueryRowsTest, StratifiedDeterministicAndCoversBatch) {
  HostProblem hp(Shape({100, 37, 300}, {120, 37, 310}, 1, 1, 8, DType::kF32));
  const AttentionProblem& p = hp.problem();
  const auto a = SampleQueryRows(p, 50, 7);
  const auto b = SampleQueryRows(p, 50, 7);
  const auto c = SampleQueryRows(p, 50, 8);
  ASSERT_EQ(a.size(), 50u);
  bool differs = false;
  std::set<int> seqs;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].seq, b[i].seq);
    EXPECT_EQ(a[i].row, b[i].row);
    differs |= a[i].row != c[i].row || a[i].seq != c[i].seq;
    ASSERT_GE(a[i].row, 0);
    ASSERT_LT(a[i].row, p.q_len(a[i].seq));
    // Stratum i of total 437 rows.
    const int64_t token = p.cu_seqlens_q[a[i].seq] + a[i].row;
    EXPECT_GE(token, 437 * static_cast<int64_t>(i) / 50);
    EXPECT_LT(token, 437 * static_cast<int64_t>(i + 1) / 50);
    seqs.insert(a[i].seq);
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(seqs.size(), 3u);
  EXPECT_EQ(SampleQueryRows(p, 0, 1).size(), 437u);
  EXPECT_EQ(SampleQueryRows(p, 10000, 1).size(), 437u);
}

TEST(RelativeL2ErrorTest, KnownValuesAndSpecialCases) {
  EXPECT_DOUBLE_EQ(RelativeL2Error({1, 2, 3}, {1, 2, 3}), 0.0);
  // ||(3,4) - (0,0)|| ... want (3, 4): got (0, 0) -> 1; got (3, 0) -> 4/5.
  EXPECT_DOUBLE_EQ(RelativeL2Error({0, 0}, {3, 4}), 1.0);
  EXPECT_DOUBLE_EQ(RelativeL2Error({3, 0}, {3, 4}), 0.8);
  EXPECT_TRUE(std::isnan(RelativeL2Error({NAN, 0}, {3, 4})));
  EXPECT_TRUE(std::isnan(RelativeL2Error({1, 0}, {NAN, 4})));
  EXPECT_TRUE(std::isnan(RelativeL2Error({1, 0, 0}, {3, 4})));
  EXPECT_DOUBLE_EQ(RelativeL2Error({0, 0}, {0, 0}), 0.0);
  EXPECT_TRUE(std::isinf(RelativeL2Error({1, 0}, {0, 0})));
}

struct RecallCase {
  std::vector<int32_t> q_lens, k_lens;
  int hq, hkv;
  DType dtype;
  bool causal;
};

std::string Describe(const RecallCase& c) {
  std::string s = "q_lens=";
  for (int x : c.q_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " k_lens=");
  for (int x : c.k_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " hq=", c.hq, " hkv=", c.hkv, " dtype=", DTypeName(c.dtype),
                  " causal=", c.causal);
  return s;
}

TEST(AttentionMassRecallTest, DenseIndexHasRecallOne) {
  const std::vector<RecallCase> cases = {
      {{200}, {200}, 2, 1, DType::kBF16, true},
      {{64, 1, 130}, {100, 1, 300}, 8, 2, DType::kF16, true},  // varlen + chunked prefill
      {{77}, {150}, 4, 4, DType::kF32, false},
  };
  for (const RecallCase& c : cases) {
    HostProblem hp(Shape(c.q_lens, c.k_lens, c.hq, c.hkv, 64, c.dtype));
    hp.problem().causal = c.causal;
    hp.FillRandom(3, 2.f);  // stddev 2: peaked softmax, so a missed key would show.
    SparseIndex dense;
    ASSERT_TRUE(BuildDenseIndex(hp.problem(), AllHeads(hp.problem()), 64, &dense).ok());
    for (int slot = 0; slot < c.hq; ++slot) {
      auto r = AttentionMassRecall(hp.problem(), dense, slot, 40, 1);
      ASSERT_TRUE(r.ok()) << Describe(c) << ": " << r.status();
      EXPECT_NEAR(*r, 1.0, 1e-12) << Describe(c) << " slot " << slot;
      EXPECT_DOUBLE_EQ(Density(hp.problem(), dense, slot), 1.0) << Describe(c);
    }
  }
}

// One sequence, fp32, head_dim 8. Query and key vectors are along e0 so that logit(j) =
// scale * q0 * k0(j) exactly: key 0 gets logit L, every other key logit 0. An A-shape index with
// one sink and one local key selects {0, pos}: for the row at position p >= 1 the selected mass
// is (e^L + 1) / (e^L + p); for p = 0 it is 1.
TEST(AttentionMassRecallTest, PlantedLogitsMatchClosedForm) {
  const int S = 50;
  HostProblem hp(Shape({S}, {S}, 1, 1, 8, DType::kF32));
  AttentionProblem& p = hp.problem();
  p.softmax_scale = 1.f;
  const double L = 3.0;
  float* q = reinterpret_cast<float*>(hp.q_bytes().data());
  float* k = reinterpret_cast<float*>(hp.k_bytes().data());
  for (int t = 0; t < S; ++t) {
    q[t * 8] = 1.f;
    k[t * 8] = t == 0 ? static_cast<float>(L) : 0.f;
  }
  SparseIndex idx;
  AShapeParams params;
  params.sink_tokens = 1;
  params.local_tokens = 1;
  ASSERT_TRUE(BuildAShapeIndex(p, params, {0}, 1, &idx).ok());  // block_m 1: exact per row
  double want = 1.0;                                            // row 0
  for (int pos = 1; pos < S; ++pos) want += (std::exp(L) + 1) / (std::exp(L) + pos);
  want /= S;
  auto got = AttentionMassRecall(p, idx, 0, 0, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-12);

  // The same key set as columns of a hand-built index, in blocks of 16 rows: the block's keys
  // are {0} plus its rows' positions; every row also sees the later rows' positions of its block
  // only when causal allows, i.e. never. So a row at p selects key 0, p and the earlier rows of
  // its block: mass (e^L + 1 + (p mod 16)) / (e^L + p), minus double counting at p mod 16 = 0.
  SparseIndex cols;
  InitSparseIndex(p, {0}, 16, &cols);
  std::vector<RowKeys> rows(cols.num_rows());
  for (int b = 0; b < cols.num_blocks(); ++b) {
    const BlockGeometry g = GetBlockGeometry(p, cols, b);
    rows[b].AddCol(0);
    for (int pos = g.first_pos; pos <= g.last_pos; pos += 2) rows[b].AddCol(pos);
    for (int pos = g.first_pos + 1; pos <= g.last_pos; pos += 2) rows[b].AddCol(pos);
    rows[b].Normalize(g.key_end, /*min_run=*/1000);  // keep them as columns
  }
  CompactRows(&rows, &cols);
  ASSERT_TRUE(ValidateSparseIndex(p, cols).ok());
  ASSERT_GT(cols.col_idx.size(), 0u);
  double want2 = 0;
  for (int pos = 0; pos < S; ++pos) {
    const int block_first = pos / 16 * 16;
    // Selected keys: 0 and [block_first, pos].
    double mass = std::exp(L) * 1.0;  // key 0
    const int lo = std::max(1, block_first);
    mass += pos >= lo ? (pos - lo + 1) : 0;
    const double total = std::exp(L) + pos;
    want2 += mass / total;
  }
  want2 /= S;
  auto got2 = AttentionMassRecall(p, cols, 0, 0, 0);
  ASSERT_TRUE(got2.ok()) << got2.status();
  EXPECT_NEAR(*got2, want2, 1e-12);
}

TEST(DensityTest, MatchesDensifiedMaskCount) {
  const std::vector<RecallCase> cases = {
      {{300}, {300}, 2, 1, DType::kBF16, true},
      {{64, 1, 130}, {100, 1, 300}, 4, 2, DType::kBF16, true},
      {{90, 45}, {200, 45}, 2, 2, DType::kF32, false},
  };
  for (const RecallCase& c : cases) {
    HostProblem hp(Shape(c.q_lens, c.k_lens, c.hq, c.hkv, 64, c.dtype));
    AttentionProblem& p = hp.problem();
    p.causal = c.causal;
    AShapeParams params;
    params.sink_tokens = 7;
    params.local_tokens = 33;
    SparseIndex idx;
    ASSERT_TRUE(BuildAShapeIndex(p, params, AllHeads(p), 32, &idx).ok());
    for (int slot = 0; slot < c.hq; ++slot) {
      int64_t ones = 0;
      for (int b = 0; b < p.batch(); ++b) {
        for (uint8_t m : DensifyMask(p, idx, slot, b)) ones += m;
      }
      EXPECT_NEAR(Density(p, idx, slot),
                  static_cast<double>(ones) / static_cast<double>(AllowedPairs(p)), 1e-15)
          << Describe(c);
      EXPECT_LT(Density(p, idx, slot), 1.0) << Describe(c);
    }
  }
}

TEST(SummarizeFidelityTest, PerSlotAndAggregates) {
  HostProblem hp(Shape({256, 100}, {256, 180}, 4, 2, 64, DType::kBF16));
  AttentionProblem& p = hp.problem();
  hp.FillRandom(11, 1.5f);
  AShapeParams params;
  params.sink_tokens = 4;
  params.local_tokens = 32;
  SparseIndex idx;
  ASSERT_TRUE(BuildAShapeIndex(p, params, {3, 1}, 64, &idx).ok());
  auto sum = SummarizeFidelity(p, idx, 64, 5);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_EQ(sum->slots.size(), 2u);
  double mean = 0, mn = 1;
  for (int slot = 0; slot < 2; ++slot) {
    const SlotFidelity& f = sum->slots[slot];
    EXPECT_EQ(f.slot, slot);
    EXPECT_EQ(f.head, idx.heads[slot]);
    auto r = AttentionMassRecall(p, idx, slot, 64, 5);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(f.recall_mean, *r, 1e-12);
    EXPECT_LE(f.recall_min, f.recall_mean);
    EXPECT_GT(f.recall_mean, 0.0);
    EXPECT_LT(f.recall_mean, 1.0);
    EXPECT_DOUBLE_EQ(f.density, Density(p, idx, slot));
    mean += f.recall_mean / 2;
    mn = std::min(mn, f.recall_min);
  }
  EXPECT_NEAR(sum->recall_mean, mean, 1e-15);
  EXPECT_DOUBLE_EQ(sum->recall_min, mn);
  EXPECT_LE(sum->density_min, sum->density_mean);
  EXPECT_GE(sum->density_max, sum->density_mean);
}

TEST(ExactRowSampleTest, ScoresMatchStreamingRecallAndOutputErrorIsRounding) {
  HostProblem hp(Shape({200, 90}, {260, 90}, 4, 2, 64, DType::kBF16));
  AttentionProblem& p = hp.problem();
  hp.FillRandom(21, 1.f);
  ExactRowSample::Options opt;
  opt.sample_rows = 50;
  opt.seed = 9;
  auto sample = ExactRowSample::Compute(p, {}, opt);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ((*sample)->rows().size(), 50u);
  AShapeParams params;
  params.sink_tokens = 4;
  params.local_tokens = 40;
  SparseIndex ashape, dense;
  ASSERT_TRUE(BuildAShapeIndex(p, params, AllHeads(p), 64, &ashape).ok());
  ASSERT_TRUE(BuildDenseIndex(p, AllHeads(p), 64, &dense).ok());
  for (int slot = 0; slot < 4; ++slot) {
    auto f = (*sample)->Score(p, ashape, slot);
    ASSERT_TRUE(f.ok()) << f.status();
    auto r = AttentionMassRecall(p, ashape, slot, 50, 9);
    ASSERT_TRUE(r.ok());
    // Stored probabilities are floats: agreement to float precision.
    EXPECT_NEAR(f->recall_mean, *r, 1e-6);
    auto fd = (*sample)->Score(p, dense, slot);
    ASSERT_TRUE(fd.ok());
    EXPECT_NEAR(fd->recall_mean, 1.0, 1e-5);
    EXPECT_NEAR(fd->recall_min, 1.0, 1e-5);
  }
  // The CPU kernel's dense bf16 output differs from the exact one by output rounding only.
  ASSERT_TRUE(SparseAttentionCpu(p, dense).ok());
  auto err = (*sample)->OutputError(p, {});
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_GT(*err, 0.0);
  EXPECT_LT(*err, 2.0 / 256);
  // A zero output is off by exactly 100%.
  std::fill(hp.o_bytes().begin(), hp.o_bytes().end(), 0);
  auto err0 = (*sample)->OutputError(p, {1, 2});
  ASSERT_TRUE(err0.ok());
  EXPECT_DOUBLE_EQ(*err0, 1.0);
}

TEST(FidelityErrorsTest, PreciseCodes) {
  HostProblem hp(Shape({64}, {64}, 2, 1, 64, DType::kBF16));
  AttentionProblem& p = hp.problem();
  SparseIndex dense;
  ASSERT_TRUE(BuildDenseIndex(p, {0}, 64, &dense).ok());
  EXPECT_EQ(AttentionMassRecall(p, dense, 1, 8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionMassRecall(p, dense, -1, 8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  SparseIndex broken = dense;
  broken.range_len[0] = 1000;  // past the causal limit
  EXPECT_EQ(AttentionMassRecall(p, broken, 0, 8, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto sample = ExactRowSample::Compute(p, {1}, {});
  ASSERT_TRUE(sample.ok());
  EXPECT_EQ((*sample)->Score(p, dense, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExactRowSample::Compute(p, {2}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  HostProblem other(Shape({65}, {65}, 2, 1, 64, DType::kBF16));
  EXPECT_EQ((*sample)->OutputError(other.problem(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.space = MemorySpace::kCuda;
  EXPECT_EQ(AttentionMassRecall(p, dense, 0, 8, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SummarizeFidelity(p, dense, 8, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace spattn
