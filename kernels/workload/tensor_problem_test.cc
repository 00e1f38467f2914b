#include "kernels/workload/tensor_problem.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

Workload Generate(std::vector<int32_t> q_lens, std::vector<int32_t> k_lens, DType t) {
  WorkloadOptions o;
  o.shape.q_lens = std::move(q_lens);
  o.shape.k_lens = std::move(k_lens);
  o.shape.num_q_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 32;
  o.shape.dtype = t;
  auto w = GenerateWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(*w);
}

void ExpectSameData(const HostProblem& a, const HostProblem& b) {
  EXPECT_EQ(a.problem().cu_seqlens_q, b.problem().cu_seqlens_q);
  EXPECT_EQ(a.problem().cu_seqlens_k, b.problem().cu_seqlens_k);
  EXPECT_EQ(a.problem().num_q_heads, b.problem().num_q_heads);
  EXPECT_EQ(a.problem().num_kv_heads, b.problem().num_kv_heads);
  EXPECT_EQ(a.problem().dtype, b.problem().dtype);
  EXPECT_EQ(const_cast<HostProblem&>(a).q_bytes(), const_cast<HostProblem&>(b).q_bytes());
  EXPECT_EQ(const_cast<HostProblem&>(a).k_bytes(), const_cast<HostProblem&>(b).k_bytes());
  EXPECT_EQ(const_cast<HostProblem&>(a).v_bytes(), const_cast<HostProblem&>(b).v_bytes());
}

TEST(TensorProblemTest, ThdRoundTripWithChunkedQueries) {
  Workload w = Generate({50}, {120}, DType::kBF16);
  auto t = ProblemToTensors(w.problem());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at("q").shape, (std::vector<int64_t>{50, 4, 32}));
  EXPECT_EQ(t->at("k").shape, (std::vector<int64_t>{120, 2, 32}));
  auto back = ProblemFromTensors(t->at("q"), t->at("k"), t->at("v"), {});
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameData(*w.host, **back);
  EXPECT_TRUE((*back)->problem().causal);
}

TEST(TensorProblemTest, BhsdBatchRoundTripAndThroughFiles) {
  Workload w = Generate({40, 40, 40}, {}, DType::kF16);
  auto t = ProblemToTensors(w.problem(), TensorLayout::kBHSD);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at("q").shape, (std::vector<int64_t>{3, 4, 40, 32}));
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/qkv.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, *t).ok());
  auto q = ReadTensorSpec(path + ":q");
  auto k = ReadTensorSpec(path + ":k");
  auto v = ReadTensorSpec(path + ":v");
  ASSERT_TRUE(q.ok() && k.ok() && v.ok());
  auto back = ProblemFromTensors(*q, *k, *v, {});
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameData(*w.host, **back);
  EXPECT_EQ(ProblemToTensors(w.problem(), TensorLayout::kTHD).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorProblemTest, HsdLayoutAndDtypeConversion) {
  // q [heads=2, tokens=3, dim=8] with value = 100*h + 10*t + d.
  std::vector<float> qv, kv;
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int d = 0; d < 8; ++d) qv.push_back(100 * h + 10 * t + d);
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < 8; ++d) kv.push_back(10 * t + d);
  auto q = HostTensor::FromFloats(qv, {2, 3, 8}, DType::kF32);
  auto k = HostTensor::FromFloats(kv, {1, 3, 8}, DType::kF32);
  ASSERT_TRUE(q.ok() && k.ok());
  TensorProblemOptions opt;
  opt.layout = TensorLayout::kHSD;
  opt.dtype = DType::kBF16;
  opt.causal = false;
  auto p = ProblemFromTensors(*q, *k, *k, opt);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->problem().dtype, DType::kBF16);
  EXPECT_FALSE((*p)->problem().causal);
  const uint16_t* qb = reinterpret_cast<const uint16_t*>((*p)->q_bytes().data());
  // Element [token 2, head 1, d 5] = 125.
  EXPECT_EQ(Bf16ToFloat(qb[(2 * 2 + 1) * 8 + 5]), 125.f);
}

TEST(TensorProblemTest, MismatchesNameTheTensor) {
  auto make = [](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return *HostTensor::FromFloats(std::vector<float>(n, 1.f), shape, DType::kF32);
  };
  struct Case {
    HostTensor q, k, v;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {make({4, 2, 8}), make({4, 1, 8}), make({4, 1, 16}), "v: shape"},
      {make({4, 2, 16}), make({4, 1, 8}), make({4, 1, 8}), "q: head_dim"},
      {make({4, 3, 8}), make({4, 2, 8}), make({4, 2, 8}), "not a multiple"},
      {make({5, 2, 8}), make({4, 1, 8}), make({4, 1, 8}), "suffix"},
      {make({4, 8}), make({4, 1, 8}), make({4, 1, 8}), "q: expected rank"},
      {make({2, 2, 4, 8}), make({1, 1, 4, 8}), make({1, 1, 4, 8}), "q: batch"},
      {make({4, 2, 12}), make({4, 1, 12}), make({4, 1, 12}), "head_dim must be a multiple"},
  };
  for (const Case& c : cases) {
    auto p = ProblemFromTensors(c.q, c.k, c.v, {});
    ASSERT_FALSE(p.ok()) << c.needle;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.needle;
    EXPECT_TRUE(absl::StrContains(p.status().message(), c.needle)) << p.status();
  }
  EXPECT_EQ(ParseTensorLayout("xyz").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
