// The CUDA dense and sparse kernels against the CPU references (double-precision rows, with the
// same math in the input dtype for the tolerance), through CudaAttentionEngine. Skips, saying
// why, where no GPU is present.
#include "kernels/cuda/attention/attention_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/cuda/attention/cuda_test_util.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/host_problem.h"

namespace spattn {
namespace {

using cuda_test::CheckAllWritten;
using cuda_test::CheckRows;
using cuda_test::DeviceProblem;
using cuda_test::SampleRows;

constexpr int64_t kWorkspace = int64_t{2} << 30;

struct Case {
  std::vector<int32_t> q_lens, k_lens;
  int hq, hkv, d;
  DType dtype;
  bool causal;
};

std::string Describe(const Case& c) {
  std::string s = "q_lens=";
  for (int x : c.q_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " k_lens=");
  for (int x : c.k_lens) absl::StrAppend(&s, x, ",");
  absl::StrAppend(&s, " hq=", c.hq, " hkv=", c.hkv, " d=", c.d, " dtype=", DTypeName(c.dtype),
                  " causal=", c.causal);
  return s;
}

std::unique_ptr<HostProblem> MakeProblem(const Case& c, uint64_t seed) {
  ProblemShape s;
  s.q_lens = c.q_lens;
  s.k_lens = c.k_lens;
  s.num_q_heads = c.hq;
  s.num_kv_heads = c.hkv;
  s.head_dim = c.d;
  s.dtype = c.dtype;
  s.causal = c.causal;
  auto hp = std::make_unique<HostProblem>(s);
  hp->FillRandom(seed);
  return hp;
}

std::vector<int> AllHeads(int n) {
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  return h;
}

// Small shapes that break kernels: odd and prime lengths, GQA 1/4/8, varlen + chunked prefill,
// full (non-causal) masks, both head dims and dtypes.
const std::vector<Case>& SmallCases() {
  static const auto* cases = new std::vector<Case>{
      {{1}, {}, 1, 1, 64, DType::kBF16, true},
      {{63}, {}, 4, 1, 128, DType::kBF16, true},
      {{65}, {}, 8, 1, 64, DType::kF16, true},
      {{131}, {}, 2, 2, 128, DType::kF16, true},
      {{1, 63, 200}, {1, 100, 333}, 4, 2, 128, DType::kBF16, true},
      {{70, 5}, {150, 300}, 8, 8, 64, DType::kBF16, false},
      {{257}, {521}, 8, 1, 128, DType::kBF16, true},
      // Non-causal d = 128 over sequences that end inside a 176-key tile (the Hopper kernel's
      // non-causal tile), and d = 64 causal over several 192-row blocks (its 3-warpgroup shape).
      {{300, 77}, {400, 1000}, 4, 2, 128, DType::kF16, false},
      {{700}, {}, 4, 2, 64, DType::kBF16, true},
      // Non-causal grids of fewer CTAs than SMs: the Hopper kernel splits their blocks' key
      // tiles over several CTAs and merges them (the tail split: 4 pieces at d = 128, 3 at d = 64).
      {{1000}, {3000}, 4, 1, 128, DType::kBF16, false},
      {{900, 40}, {2500, 2600}, 4, 4, 64, DType::kF16, false},
  };
  return *cases;
}

class CudaAttentionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (ListCudaDevices(&why).empty()) {
      skip_reason_ = new std::string("no CUDA device: " + why);
      return;
    }
    for (int variant : {1, 2, 3, 4, 5, 6}) {
      CudaEngineOptions options;
      options.kernel_variant = variant;
      auto e = CudaAttentionEngine::Create(0, kWorkspace, options);
      ASSERT_TRUE(e.ok()) << e.status();
      engines_[variant - 1] = e->release();
    }
  }
  static void TearDownTestSuite() {
    for (auto*& e : engines_) {
      delete e;
      e = nullptr;
    }
  }
  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
  }

  // Runs dense (index null) or sparse on the device path and checks the sampled rows plus
  // that every element of the index's heads was written.
  void CheckRun(CudaAttentionEngine* engine, HostProblem& hp, const SparseIndex* index,
                int max_rows, const std::string& config) {
    auto dp = DeviceProblem::Create(0, hp);
    ASSERT_TRUE(dp.ok()) << dp.status() << " " << config;
    ASSERT_TRUE((*dp)->Poison().ok());
    AttentionProblem& p = (*dp)->problem();
    const absl::Status s = index == nullptr ? engine->RunDense(p) : engine->RunSparse(p, *index);
    ASSERT_TRUE(s.ok()) << s << " " << config;
    std::vector<float> o, lse;
    ASSERT_TRUE((*dp)->Download(&o, &lse).ok());
    const std::vector<int> heads = index == nullptr
                                       ? AllHeads(p.num_q_heads)
                                       : std::vector<int>(index->heads.begin(), index->heads.end());
    EXPECT_EQ(CheckAllWritten(p, heads, o, lse), "") << config;
    const std::string err =
        CheckRows(hp.problem(), index, SampleRows(hp.problem(), heads, max_rows), o, lse);
    EXPECT_EQ(err, "") << config;
  }

  // Sets a kernel knob for a scope (re-read at once), unsets it at the scope's end.
  struct ScopedKnob {
    ScopedKnob(const char* knob, const char* value) : knob(knob) {
      setenv(knob, value, 1);
      ReloadCudaKernelKnobs();
    }
    ~ScopedKnob() {
      unsetenv(knob);
      ReloadCudaKernelKnobs();
    }
    const char* knob;
  };

  // Runs `index` once on the warp-specialized engine into a poisoned problem and downloads O / LSE
  // into *o / *lse, checked as written for every head of the index; with `knob` (may be null) set
  // to `value` for this run only (kernel knobs re-read before and after).
  void RunSparseUnderKnob(HostProblem& hp, const SparseIndex& index, const char* knob,
                          const char* value, const std::string& config, int run,
                          std::vector<float>* o, std::vector<float>* lse) {
    if (knob != nullptr) setenv(knob, value, 1);
    ReloadCudaKernelKnobs();
    auto dp = DeviceProblem::Create(0, hp);
    ASSERT_TRUE(dp.ok()) << dp.status();
    ASSERT_TRUE((*dp)->Poison().ok());
    const absl::Status st = engines_[4]->RunSparse((*dp)->problem(), index);
    if (knob != nullptr) unsetenv(knob);
    ReloadCudaKernelKnobs();
    ASSERT_TRUE(st.ok()) << st << " " << config;
    ASSERT_TRUE((*dp)->Download(o, lse).ok());
    std::vector<int> heads(index.heads.begin(), index.heads.end());
    EXPECT_EQ(CheckAllWritten((*dp)->problem(), heads, *o, *lse), "")
        << config << " run " << run;
  }

  // Runs `index` twice, into o[0] / lse[0] with the kernel knobs as they are and into o[1] /
  // lse[1] with the environment variable `knob` set to `value`.
  void RunSparseWithAndWithoutKnob(HostProblem& hp, const SparseIndex& index, const char* knob,
                                   const std::string& value, const std::string& config,
                                   std::vector<float> (&o)[2], std::vector<float> (&lse)[2]) {
    for (int run = 0; run < 2; ++run) {
      RunSparseUnderKnob(hp, index, run == 1 ? knob : nullptr, value.c_str(), config, run,
                         &o[run], &lse[run]);
    }
  }

  // After RunSparseWithAndWithoutKnob: run 0's rows match the reference on 64 sampled rows of
  // every head, and the knob's run wrote the same O and LSE bytes.
  static void ExpectCheckedAndKnobIdentical(HostProblem& hp, const SparseIndex& idx, int hq,
                                            const std::vector<float> (&o)[2],
                                            const std::vector<float> (&lse)[2],
                                            const std::string& config) {
    EXPECT_EQ(CheckRows(hp.problem(), &idx, SampleRows(hp.problem(), AllHeads(hq), 64), o[0],
                        lse[0]),
              "")
        << config;
    EXPECT_EQ(0, std::memcmp(o[0].data(), o[1].data(), o[0].size() * 4)) << config;
    EXPECT_EQ(0, std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * 4)) << config;
  }

  // Run 0's rows match the reference on 64 sampled rows of every head, and every later run wrote
  // run 0's O and LSE bytes.
  static void ExpectRunsMatchFirst(HostProblem& hp, const SparseIndex& idx, int hq,
                                   const std::vector<std::vector<float>>& o,
                                   const std::vector<std::vector<float>>& lse,
                                   const std::string& config) {
    EXPECT_EQ(CheckRows(hp.problem(), &idx, SampleRows(hp.problem(), AllHeads(hq), 64), o[0],
                        lse[0]),
              "")
        << config;
    for (size_t run = 1; run < o.size(); ++run) {
      ASSERT_EQ(o[run].size(), o[0].size());
      ASSERT_EQ(lse[run].size(), lse[0].size());
      EXPECT_EQ(0, std::memcmp(o[0].data(), o[run].data(), o[0].size() * 4))
          << config << " run " << run;
      EXPECT_EQ(0, std::memcmp(lse[0].data(), lse[run].data(), lse[0].size() * 4))
          << config << " run " << run;
    }
  }

  static std::string* skip_reason_;
  // Kernel variants 1 (8 warps), 2 (4 warps of 32 rows), 3 (wgmma; = 2 off Hopper), 4 (3 with
  // deeper pipelines), 5 (warp-specialized TMA kernels of attention/hopper; sparse block_m 64:
  // one consumer warpgroup per CTA, 4 under SPATTN_HOPPER_BM64=0), 6 (5 with the persistent
  // dense kernel).
  static CudaAttentionEngine* engines_[6];
};

std::string* CudaAttentionTest::skip_reason_ = nullptr;
CudaAttentionEngine* CudaAttentionTest::engines_[6] = {nullptr, nullptr, nullptr,
                                                       nullptr, nullptr, nullptr};

TEST_F(CudaAttentionTest, DenseKernelMatchesReference) {
  uint64_t seed = 1;
  for (int variant : {1, 2, 3, 4, 5, 6}) {
    for (const Case& c : SmallCases()) {
      auto hp = MakeProblem(c, seed++);
      CheckRun(engines_[variant - 1], *hp, nullptr, 1 << 20,
               absl::StrCat(Describe(c), " variant=", variant));
    }
  }
}

// The Hopper kernel's tail split with more pieces than a block has key tiles (pieces without
// tiles merge as empty) and with a forced 3-way split (SPATTN_HOPPER_TAIL_SPLIT, read
// again through ReloadCudaKernelKnobs).
TEST_F(CudaAttentionTest, DenseTailSplitPieces) {
  const std::vector<Case> cases = {
      {{300, 77}, {400, 1000}, 4, 2, 128, DType::kF16, false},
      {{1000}, {3000}, 4, 1, 128, DType::kBF16, false},
      {{900, 40}, {2500, 2600}, 4, 4, 64, DType::kBF16, false},
  };
  uint64_t seed = 50;
  for (const char* pieces : {"16", "3"}) {
    setenv("SPATTN_HOPPER_TAIL_SPLIT", pieces, 1);
    ReloadCudaKernelKnobs();
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      CheckRun(engines_[4], *hp, nullptr, 1 << 20,
               absl::StrCat(Describe(c), " variant=5 pieces=", pieces));
    }
  }
  unsetenv("SPATTN_HOPPER_TAIL_SPLIT");
  ReloadCudaKernelKnobs();
}

// Non-causal grids with kv heads of at most 16 MB of K/V run one GQA group (MHA: one head) per
// L2 section (dense_fa3.cu's SectionHeads): several sections, varlen, chunked prefill, the tail
// split, MHA and GQA at d = 128 and 64, and the old 32 MB sections for comparison
// (SPATTN_HOPPER_L2_MB, read again through ReloadCudaKernelKnobs).
TEST_F(CudaAttentionTest, DenseOneGroupSections) {
  const std::vector<Case> cases = {
      {{1000, 300}, {}, 4, 4, 128, DType::kBF16, false},
      {{2000}, {2500}, 8, 8, 128, DType::kF16, false},
      {{1500, 200}, {}, 8, 2, 128, DType::kF16, false},
      {{1200}, {2000}, 8, 4, 64, DType::kBF16, false},
  };
  uint64_t seed = 70;
  for (const char* mb : {"", "32"}) {
    setenv("SPATTN_HOPPER_L2_MB", mb, 1);
    ReloadCudaKernelKnobs();
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      CheckRun(engines_[4], *hp, nullptr, 1 << 20,
               absl::StrCat(Describe(c), " variant=5 L2_MB=", mb));
    }
    // Kv heads of 4-16 MB of K/V (12000 keys at d = 128, 20000 at d = 64): one group per
    // section by default since session 22, 2-4 groups under the 32 MB rule. Few query rows
    // checked (all rows' outputs must still be written).
    for (const Case& c : {Case{{256}, {12000}, 4, 2, 128, DType::kF16, false},
                          Case{{300}, {20000}, 4, 2, 64, DType::kBF16, false}}) {
      auto hp = MakeProblem(c, seed++);
      CheckRun(engines_[4], *hp, nullptr, 96, absl::StrCat(Describe(c), " variant=5 L2_MB=", mb));
    }
  }
  unsetenv("SPATTN_HOPPER_L2_MB");
  ReloadCudaKernelKnobs();
}

// The dense index through the sparse kernel: the test twin of the dense kernel. With the same
// block shape it must agree with the dense kernel bit for bit.
TEST_F(CudaAttentionTest, SparseKernelWithDenseIndexMatchesReferenceAndDenseKernel) {
  uint64_t seed = 100;
  for (int block_m : {64, 128}) {
    for (const Case& c : SmallCases()) {
      auto hp = MakeProblem(c, seed++);
      SparseIndex idx;
      ASSERT_TRUE(BuildDenseIndex(hp->problem(), AllHeads(c.hq), block_m, &idx).ok());
      const std::string config = absl::StrCat(Describe(c), " block_m=", block_m);
      CheckRun(engines_[1], *hp, &idx, 1 << 20, config);
      if (block_m == 128) {
        auto a = DeviceProblem::Create(0, *hp);
        auto b = DeviceProblem::Create(0, *hp);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_TRUE(engines_[1]->RunDense((*a)->problem()).ok());
        ASSERT_TRUE(engines_[1]->RunSparse((*b)->problem(), idx).ok());
        std::vector<float> oa, la, ob, lb;
        ASSERT_TRUE((*a)->Download(&oa, &la).ok());
        ASSERT_TRUE((*b)->Download(&ob, &lb).ok());
        EXPECT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * 4)) << config;
        EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << config;
      }
    }
  }
}

TEST_F(CudaAttentionTest, AShapeIndexMatchesReference) {
  uint64_t seed = 200;
  for (int block_m : {64, 128}) {
    for (const Case& c : SmallCases()) {
      auto hp = MakeProblem(c, seed++);
      AShapeParams params;
      params.sink_tokens = 5;
      params.local_tokens = 40;
      SparseIndex idx;
      ASSERT_TRUE(BuildAShapeIndex(hp->problem(), params, AllHeads(c.hq), block_m, &idx).ok());
      for (int variant : {1, 3, 5}) {
        CheckRun(engines_[variant - 1], *hp, &idx, 1 << 20,
                 absl::StrCat(Describe(c), " block_m=", block_m, " variant=", variant));
      }
    }
  }
}

// Random ranges (unaligned to tiles) and gathered columns; an empty row; a subset of heads.
SparseIndex RandomIndex(const AttentionProblem& p, const std::vector<int>& heads, int block_m,
                        int ranges, int cols, uint64_t seed, bool with_empty_row) {
  SparseIndex idx;
  InitSparseIndex(p, heads, block_m, &idx);
  std::mt19937_64 rng(seed);
  std::vector<RowKeys> rows(idx.num_rows());
  for (int s = 0; s < idx.num_heads(); ++s) {
    for (int b = 0; b < idx.num_blocks(); ++b) {
      if (with_empty_row && s == 0 && b == idx.num_blocks() / 2) continue;
      const BlockGeometry g = GetBlockGeometry(p, idx, b);
      RowKeys& row = rows[idx.row(s, b)];
      for (int i = 0; i < ranges; ++i) {
        const int64_t st = rng() % g.key_end;
        row.AddRange(st, st + 1 + rng() % 150);
      }
      for (int i = 0; i < cols; ++i) row.AddCol(rng() % g.key_end);
      row.Normalize(g.key_end, /*min_run=*/1 << 30);
    }
  }
  CompactRows(&rows, &idx);
  return idx;
}

// Long items: per row a 64-key sink, a window of up to 1500 keys ending at the row's last key (many
// tiles of one item, a partial or packed tail) and, in every other row, 40 gathered columns.
SparseIndex LongItemsIndex(const AttentionProblem& p, const std::vector<int>& heads, int block_m,
                           uint64_t seed) {
  SparseIndex idx;
  InitSparseIndex(p, heads, block_m, &idx);
  std::mt19937_64 rng(seed);
  std::vector<RowKeys> rows(idx.num_rows());
  for (int s = 0; s < idx.num_heads(); ++s) {
    for (int b = 0; b < idx.num_blocks(); ++b) {
      const BlockGeometry g = GetBlockGeometry(p, idx, b);
      if (g.key_end <= 0) continue;
      RowKeys& row = rows[idx.row(s, b)];
      row.AddRange(0, std::min<int64_t>(64, g.key_end));
      const int64_t w = 1 + static_cast<int64_t>(rng() % 1500);
      row.AddRange(std::max<int64_t>(0, g.key_end - w), g.key_end);
      if ((s + b) % 2 == 0) {
        for (int i = 0; i < 40; ++i) row.AddCol(rng() % g.key_end);
      }
      row.Normalize(g.key_end, /*min_run=*/1 << 30);
    }
  }
  CompactRows(&rows, &idx);
  return idx;
}

// The pair-step tests' two index kinds at block_m 64 over every head: short items (random ranges
// and columns: odd tile counts, one-tile items, packed tails) or long ones (LongItemsIndex).
SparseIndex PairStepIndex(const AttentionProblem& p, int hq, bool short_items, uint64_t seed) {
  return short_items ? RandomIndex(p, AllHeads(hq), 64, 3, 90, seed, true)
                     : LongItemsIndex(p, AllHeads(hq), 64, seed);
}

TEST_F(CudaAttentionTest, RandomRangesAndColumnsMatchReference) {
  uint64_t seed = 300;
  for (int block_m : {64, 128}) {
    for (int variant : {1, 2, 3, 4, 5}) {
      for (const Case& c : SmallCases()) {
        auto hp = MakeProblem(c, seed++);
        std::vector<int> heads;
        for (int h = c.hq - 1; h >= 0; h -= 2) heads.push_back(h);  // a subset, out of order
        SparseIndex idx = RandomIndex(hp->problem(), heads, block_m, 3, 90, seed, true);
        ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
        CheckRun(engines_[variant - 1], *hp, &idx, 1 << 20,
                 absl::StrCat(Describe(c), " block_m=", block_m, " variant=", variant));
      }
    }
  }
}

TEST_F(CudaAttentionTest, ColumnsOnlyMatchReference) {
  Case c{{700, 333}, {1000, 333}, 8, 2, 128, DType::kBF16, true};
  auto hp = MakeProblem(c, 400);
  for (int block_m : {64, 128}) {
    SparseIndex idx = RandomIndex(hp->problem(), AllHeads(c.hq), block_m, 0, 300, 401, false);
    ASSERT_GT(idx.col_idx.size(), 10000u);
    for (int variant : {1, 2, 3, 4, 5}) {
      CheckRun(engines_[variant - 1], *hp, &idx, 1 << 20,
               absl::StrCat(Describe(c), " block_m=", block_m, " variant=", variant));
    }
  }
}

// The Hopper sparse kernel's range-tail packing modes besides the default (2, every test above):
// SPATTN_HOPPER_PACK_TAILS 0 (start-aligned tiles), 1 (packed where it saves tiles) and 3 (also
// where it ties, for items with columns), each read once per process (set, then
// ReloadCudaKernelKnobs), on random ranges with and without columns.
TEST_F(CudaAttentionTest, SparsePackTailsModesMatchReference) {
  const std::vector<Case> cases = {
      {{700, 333}, {1000, 333}, 8, 2, 128, DType::kBF16, true},
      {{900}, {}, 8, 4, 64, DType::kF16, true},
  };
  uint64_t seed = 480;
  for (const char* mode : {"0", "1", "3"}) {
    setenv("SPATTN_HOPPER_PACK_TAILS", mode, 1);
    ReloadCudaKernelKnobs();
    for (int block_m : {64, 128}) {
      for (const Case& c : cases) {
        for (bool cols : {true, false}) {
          auto hp = MakeProblem(c, seed++);
          SparseIndex idx =
              RandomIndex(hp->problem(), AllHeads(c.hq), block_m, 3, cols ? 90 : 0, seed++, true);
          ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
          CheckRun(engines_[4], *hp, &idx, 1 << 20,
                   absl::StrCat(Describe(c), " block_m=", block_m, " pack_tails=", mode,
                                " cols=", cols));
        }
      }
    }
  }
  unsetenv("SPATTN_HOPPER_PACK_TAILS");
  ReloadCudaKernelKnobs();
}

// The Hopper sparse kernel's stale row maximum (ConsumerStep::SoftmaxStale: a row's maximum
// moves only where a tile's exceeds it by more than 8 in the log2 domain; below that P reaches
// up to 2^8 and O is not rescaled): inputs of standard deviation 2 and 4, so the scores spread
// over tens of log2 units and tiles move the maximum by less and by more than 8 within items;
// both block sizes, random ranges with columns (packed range tails) and without, causal and not.
TEST_F(CudaAttentionTest, SparseStaleRowMaxMatchesReference) {
  const std::vector<Case> cases = {
      {{700, 333}, {1000, 333}, 8, 2, 128, DType::kBF16, true},
      {{900}, {}, 8, 4, 64, DType::kF16, true},
      {{300, 77}, {400, 1000}, 4, 2, 128, DType::kF16, false},
  };
  uint64_t seed = 520;
  for (float stddev : {2.f, 4.f}) {
    for (int block_m : {64, 128}) {
      for (const Case& c : cases) {
        for (bool cols : {true, false}) {
          auto hp = MakeProblem(c, seed++);
          hp->FillRandom(seed++, stddev);
          SparseIndex idx =
              RandomIndex(hp->problem(), AllHeads(c.hq), block_m, 3, cols ? 90 : 0, seed++, true);
          ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
          CheckRun(engines_[4], *hp, &idx, 1 << 20,
                   absl::StrCat(Describe(c), " block_m=", block_m, " stddev=", stddev,
                                " cols=", cols));
        }
      }
    }
  }
}

// The Hopper sparse kernel's dynamic work list (CTAs take items from the schedule's counter
// after their first) against the static snake order (SPATTN_HOPPER_DYNAMIC=0, read once per
// process: set, then ReloadCudaKernelKnobs), on indexes of more items than the grid has CTAs
// (block_m 64: 2 per SM): every item runs once, on whichever CTA, to the same bits, launch after
// launch on one engine. (The engine's schedule zeroes the counter before each launch, so the
// kernel's own reset of it is not what this checks.)
TEST_F(CudaAttentionTest, SparseDynamicWorkListMatchesSnakeOrder) {
  const std::vector<Case> cases = {
      {{9000, 4100}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 16, 4, 64, DType::kF16, true},
  };
  uint64_t seed = 450;
  for (int block_m : {64, 128}) {
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      SparseIndex idx = RandomIndex(hp->problem(), AllHeads(c.hq), block_m, 3, 90, seed++, true);
      ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
      const int64_t items = static_cast<int64_t>(idx.num_heads()) * idx.num_blocks();
      ASSERT_GT(items, 600) << "fewer items than a grid of CTAs";
      const std::string config = absl::StrCat(Describe(c), " block_m=", block_m);
      std::vector<float> o[3], lse[3];
      for (int run = 0; run < 3; ++run) {
        if (run == 2) {
          setenv("SPATTN_HOPPER_DYNAMIC", "0", 1);
          ReloadCudaKernelKnobs();
        }
        auto dp = DeviceProblem::Create(0, *hp);
        ASSERT_TRUE(dp.ok()) << dp.status();
        ASSERT_TRUE((*dp)->Poison().ok());
        const absl::Status s = engines_[4]->RunSparse((*dp)->problem(), idx);
        if (run == 2) {
          unsetenv("SPATTN_HOPPER_DYNAMIC");
          ReloadCudaKernelKnobs();
        }
        ASSERT_TRUE(s.ok()) << s << " " << config;
        ASSERT_TRUE((*dp)->Download(&o[run], &lse[run]).ok());
        const AttentionProblem& p = (*dp)->problem();
        std::vector<int> heads(idx.heads.begin(), idx.heads.end());
        EXPECT_EQ(CheckAllWritten(p, heads, o[run], lse[run]), "") << config << " run " << run;
      }
      EXPECT_EQ(CheckRows(hp->problem(), &idx, SampleRows(hp->problem(), AllHeads(c.hq), 64), o[0],
                          lse[0]),
                "")
          << config;
      for (int run = 1; run < 3; ++run) {
        ASSERT_EQ(o[run].size(), o[0].size());
        EXPECT_EQ(0, std::memcmp(o[0].data(), o[run].data(), o[0].size() * 4))
            << config << " run " << run;
        EXPECT_EQ(0, std::memcmp(lse[0].data(), lse[run].data(), lse[0].size() * 4))
            << config << " run " << run;
      }
    }
  }
}

// The sparse stream's timeline (SPATTN_HOPPER_TRACE: the traced instance of the bf16 d = 128
// stream kernels, NOTES.md session 24) computes the same bytes as the default kernel, and writes
// a header and one record per item with keys; other shapes run the default kernel and write
// nothing. Rows alternate empty (the producer writes them; they have no record), one short
// range (one-tile items) and random ranges with columns.
TEST_F(CudaAttentionTest, SparseTimelineTraceMatchesDefault) {
  const std::vector<Case> cases = {
      {{9000, 4100}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 16, 4, 64, DType::kF16, true},
  };
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string trace = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sparse_trace.jsonl");
  // The timeline is the 64-key step's (a trace turns the block_m 64 pair step off), so both runs
  // take that step.
  const ScopedKnob pair_off("SPATTN_HOPPER_PAIR_STEP", "0");
  uint64_t seed = 470;
  for (int block_m : {64, 128}) {
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      const AttentionProblem& hprob = hp->problem();
      SparseIndex idx;
      InitSparseIndex(hprob, AllHeads(c.hq), block_m, &idx);
      std::mt19937_64 rng(seed++);
      std::vector<RowKeys> rows(idx.num_rows());
      int64_t with_keys = 0;
      for (int s = 0; s < idx.num_heads(); ++s) {
        for (int b = 0; b < idx.num_blocks(); ++b) {
          const BlockGeometry g = GetBlockGeometry(hprob, idx, b);
          RowKeys& row = rows[idx.row(s, b)];
          const int kind = (s + b) % 3;
          if (kind == 0) continue;
          ++with_keys;
          if (kind == 1) {
            const int64_t len = 1 + static_cast<int64_t>(rng() % block_m);
            row.AddRange(std::max<int64_t>(0, g.key_end - len), g.key_end);
          } else {
            for (int i = 0; i < 3; ++i) {
              const int64_t st = rng() % g.key_end;
              row.AddRange(st, st + 1 + rng() % 300);
            }
            for (int i = 0; i < 60; ++i) row.AddCol(rng() % g.key_end);
          }
          row.Normalize(g.key_end, /*min_run=*/1 << 30);
        }
      }
      CompactRows(&rows, &idx);
      ASSERT_TRUE(ValidateSparseIndex(hprob, idx).ok());
      ASSERT_GT(static_cast<int64_t>(idx.num_heads()) * idx.num_blocks(), 600);
      const std::string config = absl::StrCat(Describe(c), " block_m=", block_m);
      const bool traced = c.dtype == DType::kBF16 && c.d == 128;
      std::remove(trace.c_str());
      std::vector<float> o[2], lse[2];
      RunSparseWithAndWithoutKnob(*hp, idx, "SPATTN_HOPPER_TRACE", trace, config, o, lse);
      if (HasFatalFailure()) return;
      ExpectCheckedAndKnobIdentical(*hp, idx, c.hq, o, lse, config);
      // The traced launch wrote a header and one record per item with keys.
      std::ifstream in(trace);
      int64_t lines = 0;
      for (std::string l; std::getline(in, l);) ++lines;
      EXPECT_EQ(lines, traced ? with_keys + 1 : 0) << config;
    }
  }
}

// The sparse stream's TMA-store epilogue (kFlagTmaStore, the default for batch 1: O staged in the
// Q buffer, stored by TMA boxes of 16 rows, the last block's rows past the sequence clipped by
// the tensor's end; NOTES.md session 25) writes the same bytes as the 16-byte stores
// (SPATTN_HOPPER_TMA_STORE=0), and the reference's values: batch-1 sequences ending inside a
// block (and inside a warp's 16 rows), chunked prefill, both block sizes, head dims, dtypes, a
// non-causal one; and a varlen batch, where the launch keeps the stores.
TEST_F(CudaAttentionTest, SparseTmaStoreMatchesStores) {
  const std::vector<Case> cases = {
      {{4099}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 16, 4, 64, DType::kF16, true},
      {{3001}, {3001}, 4, 1, 128, DType::kF16, false},
      {{1, 63, 700}, {1, 100, 900}, 4, 2, 128, DType::kBF16, true},
  };
  uint64_t seed = 490;
  for (int block_m : {64, 128}) {
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      SparseIndex idx = RandomIndex(hp->problem(), AllHeads(c.hq), block_m, 3, 90, seed++, true);
      ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
      const std::string config = absl::StrCat(Describe(c), " block_m=", block_m);
      std::vector<float> o[2], lse[2];
      RunSparseWithAndWithoutKnob(*hp, idx, "SPATTN_HOPPER_TMA_STORE", "0", config, o, lse);
      if (HasFatalFailure()) return;
      ASSERT_EQ(o[0].size(), o[1].size());
      ExpectCheckedAndKnobIdentical(*hp, idx, c.hq, o, lse, config);
    }
  }
}

// The sparse stream's K/V ring chosen per launch (session 31, s31-sparse; PersistTraits::kKStages
// of session 30, s30-ring): one kernel holding 2 K + 2 V slots ("k2") and 2 K + 3 V slots ("v3")
// beside two Q buffers, v3 where the schedule's mean item cost is small. Every ring loads the
// same tiles in the same order: byte-identical O and LSE for the default (the choice), the k2
// kernel alone (SPATTN_HOPPER_SPARSE_RING=22), always v3 (23), and the choice with bounds that
// take k2 (SPATTN_HOPPER_RING_V3_COST=0) and v3 (100000), ranges + columns (packed tails: tile
// key lists next to the K slot), batch 1 and varlen, bf16 / fp16, causal or not, and the
// reference's values (block_m 128 d 128).
TEST_F(CudaAttentionTest, SparseRingChoiceMatchesEveryRing) {
  const std::vector<Case> cases = {
      {{4099}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 8, 4, 128, DType::kF16, true},
      {{3001}, {3001}, 4, 1, 128, DType::kBF16, false},
      {{1, 63, 700, 2100}, {1, 100, 900, 2100}, 4, 2, 128, DType::kF16, true},
  };
  const std::vector<std::pair<const char*, const char*>> knobs = {
      {"SPATTN_HOPPER_SPARSE_RING", "22"},
      {"SPATTN_HOPPER_SPARSE_RING", "23"},
      {"SPATTN_HOPPER_RING_V3_COST", "0"},
      {"SPATTN_HOPPER_RING_V3_COST", "100000"},
  };
  uint64_t seed = 3131;
  for (const Case& c : cases) {
    auto hp = MakeProblem(c, seed++);
    SparseIndex idx = RandomIndex(hp->problem(), AllHeads(c.hq), 128, 3, 90, seed++, true);
    ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
    const std::string config = absl::StrCat(Describe(c), " block_m=128");
    std::vector<float> o0, lse0;
    for (const auto& [knob, value] : knobs) {
      std::vector<float> o[2], lse[2];
      RunSparseWithAndWithoutKnob(*hp, idx, knob, value, config, o, lse);
      if (HasFatalFailure()) return;
      if (o0.empty()) {
        o0 = o[0], lse0 = lse[0];
        EXPECT_EQ(
            CheckRows(hp->problem(), &idx, SampleRows(hp->problem(), AllHeads(c.hq), 64), o0, lse0),
            "")
            << config;
      }
      for (int run = 0; run < 2; ++run) {
        ASSERT_EQ(o0.size(), o[run].size());
        EXPECT_EQ(0, std::memcmp(o0.data(), o[run].data(), o0.size() * 4))
            << config << " " << knob << "=" << value << " run " << run;
        EXPECT_EQ(0, std::memcmp(lse0.data(), lse[run].data(), lse0.size() * 4))
            << config << " " << knob << "=" << value << " run " << run;
      }
    }
  }
}

// The sparse stream's next tile descriptor read under the current tile's GEMMs
// (SPATTN_HOPPER_EARLY_DESC=1; session 32, s32-sparse) against the read at the step's start
// (the default, 0): the same arithmetic, so O and LSE byte for byte, and the reference's values. Long
// ranges (many tiles of one item), short items, gathered columns and packed range tails (mixed
// tiles), batch 1 and varlen, bf16 / fp16, causal or not; under both rings of the per-launch
// choice (SPATTN_HOPPER_SPARSE_RING 22 / 23 set around the pair). Also =2 (range tiles only,
// session 33).
TEST_F(CudaAttentionTest, SparseEarlyDescMatchesLateDesc) {
  const std::vector<Case> cases = {
      {{4099}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 8, 4, 128, DType::kF16, true},
      {{3001}, {3001}, 4, 1, 128, DType::kBF16, false},
      {{1, 63, 700, 2100}, {1, 100, 900, 2100}, 4, 2, 128, DType::kF16, true},
  };
  uint64_t seed = 3232;
  for (const char* ring : {"22", "23"}) {
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      // Short items (random ranges + columns), then long ones (LongItemsIndex).
      for (const bool short_items : {true, false}) {
        SparseIndex idx;
        if (short_items) {
          idx = RandomIndex(hp->problem(), AllHeads(c.hq), 128, 3, 90, seed++, true);
        } else {
          idx = LongItemsIndex(hp->problem(), AllHeads(c.hq), 128, seed++);
        }
        const bool cols = short_items;
        ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
        const std::string config =
            absl::StrCat(Describe(c), " block_m=128 ring=", ring, cols ? " short" : " long");
        for (const char* ed : {"1", "2"}) {
          setenv("SPATTN_HOPPER_SPARSE_RING", ring, 1);
          std::vector<float> o[2], lse[2];
          RunSparseWithAndWithoutKnob(*hp, idx, "SPATTN_HOPPER_EARLY_DESC", ed, config, o, lse);
          unsetenv("SPATTN_HOPPER_SPARSE_RING");
          ReloadCudaKernelKnobs();
          if (HasFatalFailure()) return;
          ASSERT_EQ(o[0].size(), o[1].size());
          ExpectCheckedAndKnobIdentical(*hp, idx, c.hq, o, lse, absl::StrCat(config, " ed=", ed));
        }
      }
    }
  }
}

// An empty row gives O = 0 and LSE = -inf; rows of heads outside the index stay untouched.
TEST_F(CudaAttentionTest, EmptyRowsAndUntouchedHeads) {
  Case c{{130}, {}, 4, 2, 64, DType::kBF16, true};
  auto hp = MakeProblem(c, 500);
  SparseIndex idx;
  InitSparseIndex(hp->problem(), {2}, 64, &idx);
  std::vector<RowKeys> rows(idx.num_rows());
  rows[1].AddRange(0, 10);
  rows[1].Normalize(128);
  CompactRows(&rows, &idx);
  auto dp = DeviceProblem::Create(0, *hp);
  ASSERT_TRUE(dp.ok());
  ASSERT_TRUE((*dp)->Poison().ok());
  ASSERT_TRUE(engines_[0]->RunSparse((*dp)->problem(), idx).ok());
  std::vector<float> o, lse;
  ASSERT_TRUE((*dp)->Download(&o, &lse).ok());
  const int tq = 130, d = 64;
  for (int t = 0; t < tq; ++t) {
    const bool empty = t < 64 || t >= 128;  // blocks 0 and 2 are empty
    for (int h = 0; h < 4; ++h) {
      const float l = lse[h * tq + t];
      const float v = o[(t * 4 + h) * d];
      if (h != 2) {
        EXPECT_TRUE(std::isnan(l) && std::isnan(v)) << "head " << h << " token " << t;
      } else if (empty) {
        EXPECT_EQ(l, -INFINITY) << t;
        EXPECT_EQ(v, 0.f) << t;
      } else {
        EXPECT_TRUE(std::isfinite(l) && std::isfinite(v)) << t;
      }
    }
  }
  EXPECT_EQ(CheckRows(hp->problem(), &idx, SampleRows(hp->problem(), {2}, 1000), o, lse), "");
}

// NaN in Q poisons its own row only; NaN in K poisons the rows that see the key; NaN in V the
// rows that see it (and, through 0 x NaN in the tensor-core product, rows that share its key
// tile while the causal mask hides it from them, as in FlashAttention), never earlier tiles.
// The NaN sits at token 400, in the last query block of every kernel shape (128-row blocks;
// 192-row blocks of the Hopper d = 64 kernel: [384, 512)) and in key tile [384, 448) / [384, 512):
// no row before 384 belongs to a block whose keys reach that tile.
TEST_F(CudaAttentionTest, NanInputsStayWhereTheyBelong) {
  Case c{{512}, {}, 1, 1, 64, DType::kBF16, true};
  for (int variant : {1, 5}) {
    for (int which = 0; which < 3; ++which) {
      auto hp = MakeProblem(c, 600 + which);
      const int tok = 400;
      std::vector<uint8_t>& buf = which == 0   ? hp->q_bytes()
                                  : which == 1 ? hp->k_bytes()
                                               : hp->v_bytes();
      reinterpret_cast<uint16_t*>(buf.data())[tok * 64 + 5] = 0x7fc0;  // bf16 NaN
      auto dp = DeviceProblem::Create(0, *hp);
      ASSERT_TRUE(dp.ok());
      ASSERT_TRUE((*dp)->Poison().ok());
      ASSERT_TRUE(engines_[variant - 1]->RunDense((*dp)->problem()).ok());
      std::vector<float> o, lse;
      ASSERT_TRUE((*dp)->Download(&o, &lse).ok());
      for (int t = 0; t < 512; ++t) {
        // A NaN in Q or K spoils whole rows; one in V only its own dimension (5).
        const bool nan = std::isnan(o[t * 64 + (which == 2 ? 5 : 7)]);
        const std::string where = absl::StrCat("variant=", variant, " which=", which, " token ", t);
        if (which == 0) {
          EXPECT_EQ(nan, t == tok) << where;
        } else if (which == 1) {
          EXPECT_EQ(nan, t >= tok) << where;
        } else {
          if (t >= tok) {
            EXPECT_TRUE(nan) << where;
          }
          if (t < 384) {
            EXPECT_FALSE(nan) << where;  // key tile [384, ...) never reaches them
          }
        }
      }
    }
  }
}

// Varlen batches: a NaN / Inf in one sequence's K or V never reaches another sequence, even
// where a key tile runs past the end of its sequence into the next one (TMA tiles are not
// clipped to the sequence).
TEST_F(CudaAttentionTest, NanInNextSequenceStaysThere) {
  for (bool causal : {true, false}) {
    Case c{{70, 64, 100}, {70, 64, 100}, 2, 1, 128, DType::kBF16, causal};
    for (int variant : {1, 4, 5, 6}) {
      auto hp = MakeProblem(c, 650);
      for (std::vector<uint8_t>* buf : {&hp->k_bytes(), &hp->v_bytes()}) {
        uint16_t* x = reinterpret_cast<uint16_t*>(buf->data());
        for (int tok = 70; tok < 74; ++tok) {  // the first keys of sequence 1
          for (int i = 0; i < 128; ++i) x[tok * 128 + i] = (i % 2 == 0) ? 0x7fc0 : 0x7f80;
        }
      }
      auto dp = DeviceProblem::Create(0, *hp);
      ASSERT_TRUE(dp.ok());
      ASSERT_TRUE((*dp)->Poison().ok());
      ASSERT_TRUE(engines_[variant - 1]->RunDense((*dp)->problem()).ok());
      std::vector<float> o, lse;
      ASSERT_TRUE((*dp)->Download(&o, &lse).ok());
      const std::string config = absl::StrCat(Describe(c), " variant=", variant);
      // Sequences 0 and 2 are clean and fully checked; sequence 1 holds the NaNs.
      std::vector<cuda_test::SampledRow> rows;
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < 70; ++t) rows.push_back({h, t});
        for (int t = 134; t < 234; ++t) rows.push_back({h, t});
      }
      EXPECT_EQ(CheckRows(hp->problem(), nullptr, rows, o, lse), "") << config;
    }
  }
}

// The host-buffer path: strided host tensors in, only the index's heads written back.
TEST_F(CudaAttentionTest, HostPathWithStridedTensorsAndHeadSubset) {
  const int tq = 200, hq = 4, hkv = 2, d = 128;
  ProblemShape s;
  s.q_lens = {tq};
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  HostProblem packed(s);
  packed.FillRandom(700);
  // A packed QKV buffer [tokens, hq + 2 hkv, d] like an LLM's fused projection.
  const int width = (hq + 2 * hkv) * d;
  std::vector<uint16_t> qkv(static_cast<size_t>(tq) * width);
  const uint16_t* q = reinterpret_cast<const uint16_t*>(packed.q_bytes().data());
  const uint16_t* k = reinterpret_cast<const uint16_t*>(packed.k_bytes().data());
  const uint16_t* v = reinterpret_cast<const uint16_t*>(packed.v_bytes().data());
  for (int t = 0; t < tq; ++t) {
    std::memcpy(&qkv[t * width], q + t * hq * d, hq * d * 2);
    std::memcpy(&qkv[t * width + hq * d], k + t * hkv * d, hkv * d * 2);
    std::memcpy(&qkv[t * width + (hq + hkv) * d], v + t * hkv * d, hkv * d * 2);
  }
  std::vector<uint16_t> out(static_cast<size_t>(tq) * hq * d * 2, 0x1234);  // stride 2x
  std::vector<float> lse(hq * tq, 42.f);
  AttentionProblem p = packed.problem();
  p.q = {qkv.data(), width, d};
  p.k = {qkv.data() + hq * d, width, d};
  p.v = {qkv.data() + (hq + hkv) * d, width, d};
  p.o = out.data();
  p.o_token_stride = 2 * hq * d;
  p.o_head_stride = d;
  p.maybe_lse = lse.data();
  SparseIndex idx;
  ASSERT_TRUE(BuildDenseIndex(p, {1, 3}, 64, &idx).ok());
  CudaStageTimes times;
  ASSERT_TRUE(engines_[0]->RunHost(p, &idx, &times).ok());
  EXPECT_GT(times.upload_seconds, 0);
  EXPECT_GT(times.kernel_seconds, 0);
  EXPECT_GT(times.download_seconds, 0);
  std::vector<float> o(static_cast<size_t>(tq) * hq * d);
  for (int t = 0; t < tq; ++t) {
    for (int h = 0; h < hq; ++h) {
      for (int c = 0; c < d; ++c) {
        const uint16_t raw = out[t * 2 * hq * d + h * d + c];
        if (h == 0 || h == 2) {
          ASSERT_EQ(raw, 0x1234) << "head " << h << " written";
          ASSERT_EQ(lse[h * tq + t], 42.f);
        }
        o[(t * hq + h) * d + c] = Bf16ToFloat(raw);
      }
    }
  }
  EXPECT_EQ(CheckRows(packed.problem(), &idx, SampleRows(packed.problem(), {1, 3}, 1000), o, lse),
            "");
  // Dense through the host path too.
  ASSERT_TRUE(engines_[1]->RunHost(p, nullptr, &times).ok());
  for (int t = 0; t < tq; ++t) {
    for (int h = 0; h < hq; ++h) {
      for (int c = 0; c < d; ++c)
        o[(t * hq + h) * d + c] = Bf16ToFloat(out[t * 2 * hq * d + h * d + c]);
    }
  }
  EXPECT_EQ(CheckRows(packed.problem(), nullptr, SampleRows(packed.problem(), AllHeads(hq), 1000),
                      o, lse),
            "");
}

// Long contexts (32K and 128K), rows sampled for the reference.
TEST_F(CudaAttentionTest, LongContextsMatchSampledReference) {
  struct Long {
    Case c;
    int block_m;
  };
  const std::vector<Long> cases = {
      {{{32768}, {}, 4, 1, 128, DType::kBF16, true}, 128},
      {{{131072}, {}, 2, 1, 128, DType::kBF16, true}, 128},
      {{{20000, 12768}, {40000, 12768}, 8, 8, 64, DType::kF16, true}, 64},
  };
  uint64_t seed = 800;
  for (const Long& l : cases) {
    auto hp = MakeProblem(l.c, seed++);
    const std::string config = Describe(l.c);
    CheckRun(engines_[1], *hp, nullptr, 48, config + " dense");
    CheckRun(engines_[2], *hp, nullptr, 48, config + " dense wgmma");
    CheckRun(engines_[3], *hp, nullptr, 48, config + " dense wgmma deep");
    CheckRun(engines_[4], *hp, nullptr, 48, config + " dense hopper (variant 5)");
    CheckRun(engines_[5], *hp, nullptr, 48, config + " dense hopper persistent (variant 6)");
    AShapeParams params;  // paper defaults: sink 128, local 3968
    SparseIndex ashape;
    ASSERT_TRUE(BuildAShapeIndex(hp->problem(), params, AllHeads(l.c.hq), l.block_m, &ashape).ok());
    CheckRun(engines_[2], *hp, &ashape, 48, config + " a_shape wgmma");
    CheckRun(engines_[4], *hp, &ashape, 48, config + " a_shape hopper");
    SparseIndex random =
        RandomIndex(hp->problem(), {0, l.c.hq - 1}, l.block_m, 4, 500, seed++, false);
    CheckRun(engines_[0], *hp, &random, 48, config + " random ranges+columns");
    CheckRun(engines_[3], *hp, &random, 48, config + " random ranges+columns wgmma deep");
    CheckRun(engines_[4], *hp, &random, 48, config + " random ranges+columns hopper");
  }
}

// ---- s36-sparse ----
// The pair step (SPATTN_HOPPER_PAIR_STEP=1, the default since session 38; block_m 64, d = 128: two
// 64-key tiles of an item per consumer step, the K slots interleaved as one 128-key tile) against
// the 64-key step (SPATTN_HOPPER_PAIR_STEP=0): both
// runs match the reference on 64 sampled rows of every head, and the pair step's O / LSE stay
// within rounding of the 64-key step's everywhere (not byte-identical: one row maximum and sum per
// 128 keys; its bytes do not depend on the schedule: SparsePairStepBytesIndependentOfSchedule,
// s36-sparse2). Short items (random ranges + columns: odd tile counts, one-tile items, gathered
// and packed tiles) and long ones (a sink, a window of up to 1500 keys, 40 columns in every other
// row); batch 1 (TMA-store epilogue), chunked, non-causal, varlen; dynamic work list on and off.
TEST_F(CudaAttentionTest, SparsePairStepMatches64KeyStep) {
  const std::vector<Case> cases = {
      {{4099}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 8, 4, 128, DType::kF16, true},
      {{3001}, {3001}, 4, 1, 128, DType::kBF16, false},
      {{1, 63, 700, 2100}, {1, 100, 900, 2100}, 4, 2, 128, DType::kF16, true},
      {{130, 64, 65}, {130, 64, 65}, 2, 1, 128, DType::kBF16, true},
  };
  uint64_t seed = 3636;
  for (const char* dyn : {"1", "0"}) {
    for (const Case& c : cases) {
      auto hp = MakeProblem(c, seed++);
      for (const bool short_items : {true, false}) {
        const SparseIndex idx = PairStepIndex(hp->problem(), c.hq, short_items, seed++);
        ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
        const std::string config = absl::StrCat(Describe(c), " block_m=64 pair dynamic=", dyn,
                                                short_items ? " short" : " long");
        setenv("SPATTN_HOPPER_DYNAMIC", dyn, 1);
        std::vector<float> o[2], lse[2];
        RunSparseWithAndWithoutKnob(*hp, idx, "SPATTN_HOPPER_PAIR_STEP", "0", config, o, lse);
        unsetenv("SPATTN_HOPPER_DYNAMIC");
        ReloadCudaKernelKnobs();
        if (HasFatalFailure()) return;
        ASSERT_EQ(o[0].size(), o[1].size());
        ASSERT_EQ(lse[0].size(), lse[1].size());
        const auto rows = SampleRows(hp->problem(), AllHeads(c.hq), 64);
        for (int run = 0; run < 2; ++run) {
          EXPECT_EQ(CheckRows(hp->problem(), &idx, rows, o[run], lse[run]), "")
              << config << " run " << run;
        }
        // Within rounding of each other: O is stored in 16 bits (a few ulps of |O| <= ~4).
        size_t bad_o = 0, bad_lse = 0;
        double max_o = 0, max_lse = 0;
        for (size_t i = 0; i < o[0].size(); ++i) {
          const double e = std::fabs(static_cast<double>(o[0][i]) - o[1][i]);
          max_o = std::max(max_o, e);
          if (!(e <= 2e-2 + 1e-2 * std::fabs(o[0][i]))) ++bad_o;
        }
        for (size_t i = 0; i < lse[0].size(); ++i) {
          if (std::isinf(lse[0][i]) || std::isinf(lse[1][i])) {
            if (lse[0][i] != lse[1][i]) ++bad_lse;
            continue;
          }
          const double e = std::fabs(static_cast<double>(lse[0][i]) - lse[1][i]);
          max_lse = std::max(max_lse, e);
          if (!(e <= 1e-3 + 1e-4 * std::fabs(lse[0][i]))) ++bad_lse;
        }
        EXPECT_EQ(bad_o, 0u) << config << " max |dO| " << max_o;
        EXPECT_EQ(bad_lse, 0u) << config << " max |dLSE| " << max_lse;
        std::printf("%s: max |dO| %.3g, max |dLSE| %.3g\n", config.c_str(), max_o, max_lse);
      }
    }
  }
}

// ---- s36-sparse2 ----
// The pair step's bytes follow the item, not the work schedule (SPATTN_HOPPER_PAIR_STEP=1; block_m
// 64, d = 128). A pair's two tiles sit in S's column halves by the ring's slot parity, which
// depends on the CTA's earlier items; the row sum takes each half alone and adds the two
// (ConsumerStep::ExpRow<true>: a + b == b + a) and P V the item's key order, so O / LSE are the
// same bits under the dynamic work list launch after launch, in the snake order
// (SPATTN_HOPPER_DYNAMIC=0) and with the TMA-store epilogue off (SPATTN_HOPPER_TMA_STORE=0): the
// checks SparseDynamicWorkListMatchesSnakeOrder and SparseTmaStoreMatchesStores that failed in
// session 36's combined run with the pair step on. More items than the grid has CTAs, odd tile
// counts and one-tile items (random ranges + columns), batch 1 and varlen, bf16 / fp16; run 0
// against the reference.
TEST_F(CudaAttentionTest, SparsePairStepBytesIndependentOfSchedule) {
  const std::vector<Case> cases = {
      {{9000, 4100}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 16, 4, 128, DType::kF16, true},
      {{1, 63, 700, 2100}, {1, 100, 900, 2100}, 8, 2, 128, DType::kBF16, true},
  };
  // (knob, value) per run; the pair step is on in every run.
  const std::vector<std::pair<const char*, const char*>> runs = {
      {nullptr, nullptr}, {nullptr, nullptr}, {nullptr, nullptr},
      {"SPATTN_HOPPER_DYNAMIC", "0"}, {"SPATTN_HOPPER_TMA_STORE", "0"},
  };
  const ScopedKnob pair_on("SPATTN_HOPPER_PAIR_STEP", "1");
  uint64_t seed = 3737;
  for (const Case& c : cases) {
    auto hp = MakeProblem(c, seed++);
    SparseIndex idx = RandomIndex(hp->problem(), AllHeads(c.hq), 64, 3, 90, seed++, true);
    ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
    const std::string config = absl::StrCat(Describe(c), " block_m=64 pair");
    std::vector<std::vector<float>> o(runs.size()), lse(runs.size());
    for (size_t run = 0; run < runs.size(); ++run) {
      RunSparseUnderKnob(*hp, idx, runs[run].first, runs[run].second, config,
                         static_cast<int>(run), &o[run], &lse[run]);
    }
    ExpectRunsMatchFirst(*hp, idx, c.hq, o, lse, config);
  }
}

// ---- s38-sparse ----
// The pair step with 3 V slots (SPATTN_HOPPER_PAIR_STEP=2; block_m 64, d = 128: V slot = position
// % 3, each P half's V descriptor by its tile's position; no alignment slack) computes what the
// 2-V pair step computes in the same order, so its O / LSE must be the 2-V step's bytes: run 0
// (PAIR_STEP=1, dynamic work list) against the reference, then PAIR_STEP=2 under the dynamic work
// list twice, the snake order (SPATTN_HOPPER_DYNAMIC=0) and the stores epilogue
// (SPATTN_HOPPER_TMA_STORE=0), each byte-identical to run 0. Short items (odd tile counts, one-tile
// items, packed tails) and long ones, more items than CTAs, bf16 / fp16, batch 1 and varlen.
TEST_F(CudaAttentionTest, SparsePairStepThreeVSlotsMatchesTwo) {
  const std::vector<Case> cases = {
      {{9000, 4100}, {}, 8, 2, 128, DType::kBF16, true},
      {{5000}, {7000}, 16, 4, 128, DType::kF16, true},
      {{1, 63, 700, 2100}, {1, 100, 900, 2100}, 8, 2, 128, DType::kBF16, true},
      {{3001}, {3001}, 4, 1, 128, DType::kBF16, false},
  };
  struct Run {
    const char* pair;
    const char* knob;
    const char* value;
  };
  const std::vector<Run> runs = {
      {"1", nullptr, nullptr}, {"2", nullptr, nullptr}, {"2", nullptr, nullptr},
      {"2", "SPATTN_HOPPER_DYNAMIC", "0"}, {"2", "SPATTN_HOPPER_TMA_STORE", "0"},
  };
  uint64_t seed = 3838;
  for (const Case& c : cases) {
    auto hp = MakeProblem(c, seed++);
    for (const bool short_items : {true, false}) {
      const SparseIndex idx = PairStepIndex(hp->problem(), c.hq, short_items, seed++);
      ASSERT_TRUE(ValidateSparseIndex(hp->problem(), idx).ok());
      const std::string config =
          absl::StrCat(Describe(c), " block_m=64 pair 3V", short_items ? " short" : " long");
      std::vector<std::vector<float>> o(runs.size()), lse(runs.size());
      for (size_t run = 0; run < runs.size(); ++run) {
        const ScopedKnob pair("SPATTN_HOPPER_PAIR_STEP", runs[run].pair);
        RunSparseUnderKnob(*hp, idx, runs[run].knob, runs[run].value, config,
                           static_cast<int>(run), &o[run], &lse[run]);
      }
      ExpectRunsMatchFirst(*hp, idx, c.hq, o, lse, config);
    }
  }
}

}  // namespace
}  // namespace spattn
