// Saap's query classifier: the KL loss falls, held-out top-l bucket mass beats random by a wide
// margin, the exported (batch-norm folded) model keeps the trained fit, errors are named.
#include "kernels/calibration/query_classifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "kernels/builders/saap_math.h"

namespace spattn {
namespace {

constexpr int kDim = 32, kBuckets = 16;

// Queries of class c are 3 u_c + noise (u_c random unit vectors, fixed by model_seed); their
// target puts 0.7 on bucket c, 0.2 on bucket (c + 5) % C and 0.1 spread evenly.
struct Examples {
  std::vector<float> q, t;
  int64_t n = 0;
};

Examples Make(int64_t n, uint64_t seed, uint64_t model_seed = 42) {
  std::mt19937_64 model(model_seed), rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> u(kBuckets * kDim);
  for (int c = 0; c < kBuckets; ++c) {
    double ss = 0;
    for (int j = 0; j < kDim; ++j) {
      u[c * kDim + j] = g(model);
      ss += u[c * kDim + j] * u[c * kDim + j];
    }
    for (int j = 0; j < kDim; ++j) u[c * kDim + j] /= static_cast<float>(std::sqrt(ss));
  }
  std::uniform_int_distribution<int> pick(0, kBuckets - 1);
  Examples ex;
  ex.n = n;
  for (int64_t i = 0; i < n; ++i) {
    const int c = pick(rng);
    for (int j = 0; j < kDim; ++j) ex.q.push_back(3.f * u[c * kDim + j] + 0.3f * g(rng));
    for (int b = 0; b < kBuckets; ++b) {
      float v = 0.1f / kBuckets;
      if (b == c) v += 0.7f;
      if (b == (c + 5) % kBuckets) v += 0.2f;
      ex.t.push_back(v);
    }
  }
  return ex;
}

ClassifierTrainOptions SmallOptions() {
  ClassifierTrainOptions o;
  o.hidden = 64;
  o.steps = 300;
  o.batch_size = 128;
  o.learning_rate = 2e-3f;
  return o;
}

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + from, v.begin() + to, 0.0) / (to - from);
}

TEST(QueryClassifierTest, KlLossDecreases) {
  const Examples ex = Make(4000, 1);
  for (bool bn : {true, false}) {
    ClassifierTrainOptions o = SmallOptions();
    o.batch_norm = bn;
    auto r = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->loss.size(), 300u);
    const double first = Mean(r->loss, 0, 20), last = Mean(r->loss, 280, 300);
    EXPECT_LT(last, 0.3 * first) << "batch_norm " << bn << ": " << first << " -> " << last;
    // The target's own entropy bounds the KL from below at 0; the fit gets close to it.
    EXPECT_LT(last, 0.1) << "batch_norm " << bn;
    ASSERT_EQ(r->layers.size(), 2u);
    EXPECT_TRUE(CheckClassifier(r->layers, kDim, kBuckets, 0).ok());
    EXPECT_TRUE(r->layers[0].relu);
    EXPECT_FALSE(r->layers[1].relu);
    // The exported model (batch norm folded with running statistics) keeps the fit.
    EXPECT_LT(MeanClassifierKl(r->layers, ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets),
              2 * last + 0.02)
        << "batch_norm " << bn;
  }
}

TEST(QueryClassifierTest, HeldOutTopBucketsBeatRandom) {
  const Examples train = Make(4000, 2), held = Make(1000, 3);
  auto r =
      TrainQueryClassifier(train.q.data(), train.t.data(), train.n, kDim, kBuckets, SmallOptions());
  ASSERT_TRUE(r.ok());
  // Random choice of 2 of 16 buckets catches 2/16 of the mass on average; an untrained
  // classifier (0 steps) is that baseline in practice.
  ClassifierTrainOptions untrained = SmallOptions();
  untrained.steps = 0;
  auto r0 =
      TrainQueryClassifier(train.q.data(), train.t.data(), train.n, kDim, kBuckets, untrained);
  ASSERT_TRUE(r0.ok());
  const double trained =
      MeanTopBucketMass(r->layers, held.q.data(), held.t.data(), held.n, kDim, kBuckets, 2);
  const double baseline =
      MeanTopBucketMass(r0->layers, held.q.data(), held.t.data(), held.n, kDim, kBuckets, 2);
  EXPECT_GE(trained, 0.85);  // the best possible is 0.7 + 0.2 + 2 * 0.1/16 = 0.9125
  EXPECT_LT(baseline, 0.35);
  EXPECT_GT(trained, 3 * baseline);
}

TEST(QueryClassifierTest, DeterministicForASeed) {
  const Examples ex = Make(500, 4);
  ClassifierTrainOptions o = SmallOptions();
  o.steps = 20;
  auto a = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
  auto b = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->layers[0].weight, b->layers[0].weight);
  EXPECT_EQ(a->layers[1].bias, b->layers[1].bias);
  EXPECT_EQ(a->loss, b->loss);
}

TEST(QueryClassifierTest, RejectsBadInputsByName) {
  Examples ex = Make(10, 5);
  ClassifierTrainOptions o = SmallOptions();
  o.hidden = 0;
  auto r = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("classifier.hidden"), std::string::npos);
  o = SmallOptions();
  o.learning_rate = -1;
  r = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
  EXPECT_NE(std::string(r.status().message()).find("classifier.learning_rate"), std::string::npos);
  o = SmallOptions();
  o.batch_size = 1;
  r = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, o);
  EXPECT_NE(std::string(r.status().message()).find("classifier.batch_size"), std::string::npos);
  ex.t[3 * kBuckets + 2] = -0.5f;
  r = TrainQueryClassifier(ex.q.data(), ex.t.data(), ex.n, kDim, kBuckets, SmallOptions());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("targets row 3"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace spattn
