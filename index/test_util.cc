#include "index/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace testing_util {

v1::Model MakeModel(const std::string& model_id, uint32_t layers, uint32_t q_heads,
                    uint32_t kv_heads, uint32_t head_dim) {
  v1::Model m;
  m.set_model_id(model_id);
  m.set_num_layers(layers);
  m.set_num_q_heads(q_heads);
  m.set_num_kv_heads(kv_heads);
  m.set_head_dim(head_dim);
  m.set_rope_theta(500000.0);
  m.mutable_rope_scaling()->set_type("llama3");
  m.mutable_rope_scaling()->set_factor(8.0);
  m.mutable_rope_scaling()->set_low_freq_factor(1.0);
  m.mutable_rope_scaling()->set_high_freq_factor(4.0);
  m.mutable_rope_scaling()->set_original_max_position(8192);
  m.mutable_default_method()->set_method(v1::METHOD_A_SHAPE);
  m.set_description("test model " + model_id);
  return m;
}

std::vector<float> RandomFloats(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

std::vector<v1::HeadConfig> MakeHeadConfigs(const v1::Model& model, uint64_t seed) {
  std::vector<v1::HeadConfig> out;
  std::mt19937_64 rng(seed);
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    for (uint32_t h = 0; h < model.num_q_heads(); ++h) {
      v1::HeadConfig c;
      c.set_layer(l);
      c.set_head(h);
      c.set_search_score(static_cast<float>(rng() % 1000) / 1000.f);
      v1::MethodConfig* m = c.mutable_method();
      switch ((l * model.num_q_heads() + h + seed) % 7) {
        case 0:
          m->set_method(v1::METHOD_DENSE);
          break;
        case 1:
          m->set_method(v1::METHOD_A_SHAPE);
          m->mutable_a_shape()->set_sink_tokens(64 + rng() % 64);
          m->mutable_a_shape()->set_local_tokens(1024 + rng() % 1024);
          break;
        case 2:
          m->set_method(v1::METHOD_VERTICAL_SLASH);
          m->mutable_vertical_slash()->set_vertical_size(30 + rng() % 1000);
          m->mutable_vertical_slash()->set_slash_size(800 + rng() % 6000);
          break;
        case 3:
          m->set_method(v1::METHOD_BLOCK_SPARSE);
          m->mutable_block_sparse()->set_top_k(1 + rng() % 100);
          break;
        case 4:
          m->set_method(v1::METHOD_FLEX_PREFILL);
          m->mutable_flex_prefill()->set_gamma(0.95f);
          m->mutable_flex_prefill()->set_tau(0.1f);
          break;
        case 5:
          m->set_method(v1::METHOD_SAMPLE_ATTENTION);
          m->mutable_sample_attention()->set_alpha_c(0.9f);
          break;
        default:
          m->set_method(v1::METHOD_ANCHOR);
          m->mutable_anchor()->set_theta(11.f);
          break;
      }
      out.push_back(c);
    }
  }
  return out;
}

std::vector<TensorUpload> MakeCentroids(const v1::Model& model, int num_centroids, uint64_t seed) {
  std::vector<TensorUpload> out;
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    for (uint32_t h = 0; h < model.num_kv_heads(); ++h) {
      TensorUpload t;
      t.key.set_kind(v1::TENSOR_KIND_CENTROIDS);
      t.key.set_layer(l);
      t.key.set_head(h);
      t.shape = {num_centroids, static_cast<int64_t>(model.head_dim())};
      t.bytes = FloatsToBytes(RandomFloats(seed * 1000003 + l * 1009 + h,
                                           static_cast<size_t>(num_centroids) * model.head_dim()));
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<TensorUpload> MakeClassifier(const v1::Model& model, uint32_t layer, uint32_t head,
                                         int hidden, int out_dim, uint64_t seed) {
  const int64_t d = model.head_dim();
  struct P {
    const char* name;
    std::vector<int64_t> shape;
  };
  std::vector<P> params = {
      {"w0", {d, hidden}}, {"b0", {hidden}}, {"w1", {hidden, out_dim}}, {"b1", {out_dim}}};
  std::vector<TensorUpload> out;
  uint64_t s = seed * 7919 + layer * 131 + head;
  for (const P& p : params) {
    TensorUpload t;
    t.key.set_kind(v1::TENSOR_KIND_CLASSIFIER);
    t.key.set_layer(layer);
    t.key.set_head(head);
    t.key.set_name(p.name);
    t.shape = p.shape;
    size_t n = 1;
    for (int64_t x : p.shape) n *= x;
    t.bytes = FloatsToBytes(RandomFloats(s++, n));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to port ", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write failed");
  }
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::InternalError("no HTTP body");
  if (response.compare(0, 12, "HTTP/1.1 200") != 0 &&
      response.compare(0, 12, "HTTP/1.0 200") != 0) {
    return absl::InternalError(absl::StrCat("HTTP status: ", response.substr(0, 20)));
  }
  return response.substr(body + 4);
}

}  // namespace testing_util
}  // namespace spattn
