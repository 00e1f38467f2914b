// The CPU sparse kernel against the double-precision reference: dense index vs plain attention,
// sparse indexes vs attention under the densified mask.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/host_problem.h"
#include "kernels/reference/reference_attention.h"

namespace spattn {
namespace {

// Unit roundoff of the output dtype: the kernel's output must be within twice the rounding of
// its dtype of the exact value, plus fp32 accumulation noise (FlashAttention's rule).
double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 1.0 / (1 << 24);
    case DType::kF16:
      return 1.0 / (1 << 11);
    case DType::kBF16:
      return 1.0 / (1 << 8);
  }
  return 1;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, DType t,
                 const std::string& config) {
  ASSERT_EQ(got.size(), want.size()) << config;
  const double u = UnitRoundoff(t);
  double max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 2 * u * std::fabs(want[i]) + 1e-5;
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= tol) && (err - tol > max_err || std::isnan(err))) {
      max_err = std::isnan(err) ? INFINITY : err - tol;
      worst = i;
    }
  }
  EXPECT_EQ(max_err, 0) << config << ": element " << worst << " got " << got[worst] << " want "
                        << want[worst];
}

std::vector<int> AllHeads(const AttentionProblem& p) {
  std::vector<int> h(p.num_q_heads);
  for (int i = 0; i < p.num_q_heads; ++i) h[i] = i;
  return h;
}

struct Case {
  std::vector<int32_t> q_lens, k_lens;
  int hq, hkv, d;
  DType dtype;
  bool causal;
  int block_m;
};

std::string Describe(const Case& c) {
  std::string s = "q_lens=";
  for (int x : c.q_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " k_lens=");
  for (int x : c.k_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " hq=", c.hq, " hkv=", c.hkv, " d=", c.d, " dtype=", DTypeName(c.dtype),
                  " causal=", c.causal, " block_m=", c.block_m);
  return s;
}

HostProblem* MakeProblem(const Case& c, uint64_t seed) {
  ProblemShape s;
  s.q_lens = c.q_lens;
  s.k_lens = c.k_lens;
  s.num_q_heads = c.hq;
  s.num_kv_heads = c.hkv;
  s.head_dim = c.d;
  s.dtype = c.dtype;
  s.causal = c.causal;
  auto* hp = new HostProblem(s);
  hp->FillRandom(seed);
  return hp;
}

const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {{131}, {}, 4, 1, 64, DType::kBF16, true, 64},                    // prime length, GQA 4
      {{64}, {}, 8, 1, 128, DType::kF16, true, 64},                     // GQA 8, d=128
      {{65}, {}, 2, 2, 64, DType::kF32, true, 32},                      // GQA 1, fp32
      {{1, 63, 200}, {1, 100, 333}, 4, 2, 64, DType::kBF16, true, 64},  // varlen + chunked
      {{70}, {150}, 2, 1, 64, DType::kBF16, false, 64},                 // not causal
      {{257}, {}, 1, 1, 256, DType::kBF16, true, 128},                  // one head, d=256
  };
  return *cases;
}

TEST(SparseAttentionCpuTest, DenseIndexMatchesReference) {
  int seed = 1;
  for (const Case& c : Cases()) {
    std::unique_ptr<HostProblem> hp(MakeProblem(c, seed++));
    SparseIndex idx;
    ASSERT_TRUE(BuildDenseIndex(hp->problem(), AllHeads(hp->problem()), c.block_m, &idx).ok());
    ASSERT_TRUE(SparseAttentionCpu(hp->problem(), idx).ok());
    std::vector<float> ref, ref_lse;
    ASSERT_TRUE(ReferenceAttention(hp->problem(), {}, {}, &ref, &ref_lse).ok());
    ExpectClose(hp->OutputAsFloat(), ref, c.dtype, Describe(c));
    ExpectClose(hp->lse(), ref_lse, DType::kF32, "lse " + Describe(c));
  }
}

TEST(SparseAttentionCpuTest, AShapeMatchesReferenceUnderDensifiedMask) {
  int seed = 100;
  for (const Case& c : Cases()) {
    std::unique_ptr<HostProblem> hp(MakeProblem(c, seed++));
    AShapeParams params;
    params.sink_tokens = 5;
    params.local_tokens = 40;
    SparseIndex idx;
    const std::vector<int> heads = AllHeads(hp->problem());
    ASSERT_TRUE(BuildAShapeIndex(hp->problem(), params, heads, c.block_m, &idx).ok());
    ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
    ASSERT_TRUE(SparseAttentionCpu(hp->problem(), idx).ok());
    ReferenceMasks masks(hp->problem().num_q_heads * hp->problem().batch());
    for (int s = 0; s < idx.num_heads(); ++s) {
      for (int b = 0; b < hp->problem().batch(); ++b) {
        masks[idx.heads[s] * hp->problem().batch() + b] = DensifyMask(hp->problem(), idx, s, b);
      }
    }
    std::vector<float> ref, ref_lse;
    ASSERT_TRUE(ReferenceAttention(hp->problem(), {}, masks, &ref, &ref_lse).ok());
    ExpectClose(hp->OutputAsFloat(), ref, c.dtype, Describe(c));
    ExpectClose(hp->lse(), ref_lse, DType::kF32, "lse " + Describe(c));
  }
}

// Random ranges and gathered columns, an empty row, and a head subset.
TEST(SparseAttentionCpuTest, RandomIndexWithColumnsAndEmptyRow) {
  Case c{{150, 90}, {200, 90}, 4, 2, 64, DType::kBF16, true, 32};
  std::unique_ptr<HostProblem> hp(MakeProblem(c, 7));
  const AttentionProblem& p = hp->problem();
  SparseIndex idx;
  InitSparseIndex(p, {1, 3}, c.block_m, &idx);
  std::mt19937 rng(3);
  std::vector<RowKeys> rows(idx.num_rows());
  for (int s = 0; s < idx.num_heads(); ++s) {
    for (int b = 0; b < idx.num_blocks(); ++b) {
      const BlockGeometry g = GetBlockGeometry(p, idx, b);
      RowKeys& row = rows[idx.row(s, b)];
      if (s == 1 && b == 2) continue;  // an empty row
      for (int i = 0; i < 2; ++i) {
        const int st = rng() % g.key_end;
        row.AddRange(st, st + 1 + rng() % 20);
      }
      for (int i = 0; i < 40; ++i) row.AddCol(rng() % g.key_end);
      row.Normalize(g.key_end);
    }
  }
  CompactRows(&rows, &idx);
  ASSERT_TRUE(ValidateSparseIndex(p, idx).ok());
  ASSERT_GT(idx.col_idx.size(), 100u);
  ASSERT_TRUE(SparseAttentionCpu(p, idx).ok());
  ReferenceMasks masks(p.num_q_heads * p.batch(), std::vector<uint8_t>());
  for (int h = 0; h < p.num_q_heads; ++h) {
    for (int b = 0; b < p.batch(); ++b) {
      masks[h * p.batch() + b].assign(static_cast<size_t>(p.q_len(b)) * p.k_len(b), 0);
    }
  }
  for (int s = 0; s < idx.num_heads(); ++s) {
    for (int b = 0; b < p.batch(); ++b)
      masks[idx.heads[s] * p.batch() + b] = DensifyMask(p, idx, s, b);
  }
  std::vector<float> ref, ref_lse;
  ASSERT_TRUE(ReferenceAttention(p, {1, 3}, masks, &ref, &ref_lse).ok());
  std::vector<float> got = hp->OutputAsFloat();
  ExpectClose(got, ref, c.dtype, Describe(c));
  // The empty row (slot 1 = head 3, block 2 = sequence 0 rows 64..95) is zero with LSE -inf.
  for (int i = 64; i < 96; ++i) {
    EXPECT_EQ(hp->lse()[3 * p.total_q() + i], -INFINITY) << i;
    for (int d = 0; d < p.head_dim; ++d) {
      ASSERT_EQ(got[(static_cast<size_t>(i) * p.num_q_heads + 3) * p.head_dim + d], 0.f);
    }
  }
}

// A NaN in one value row spoils the rows that attend to that key; rows of other query blocks
// stay clean. (Rows of the same block may turn NaN too, as 0 x NaN inside the tile product, like
// the GPU kernel's matrix multiply.)
TEST(SparseAttentionCpuTest, NanInOneKeyStaysInsideItsQueryBlock) {
  Case c{{192}, {}, 1, 1, 64, DType::kF32, true, 64};
  std::unique_ptr<HostProblem> hp(MakeProblem(c, 11));
  float* v = reinterpret_cast<float*>(hp->v_bytes().data());
  v[100 * 64 + 3] = NAN;  // key 100, in query block [64, 128)
  SparseIndex idx;
  ASSERT_TRUE(BuildDenseIndex(hp->problem(), {0}, 64, &idx).ok());
  ASSERT_TRUE(SparseAttentionCpu(hp->problem(), idx).ok());
  std::vector<float> out = hp->OutputAsFloat();
  for (int t = 0; t < 64; ++t) EXPECT_FALSE(std::isnan(out[t * 64 + 3])) << t;
  for (int t = 100; t < 192; ++t) EXPECT_TRUE(std::isnan(out[t * 64 + 3])) << t;
  for (int t = 0; t < 192; ++t) EXPECT_FALSE(std::isnan(out[t * 64 + 4])) << t;  // other dims
}

}  // namespace
}  // namespace spattn
