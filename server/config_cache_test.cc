// Head-config cache against an in-process fake IndexService: fetch once, pin versions, refresh on
// WatchPublished, keep serving from cache while the index service is down, recover after it
// returns, and fetch Saap assets with checksums.
#include "server/config_cache.h"

#include <gtest/gtest.h>

#include <cstring>

#include "absl/time/clock.h"
#include "index/crc32c.h"
#include "server/test_util.h"

namespace spattn {
namespace {

using testing_util::FakeIndexServer;

v1::Model TestModel(const std::string& id) {
  v1::Model m;
  m.set_model_id(id);
  m.set_num_layers(2);
  m.set_num_q_heads(4);
  m.set_num_kv_heads(2);
  m.set_head_dim(64);
  m.set_rope_theta(500000);
  m.mutable_default_method()->set_method(v1::METHOD_A_SHAPE);
  return m;
}

v1::HeadConfig Config(int layer, int head, v1::Method method) {
  v1::HeadConfig c;
  c.set_layer(layer);
  c.set_head(head);
  c.mutable_method()->set_method(method);
  return c;
}

ConfigCacheOptions Options(const std::string& address) {
  ConfigCacheOptions o;
  o.index_address = address;
  o.rpc_timeout = absl::Seconds(2);
  o.retry_min = absl::Milliseconds(20);
  o.retry_max = absl::Milliseconds(200);
  return o;
}

// Polls `pred` for up to 10 s.
template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

class ConfigCacheTest : public ::testing::Test {
 protected:
  ConfigCacheTest() {
    index_.service().PutModel(TestModel("llama"));
    index_.service().PutVersion("llama", 1, {Config(1, 2, v1::METHOD_VERTICAL_SLASH)});
    index_.service().PutVersion(
        "llama", 2, {Config(1, 2, v1::METHOD_BLOCK_SPARSE), Config(0, 0, v1::METHOD_DENSE)});
    index_.service().Publish("llama", 1);
  }
  FakeIndexServer index_;
};

TEST_F(ConfigCacheTest, FetchesOnceAndServesFromCache) {
  ConfigCache cache(Options(index_.address()));
  auto c = cache.Get("llama", 0, absl::InfiniteFuture());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->version, 1u);
  EXPECT_EQ((*c)->num_q_heads, 4);
  EXPECT_DOUBLE_EQ((*c)->rope_theta, 500000);
  EXPECT_EQ((*c)->For(1, 2).method, Method::kVerticalSlash);
  EXPECT_EQ((*c)->For(1, 1).method, Method::kAShape);  // model default
  const int calls = index_.service().get_head_configs_calls();
  for (int i = 0; i < 5; ++i) {
    auto again = cache.Get("llama", 0, absl::InfiniteFuture());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->get(), c->get());
  }
  EXPECT_EQ(index_.service().get_head_configs_calls(), calls);
  EXPECT_TRUE(cache.link_up());
}

TEST_F(ConfigCacheTest, PinsVersionsAndRejectsUnknownOnes) {
  ConfigCache cache(Options(index_.address()));
  auto v2 = cache.Get("llama", 2, absl::InfiniteFuture());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ((*v2)->version, 2u);
  EXPECT_EQ((*v2)->For(1, 2).method, Method::kBlockSparse);
  auto published = cache.Get("llama", 0, absl::InfiniteFuture());
  ASSERT_TRUE(published.ok());
  EXPECT_EQ((*published)->version, 1u);  // Pinning does not move the published version.
  auto missing = cache.Get("llama", 7, absl::InfiniteFuture());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find("config_version"), std::string::npos);
  auto unknown = cache.Get("mistral", 0, absl::InfiniteFuture());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_NE(unknown.status().message().find("model_id"), std::string::npos);
}

TEST_F(ConfigCacheTest, ModelWithoutPublishedVersionUsesDefaults) {
  index_.service().PutModel(TestModel("fresh"));
  ConfigCache cache(Options(index_.address()));
  auto c = cache.Get("fresh", 0, absl::InfiniteFuture());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->version, 0u);
  EXPECT_EQ((*c)->For(1, 2).method, Method::kAShape);
  // Publishing later reaches the cache through the watch.
  index_.service().PutVersion("fresh", 1, {Config(0, 1, v1::METHOD_DENSE)});
  index_.service().Publish("fresh", 1);
  EXPECT_TRUE(Eventually([&] { return cache.PublishedVersions()["fresh"] == 1; }));
}

TEST_F(ConfigCacheTest, RefreshesOnWatchEvent) {
  ConfigCache cache(Options(index_.address()));
  ASSERT_TRUE(cache.Get("llama", 0, absl::InfiniteFuture()).ok());
  index_.service().Publish("llama", 2);
  ASSERT_TRUE(Eventually([&] { return cache.PublishedVersions()["llama"] == 2; }));
  auto c = cache.Get("llama", 0, absl::InfiniteFuture());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->version, 2u);
  EXPECT_EQ((*c)->For(0, 0).method, Method::kDense);
}

TEST_F(ConfigCacheTest, ServesFromCacheWhileIndexServiceIsDownAndRecovers) {
  std::vector<bool> link_events;
  std::mutex mu;
  ConfigCacheOptions o = Options(index_.address());
  o.on_link_change = [&](bool up) {
    std::lock_guard<std::mutex> lock(mu);
    link_events.push_back(up);
  };
  ConfigCache cache(o);
  ASSERT_TRUE(cache.Get("llama", 0, absl::InfiniteFuture()).ok());
  ASSERT_TRUE(cache.Get("llama", 2, absl::InfiniteFuture()).ok());

  index_.Stop();
  ASSERT_TRUE(Eventually([&] { return !cache.link_up(); }));
  EXPECT_NE(cache.LinkDetail().find("down"), std::string::npos) << cache.LinkDetail();
  EXPECT_NE(cache.LinkDetail().find("serving 1 models from cache"), std::string::npos)
      << cache.LinkDetail();
  // Cached versions keep serving.
  auto published = cache.Get("llama", 0, absl::InfiniteFuture());
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ((*published)->version, 1u);
  EXPECT_TRUE(cache.Get("llama", 2, absl::InfiniteFuture()).ok());
  // What was never fetched cannot be served.
  auto uncached = cache.Get("llama", 3, absl::Now() + absl::Milliseconds(500));
  EXPECT_EQ(uncached.status().code(), absl::StatusCode::kUnavailable) << uncached.status();
  auto other = cache.Get("other", 0, absl::Now() + absl::Milliseconds(500));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable) << other.status();

  // Back up with a version published meanwhile: the resync picks it up.
  index_.service().Publish("llama", 2);
  ASSERT_TRUE(index_.Restart());
  ASSERT_TRUE(Eventually([&] { return cache.PublishedVersions()["llama"] == 2; }));
  ASSERT_TRUE(Eventually([&] { return cache.link_up(); }));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(link_events.size(), 2u);
  EXPECT_FALSE(link_events.front());
  EXPECT_TRUE(link_events.back());
}

TEST(ConfigCacheNoIndexTest, WithoutIndexServiceIsFailedPrecondition) {
  ConfigCache cache(ConfigCacheOptions{});
  EXPECT_FALSE(cache.configured());
  auto c = cache.Get("llama", 0, absl::InfiniteFuture());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_TRUE(cache.link_up());
}

v1::TensorHeader Header(v1::TensorKind kind, int layer, int head, const std::string& name,
                        std::vector<int64_t> shape, const std::string& bytes) {
  v1::TensorHeader h;
  h.set_model_id("llama");
  h.set_version(1);
  h.mutable_key()->set_kind(kind);
  h.mutable_key()->set_layer(layer);
  h.mutable_key()->set_head(head);
  h.mutable_key()->set_name(name);
  h.mutable_desc()->set_dtype(v1::DATA_TYPE_FP32);
  for (int64_t d : shape) h.mutable_desc()->add_shape(d);
  h.set_total_bytes(bytes.size());
  h.set_crc32c(Crc32c(bytes.data(), bytes.size()));
  return h;
}

std::string Floats(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return std::string(reinterpret_cast<const char*>(v.data()), n * 4);
}

TEST_F(ConfigCacheTest, FetchesLayerAssetsWithChecksums) {
  const int c = 8, d = 64, hidden = 16;
  for (int kv = 0; kv < 2; ++kv) {
    const std::string b = Floats(c * d, kv * 1000.f);
    index_.service().PutTensor("llama", 1, Header(v1::TENSOR_KIND_CENTROIDS, 1, kv, "", {c, d}, b),
                               b);
  }
  const std::string w0 = Floats(d * hidden, 0), b0 = Floats(hidden, 0);
  const std::string w1 = Floats(hidden * c, 0), b1 = Floats(c, 0);
  for (int q = 0; q < 4; ++q) {
    index_.service().PutTensor("llama", 1,
                               Header(v1::TENSOR_KIND_CLASSIFIER, 1, q, "w0", {d, hidden}, w0), w0);
    index_.service().PutTensor("llama", 1,
                               Header(v1::TENSOR_KIND_CLASSIFIER, 1, q, "b0", {hidden}, b0), b0);
    index_.service().PutTensor("llama", 1,
                               Header(v1::TENSOR_KIND_CLASSIFIER, 1, q, "w1", {hidden, c}, w1), w1);
    index_.service().PutTensor("llama", 1, Header(v1::TENSOR_KIND_CLASSIFIER, 1, q, "b1", {c}, b1),
                               b1);
  }
  ConfigCache cache(Options(index_.address()));
  auto model = cache.Get("llama", 0, absl::InfiniteFuture());
  ASSERT_TRUE(model.ok());
  auto assets = cache.GetAssets(**model, 1, absl::InfiniteFuture());
  ASSERT_TRUE(assets.ok()) << assets.status();
  EXPECT_EQ((*assets)->num_centroids, c);
  ASSERT_EQ((*assets)->centroids.size(), 2u);
  EXPECT_EQ((*assets)->centroids[1][3], 1003.f);
  ASSERT_EQ((*assets)->classifiers.size(), 4u);
  ASSERT_EQ((*assets)->classifiers[3].size(), 2u);
  EXPECT_EQ((*assets)->classifiers[3][0].in, d);
  EXPECT_EQ((*assets)->classifiers[3][0].out, hidden);
  EXPECT_TRUE((*assets)->classifiers[3][0].relu);
  EXPECT_FALSE((*assets)->classifiers[3][1].relu);
  EXPECT_DOUBLE_EQ((*assets)->rope_theta, 500000);
  // Layer 0 has no assets: empty, not an error.
  auto none = cache.GetAssets(**model, 0, absl::InfiniteFuture());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE((*none)->centroids.empty());

  // A corrupted tensor is DATA_LOSS.
  v1::Model m2 = TestModel("bad");
  index_.service().PutModel(m2);
  index_.service().PutVersion("bad", 1, {});
  index_.service().Publish("bad", 1);
  const std::string good = Floats(c * d, 0);
  v1::TensorHeader h = Header(v1::TENSOR_KIND_CENTROIDS, 0, 0, "", {c, d}, good);
  std::string corrupted = good;
  corrupted[17] ^= 1;
  index_.service().PutTensor("bad", 1, h, corrupted);
  auto bad_model = cache.Get("bad", 0, absl::InfiniteFuture());
  ASSERT_TRUE(bad_model.ok());
  auto bad = cache.GetAssets(**bad_model, 0, absl::InfiniteFuture());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
}

}  // namespace
}  // namespace spattn
