// Saap calibration on a planted-cluster workload: k-means objective falls monotonically per kv
// head, the classifier loss falls, the assets feed BuildSaapIndex, held-out queries' top-l
// buckets carry most of their mass; the long-range filter and errors.
#include "kernels/calibration/saap_calibration.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kernels/builders/saap.h"
#include "kernels/builders/testing/method_testing.h"

namespace spattn {
namespace {

using method_testing::ClusterSpec;
using method_testing::PlantClusters;
using method_testing::RandomProblem;

std::unique_ptr<HostProblem> Planted(std::vector<int32_t> lens, uint64_t seed, int segment = 1) {
  ProblemShape s;
  s.q_lens = lens;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.dtype = DType::kBF16;
  auto hp = RandomProblem(s, seed);
  ClusterSpec spec;
  spec.segment = segment;
  PlantClusters(hp.get(), spec, seed + 1);
  return hp;
}

SaapCalibrationOptions SmallOptions() {
  SaapCalibrationOptions o;
  o.kmeans.num_centroids = 16;
  o.kmeans.iterations = 12;
  o.kmeans.init = KMeansInit::kKMeansPlusPlus;
  o.classifier.hidden = 64;
  o.classifier.steps = 250;
  o.local_tokens = 64;
  o.long_range_distance = 0;
  o.max_queries = 3000;
  return o;
}

TEST(SaapCalibrationTest, CalibratesPlantedClusters) {
  auto calib = Planted({1200, 900}, 10);
  LayerAssets assets;
  assets.rope_theta = ClusterSpec().rope_theta;
  SaapCalibrationReport report;
  const SaapCalibrationOptions o = SmallOptions();
  ASSERT_TRUE(CalibrateSaap(calib->problem(), o, &assets, &report).ok());
  ASSERT_EQ(assets.num_centroids, 16);
  ASSERT_EQ(assets.centroids.size(), 2u);
  ASSERT_EQ(assets.classifiers.size(), 4u);
  for (const std::vector<double>& obj : report.kmeans_objective) {
    ASSERT_EQ(obj.size(), 13u);
    for (size_t i = 1; i < obj.size(); ++i) EXPECT_LE(obj[i], obj[i - 1] + 1e-3);
  }
  for (int h = 0; h < 4; ++h) {
    const std::vector<double>& loss = report.classifier_loss[h];
    const double first = std::accumulate(loss.begin(), loss.begin() + 20, 0.0) / 20;
    const double last = std::accumulate(loss.end() - 20, loss.end(), 0.0) / 20;
    EXPECT_LT(last, 0.5 * first) << "q head " << h;
    // Rows at positions >= sink + local = 65 have far keys: 1135 + 835 < max_queries.
    EXPECT_EQ(report.training_queries[h], 1970);
  }
  // The assets are what the builder reads.
  SaapParams params;
  params.num_centroids = 16;
  params.top_l = 2;
  params.local_tokens = 64;
  SparseIndex idx;
  ASSERT_TRUE(BuildSaapIndex(calib->problem(), params, {0, 1, 2, 3}, &assets, 64, &idx).ok());

  // Held-out prompt of the same "model": the top-2 of 16 buckets hold most of the mass.
  auto held = Planted({1000}, 20);
  for (int h = 0; h < 4; ++h) {
    auto ex = CollectClassifierExamples(held->problem(), assets, h, o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    const double mass = MeanTopBucketMass(assets.classifiers[h], ex->queries.data(),
                                          ex->targets.data(), ex->count, 64, 16, 2);
    EXPECT_GE(mass, 0.85) << "q head " << h << " (random: 2/16)";
  }
}

TEST(SaapCalibrationTest, LongRangeFilter) {
  auto hp = Planted({1500}, 30);
  LayerAssets assets;
  assets.rope_theta = ClusterSpec().rope_theta;
  SaapCalibrationOptions o = SmallOptions();
  o.classifier.steps = 5;
  ASSERT_TRUE(CalibrateSaap(hp->problem(), o, &assets, nullptr).ok());
  auto all = CollectClassifierExamples(hp->problem(), assets, 0, o);
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->long_range_filter_used);
  // Queries whose best key is >= 300 back: fewer examples, filter on.
  o.long_range_distance = 300;
  auto far = CollectClassifierExamples(hp->problem(), assets, 0, o);
  ASSERT_TRUE(far.ok());
  EXPECT_TRUE(far->long_range_filter_used);
  EXPECT_LT(far->count, all->count);
  EXPECT_GT(far->count, 0);
  // Impossible distance: nobody qualifies, the filter is dropped rather than failing.
  o.long_range_distance = 100000;
  auto none = CollectClassifierExamples(hp->problem(), assets, 0, o);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->long_range_filter_used);
  EXPECT_EQ(none->count, all->count);
  // Targets are distributions.
  for (int64_t e = 0; e < far->count; ++e) {
    double s = 0;
    for (int c = 0; c < 16; ++c) s += far->targets[e * 16 + c];
    ASSERT_NEAR(s, 1.0, 1e-4);
  }
}

TEST(SaapCalibrationTest, ErrorsAreNamed) {
  auto hp = Planted({100}, 40);
  LayerAssets assets;
  SaapCalibrationOptions o = SmallOptions();
  o.kmeans.num_centroids = 200;
  absl::Status st = CalibrateSaap(hp->problem(), o, &assets, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("kmeans.num_centroids (200)"), std::string::npos) << st;
  o = SmallOptions();
  o.local_tokens = 500;  // longer than the sequence: no query has far keys
  st = CalibrateSaap(hp->problem(), o, &assets, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("no query of q head 0"), std::string::npos) << st;
  o = SmallOptions();
  o.sink_tokens = -1;
  st = CalibrateSaap(hp->problem(), o, &assets, nullptr);
  EXPECT_NE(std::string(st.message()).find("calibration.sink_tokens"), std::string::npos) << st;
  o = SmallOptions();
  o.max_queries = 0;
  st = CalibrateSaap(hp->problem(), o, &assets, nullptr);
  EXPECT_NE(std::string(st.message()).find("calibration.max_queries"), std::string::npos) << st;
  assets.rope_theta = -1;
  st = CalibrateSaap(hp->problem(), SmallOptions(), &assets, nullptr);
  EXPECT_NE(std::string(st.message()).find("rope_theta"), std::string::npos) << st;
}

}  // namespace
}  // namespace spattn
