// MInference block-sparse builder: hand-checked blocks, brute-force selection, index invariants,
// the CPU kernel under the densified mask, recall on planted topic blocks, bad parameters.
#include "kernels/builders/block_sparse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/builders/testing/builder_test_util.h"

namespace spattn {
namespace {

using testing::AllHeads;
using testing::Describe;
using testing::MakeShape;
using testing::RandomProblem;
using testing::Ranges;
using testing::RowRanges;

// Every query = e0 and every key of key block j = s_j * e0 with s = [1, 3, 2, 0], scale 1: the
// pooled scores of any query block are s_j over its visible key blocks.
std::unique_ptr<HostProblem> StepProblem(int q_len) {
  ProblemShape shape = MakeShape({q_len}, {64}, 1, 1, 64, DType::kF32);
  shape.softmax_scale = 1.f;
  auto hp = std::make_unique<HostProblem>(shape);
  std::vector<float> e0(64, 0.f);
  e0[0] = 1.f;
  for (int i = 0; i < q_len; ++i) testing::SetQRow(hp.get(), i, 0, e0);
  const float s[4] = {1, 3, 2, 0};
  for (int j = 0; j < 64; ++j) {
    std::vector<float> k(64, 0.f);
    k[0] = s[j / 16];
    testing::SetKRow(hp.get(), j, 0, k);
  }
  return hp;
}

// Block 16, top_k 2, S = 64 (four blocks), worked out by hand:
//   block 0 sees {0}: the diagonal block only                        -> [0, 16)
//   block 1 sees {0, 1}: diagonal 1 + best other 0                   -> [0, 32)
//   block 2 sees {0, 1, 2}: diagonal 2 + best other 1 (3 > 1)        -> [16, 48)
//   block 3 sees all: diagonal 3 + best other 1 (3 > 2 > 1)          -> [16, 32), [48, 64)
TEST(BlockSparseIndexTest, HandCheckedBlocks) {
  auto hp = StepProblem(64);
  BlockSparseParams params;
  params.block_size = 16;
  params.top_k = 2;
  SparseIndex idx;
  ASSERT_TRUE(BuildBlockSparseIndex(hp->problem(), params, {0}, &idx).ok());
  EXPECT_EQ(idx.block_m, 16);
  ASSERT_EQ(idx.num_blocks(), 4);
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{0, 16}}));
  EXPECT_EQ(RowRanges(idx, 0, 1), (Ranges{{0, 32}}));
  EXPECT_EQ(RowRanges(idx, 0, 2), (Ranges{{16, 48}}));
  EXPECT_EQ(RowRanges(idx, 0, 3), (Ranges{{16, 32}, {48, 64}}));
  EXPECT_TRUE(idx.col_idx.empty());
}

// Chunked prefill by hand: 40 queries at positions 24..63 of the same 64 keys.
//   block 0 (rows 0..15, positions 24..39): diagonal key blocks 1 and 2, both kept
//                                             -> [16, 48) cut at key_end 40 -> [16, 40)
//   block 1 (positions 40..55): diagonal blocks 2 and 3 -> [32, 64) cut at 56 -> [32, 56)
//   block 2 (positions 56..63): diagonal 3 + best other 1 -> [16, 32), [48, 64)
// With top_k = 1 the two diagonal blocks are still both kept.
TEST(BlockSparseIndexTest, HandCheckedChunkedPrefill) {
  auto hp = StepProblem(40);
  BlockSparseParams params;
  params.block_size = 16;
  params.top_k = 2;
  SparseIndex idx;
  ASSERT_TRUE(BuildBlockSparseIndex(hp->problem(), params, {0}, &idx).ok());
  ASSERT_EQ(idx.num_blocks(), 3);
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{16, 40}}));
  EXPECT_EQ(RowRanges(idx, 0, 1), (Ranges{{32, 56}}));
  EXPECT_EQ(RowRanges(idx, 0, 2), (Ranges{{16, 32}, {48, 64}}));
  params.top_k = 1;
  ASSERT_TRUE(BuildBlockSparseIndex(hp->problem(), params, {0}, &idx).ok());
  EXPECT_EQ(RowRanges(idx, 0, 0), (Ranges{{16, 40}}));
  EXPECT_EQ(RowRanges(idx, 0, 2), (Ranges{{48, 64}}));
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
}

// ---------------------------------------------------------------------------------------------
// Brute force: Alg. 3 with plain loops in double.

struct NaiveBlocks {
  std::vector<std::vector<int>> selected;  // per query block of the sequence
  bool fragile = false;
};

NaiveBlocks NaiveSelect(const AttentionProblem& p, const BlockSparseParams& bp, int q_head,
                        int seq) {
  NaiveBlocks out;
  const int ql = p.q_len(seq), kl = p.k_len(seq), d = p.head_dim, bs = bp.block_size;
  const int kv = p.kv_head_of(q_head);
  const int nq = (ql + bs - 1) / bs, nk = (kl + bs - 1) / bs;
  auto pooled = [&](bool query, int blk, int len) {
    std::vector<double> m(d, 0.0);
    const int r0 = blk * bs, r1 = std::min(len, r0 + bs);
    for (int r = r0; r < r1; ++r) {
      for (int c = 0; c < d; ++c) {
        m[c] += query ? testing::QAt(p, p.cu_seqlens_q[seq] + r, q_head, c)
                      : testing::KAt(p, p.cu_seqlens_k[seq] + r, kv, c);
      }
    }
    for (double& x : m) x /= (r1 - r0);
    return m;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (int i = 0; i < nq; ++i) {
    const std::vector<double> q = pooled(true, i, ql);
    const int p0 = p.query_pos(seq, i * bs), p1 = p.query_pos(seq, std::min(ql, (i + 1) * bs) - 1);
    const int visible = p.causal ? p1 / bs + 1 : nk;
    std::vector<std::pair<double, int>> scores;
    int forced = 0;
    for (int j = 0; j < visible; ++j) {
      const std::vector<double> k = pooled(false, j, kl);
      double s = 0;
      for (int c = 0; c < d; ++c) s += q[c] * k[c];
      s *= p.softmax_scale;
      if (j >= p0 / bs && j <= p1 / bs) {
        s = inf;
        ++forced;
      }
      scores.emplace_back(s, j);
    }
    std::sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      return a.second < b.second;
    });
    const int k = std::min<int>(std::max(bp.top_k, forced), scores.size());
    if (k < static_cast<int>(scores.size()) && !std::isinf(scores[k - 1].first) &&
        scores[k - 1].first - scores[k].first <= 1e-4 * std::max(1.0, std::fabs(scores[k].first))) {
      out.fragile = true;
    }
    std::vector<int> sel;
    for (int t = 0; t < k; ++t) sel.push_back(scores[t].second);
    out.selected.push_back(sel);
  }
  return out;
}

std::vector<uint8_t> NaiveMask(const AttentionProblem& p, int seq, int bs, const NaiveBlocks& nb) {
  const int ql = p.q_len(seq), kl = p.k_len(seq);
  std::vector<uint8_t> mask(static_cast<size_t>(ql) * kl, 0);
  for (int i = 0; i < ql; ++i) {
    const int pos = p.query_pos(seq, i);
    for (int j : nb.selected[i / bs]) {
      for (int key = j * bs; key < std::min(kl, (j + 1) * bs); ++key) {
        if (!p.causal || key <= pos) mask[static_cast<size_t>(i) * kl + key] = 1;
      }
    }
  }
  return mask;
}

struct Case {
  ProblemShape shape;
  int block_size;
  int top_k;
};

std::vector<Case> BruteCases() {
  return {
      {MakeShape({300}, {}, 2, 1), 32, 3},
      {MakeShape({97}, {}, 4, 1, 64, DType::kF32), 16, 2},
      {MakeShape({260}, {}, 8, 1, 128, DType::kF16), 64, 2},
      {MakeShape({37}, {300}, 4, 2), 16, 4},                           // chunked, unaligned
      {MakeShape({45}, {300}, 2, 1), 16, 1},                           // 2 diagonal blocks > top_k
      {MakeShape({1, 63, 130}, {1, 100, 200}, 2, 2), 32, 3},           // varlen + chunked
      {MakeShape({70}, {150}, 2, 1, 64, DType::kBF16, false), 16, 3},  // not causal
      {MakeShape({129}, {}, 1, 1), 128, 1},
  };
}

TEST(BlockSparseIndexTest, MatchesBruteForceSelection) {
  int seed = 21, exact = 0, ties = 0;
  for (const Case& c : BruteCases()) {
    auto hp = RandomProblem(c.shape, seed++);
    const AttentionProblem& p = hp->problem();
    BlockSparseParams params;
    params.block_size = c.block_size;
    params.top_k = c.top_k;
    const std::string config =
        absl::StrCat(Describe(c.shape), " block=", c.block_size, " top_k=", c.top_k);
    SparseIndex idx;
    ASSERT_TRUE(BuildBlockSparseIndex(p, params, AllHeads(p), &idx).ok()) << config;
    ASSERT_TRUE(ValidateSparseIndex(p, idx).ok()) << config;
    for (int s = 0; s < idx.num_heads(); ++s) {
      for (int b = 0; b < p.batch(); ++b) {
        const NaiveBlocks naive = NaiveSelect(p, params, idx.heads[s], b);
        const std::vector<uint8_t> got = DensifyMask(p, idx, s, b);
        const std::vector<uint8_t> want = NaiveMask(p, b, c.block_size, naive);
        if (got == want) {
          ++exact;
          continue;
        }
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

std::vector<Case> ShapeSweep() {
  std::vector<Case> out;
  for (int len : {1, 63, 64, 65, 127, 131}) out.push_back({MakeShape({len}, {}, 4, 1), 64, 2});
  out.push_back({MakeShape({257}, {}, 8, 1, 128, DType::kF16), 128, 1});
  out.push_back({MakeShape({131}, {}, 2, 2, 64, DType::kF32), 16, 3});
  out.push_back({MakeShape({1, 63, 200}, {1, 100, 333}, 4, 2), 32, 2});
  out.push_back({MakeShape({50}, {1000}, 4, 1), 16, 5});
  out.push_back({MakeShape({70}, {150}, 2, 1, 64, DType::kBF16, false), 32, 2});
  out.push_back({MakeShape({0, 77}, {10, 77}, 2, 1), 32, 2});
  return out;
}

TEST(BlockSparseIndexTest, InvariantsAcrossShapes) {
  int seed = 300;
  for (const Case& c : ShapeSweep()) {
    auto hp = RandomProblem(c.shape, seed++);
    const AttentionProblem& p = hp->problem();
    BlockSparseParams params;
    params.block_size = c.block_size;
    params.top_k = c.top_k;
    const std::string config =
        absl::StrCat(Describe(c.shape), " block=", c.block_size, " top_k=", c.top_k);
    SparseIndex idx;
    ASSERT_TRUE(BuildBlockSparseIndex(p, params, AllHeads(p), &idx).ok()) << config;
    const absl::Status valid = ValidateSparseIndex(p, idx);
    EXPECT_TRUE(valid.ok()) << config << ": " << valid;
    EXPECT_EQ(idx.block_m, c.block_size);
    for (int s = 0; s < idx.num_heads(); ++s) {
      for (int b = idx.block_offsets[0]; b < idx.num_blocks(); ++b) {
        const BlockGeometry g = GetBlockGeometry(p, idx, b);
        const std::vector<int32_t> keys = testing::RowKeyList(idx, s, b);
        // Whole key blocks (cut only by causality), at most max(top_k, 2) of them, and the
        // block's own diagonal always present.
        EXPECT_LE(static_cast<int>(keys.size()), std::max(c.top_k, 2) * c.block_size) << config;
        EXPECT_TRUE(std::binary_search(keys.begin(), keys.end(), g.last_pos)) << config;
        EXPECT_TRUE(std::binary_search(keys.begin(), keys.end(), g.first_pos)) << config;
      }
    }
  }
}

TEST(BlockSparseIndexTest, KernelMatchesReferenceUnderDensifiedMask) {
  int seed = 400;
  for (const Case& c : ShapeSweep()) {
    auto hp = RandomProblem(c.shape, seed++);
    BlockSparseParams params;
    params.block_size = c.block_size;
    params.top_k = c.top_k;
    const std::string config =
        absl::StrCat(Describe(c.shape), " block=", c.block_size, " top_k=", c.top_k);
    std::vector<int> heads = {hp->problem().num_q_heads - 1};
    SparseIndex idx;
    ASSERT_TRUE(BuildBlockSparseIndex(hp->problem(), params, heads, &idx).ok()) << config;
    testing::ExpectKernelMatchesMaskedReference(hp.get(), idx, config);
  }
}

// ---------------------------------------------------------------------------------------------
// Recall on planted topic blocks. Key block j carries a random unit topic t_j (plus N(0, 0.05^2)
// noise per element); every query of query block i carries 12 * t_pi(i) for one visible key
// block pi(i), chosen at random per query block. Scale 1: keys of block pi(i) score ~12, the
// others ~N(0, 1.5^2), so block pi(i) holds ~99% of each row's mass.
void PlantTopics(HostProblem* hp, int seq, int bs, uint64_t seed) {
  AttentionProblem& p = hp->problem();
  const int d = p.head_dim, kl = p.k_len(seq), ql = p.q_len(seq);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int nk = (kl + bs - 1) / bs;
  for (int h = 0; h < p.num_kv_heads; ++h) {
    std::vector<std::vector<float>> topics(nk, std::vector<float>(d));
    for (auto& t : topics) {
      double norm = 0;
      for (float& x : t) {
        x = normal(rng);
        norm += x * x;
      }
      for (float& x : t) x /= std::sqrt(norm);
    }
    for (int j = 0; j < kl; ++j) {
      std::vector<float> k = topics[j / bs];
      for (float& x : k) x += 0.05f * normal(rng);
      testing::SetKRow(hp, p.cu_seqlens_k[seq] + j, h, k);
    }
    const int group = p.num_q_heads / p.num_kv_heads;
    for (int g = 0; g < group; ++g) {
      const int qh = h * group + g;
      for (int i0 = 0; i0 < ql; i0 += bs) {
        const int last = p.query_pos(seq, std::min(ql, i0 + bs) - 1);
        const int target = std::uniform_int_distribution<int>(0, last / bs)(rng);
        for (int i = i0; i < std::min(ql, i0 + bs); ++i) {
          std::vector<float> q = topics[target];
          for (float& x : q) x = 12.f * x + 0.05f * normal(rng);
          testing::SetQRow(hp, p.cu_seqlens_q[seq] + i, qh, q);
        }
      }
    }
  }
}

TEST(BlockSparseIndexTest, RecallOnPlantedTopicBlocks) {
  ProblemShape shape = MakeShape({2048, 512}, {2048, 2048}, 4, 1, 64);
  shape.softmax_scale = 1.f;
  HostProblem hp(shape);
  const int bs = 64;
  PlantTopics(&hp, 0, bs, 1);
  PlantTopics(&hp, 1, bs, 2);
  BlockSparseParams params;
  params.block_size = bs;
  params.top_k = 2;  // the planted block and the diagonal block
  SparseIndex idx;
  ASSERT_TRUE(BuildBlockSparseIndex(hp.problem(), params, {0, 3}, &idx).ok());
  ASSERT_TRUE(ValidateSparseIndex(hp.problem(), idx).ok());
  const double recall = testing::IndexRecall(hp.problem(), idx);
  const double density = testing::IndexDensity(hp.problem(), idx);
  AShapeParams ashape;
  ashape.sink_tokens = 64;
  ashape.local_tokens = 64;
  SparseIndex ashape_idx;
  ASSERT_TRUE(BuildAShapeIndex(hp.problem(), ashape, {0, 3}, bs, &ashape_idx).ok());
  const double ashape_recall = testing::IndexRecall(hp.problem(), ashape_idx);
  // The stated bound: >= 0.95 of the attention mass at <= 12% density.
  EXPECT_GE(recall, 0.95) << "density " << density;
  EXPECT_LE(density, 0.12);
  EXPECT_GT(recall, ashape_recall + 0.3) << "a_shape recall " << ashape_recall;
  std::cout << "planted block-sparse: recall " << recall << " density " << density
            << " (a_shape recall " << ashape_recall << ")\n";
}

TEST(BlockSparseIndexTest, NonFiniteInputsGiveAValidIndex) {
  auto hp = RandomProblem(MakeShape({130}, {}, 2, 1, 64, DType::kF32), 3);
  std::vector<float> bad(64, std::numeric_limits<float>::quiet_NaN());
  testing::SetKRow(hp.get(), 17, 0, bad);
  testing::SetQRow(hp.get(), 100, 1, bad);
  BlockSparseParams params;
  params.block_size = 16;
  params.top_k = 3;
  SparseIndex idx;
  ASSERT_TRUE(BuildBlockSparseIndex(hp->problem(), params, {0, 1}, &idx).ok());
  EXPECT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
}

TEST(BlockSparseIndexTest, RejectsBadParameters) {
  auto hp = RandomProblem(MakeShape({64}, {}, 2, 1), 1);
  const AttentionProblem& p = hp->problem();
  SparseIndex idx;
  BlockSparseParams params;
  params.block_size = 48;
  absl::Status s = BuildBlockSparseIndex(p, params, {0}, &idx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_sparse.block_size"), std::string::npos) << s;
  params = BlockSparseParams();
  params.top_k = 0;
  s = BuildBlockSparseIndex(p, params, {0}, &idx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_sparse.top_k"), std::string::npos) << s;
  params = BlockSparseParams();
  s = BuildBlockSparseIndex(p, params, {0, -1}, &idx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("heads[1]"), std::string::npos) << s;
  AttentionProblem device = p;
  device.space = MemorySpace::kCuda;
  EXPECT_EQ(BuildBlockSparseIndex(device, params, {0}, &idx).code(),
            absl::StatusCode::kFailedPrecondition);
  AttentionProblem broken = p;
  broken.cu_seqlens_k = {0, 10};
  s = BuildBlockSparseIndex(broken, params, {0}, &idx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cu_seqlens"), std::string::npos) << s;

  MethodConfig config;
  config.method = Method::kBlockSparse;
  config.block_sparse.top_k = -1;
  EXPECT_NE(
      BuildSparseIndex(p, config, {0}, BuildOptions(), &idx).message().find("block_sparse.top_k"),
      std::string::npos);
  EXPECT_TRUE(CpuBuilderAvailable(Method::kBlockSparse));
}

}  // namespace
}  // namespace spattn
