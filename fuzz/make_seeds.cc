// Writes the seed corpus (fuzz/corpus/<target>/) with the project's own encoders, so seeds are
// valid inputs the fuzzers mutate from:  bazel run //fuzz:make_seeds -- $PWD/fuzz/corpus
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/attention_client.h"
#include "index/record_codec.h"
#include "index/storage.pb.h"
#include "kernels/host_problem.h"
#include "kernels/io/tensor_io.h"
#include "proto/method_config_convert.h"
#include "server/test_util.h"

namespace spattn {
namespace {

std::string root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = absl::StrCat(root, "/", target);
  mkdir(dir.c_str(), 0755);
  std::ofstream(absl::StrCat(dir, "/", name), std::ios::binary) << bytes;
}

void Requests() {
  ProblemShape shape;
  shape.q_lens = {5, 3};
  shape.num_q_heads = 2;
  shape.num_kv_heads = 1;
  shape.head_dim = 16;
  HostProblem hp(shape);
  v1::AttentionRequest r = testing_util::InlineRequest(hp);
  Write("parse_request", "inline_dense", r.SerializeAsString());
  r.mutable_method_override()->set_method(v1::METHOD_VERTICAL_SLASH);
  r.mutable_method_override()->mutable_vertical_slash()->set_last_q(4);
  r.set_return_lse(true);
  r.set_estimate_recall(true);
  Write("parse_request", "inline_vs_lse", r.SerializeAsString());
  v1::HeadMethodOverride* h = r.add_head_overrides();
  h->set_head(1);
  h->mutable_method()->set_method(v1::METHOD_A_SHAPE);
  Write("parse_request", "head_override", r.SerializeAsString());
  const int64_t qb = hp.q_bytes().size(), kb = hp.k_bytes().size();
  *r.mutable_q() = RegionTensor(DType::kBF16, {8, 2, 16}, "t", 0, qb);
  *r.mutable_k() = RegionTensor(DType::kBF16, {8, 1, 16}, "t", qb, kb);
  *r.mutable_output() = RegionTensor(DType::kBF16, {8, 2, 16}, "t", qb + kb, qb);
  v1::CudaIpcRef* ipc = r.mutable_v()->mutable_cuda_ipc();
  ipc->set_ipc_handle(std::string(64, '\1'));
  ipc->set_byte_size(kb);
  r.mutable_v()->mutable_desc()->CopyFrom(r.k().desc());
  Write("parse_request", "regions_ipc", r.SerializeAsString());
  r.add_cu_seqlens_k(0);
  r.add_cu_seqlens_k(9);
  r.add_cu_seqlens_k(12);
  Write("parse_request", "chunked", r.SerializeAsString());
}

void Tensors() {
  HostTensor t;
  t.dtype = DType::kBF16;
  t.shape = {3, 2, 4};
  t.bytes.assign(3 * 2 * 4 * 2, '\x3f');
  Write("npy", "bf16_3d", SerializeNpy(t).value());
  t.dtype = DType::kF32;
  t.shape = {2, 3};
  t.bytes.assign(24, '\0');
  Write("npy", "f32_2d", SerializeNpy(t).value());
  NamedTensors named;
  named["q"] = t;
  t.dtype = DType::kF16;
  t.shape = {4};
  t.bytes.assign(8, '\1');
  named["k"] = t;
  Write("safetensors", "two", SerializeSafetensors(named, {{"format", "pt"}}).value());
  named.erase("k");
  Write("safetensors", "one", SerializeSafetensors(named).value());
}

void Records() {
  index::HeadConfigRecord c;
  c.set_schema_version(1);
  Write("record_codec", "head_config", EncodeRecord(c));
  index::TensorRecordHeader h;
  h.set_schema_version(1);
  Write("record_codec", "tensor", EncodeRecord(h, std::string(32, '\x40')));
}

void Json() {
  Write("config_json", "minference", R"([
  {"0": ["vertical_and_slash", 1000, 6096, 336], "1": ["stream_llm", 100, 800, 12.5],
   "2": ["block_sparse", 8, 1, 0]},
  {"1": ["stream_llm", 64, 2048, 0], "0": ["block_sparse", 100, 0, 3]}
])");
  Write("config_json", "spattn", R"({"model_id": "m", "version": "3", "configs": [
  {"layer": 0, "head": 1, "method": {"method": "METHOD_A_SHAPE",
   "a_shape": {"sink_tokens": 64, "local_tokens": 1024}}, "search_score": 0.5},
  {"layer": 1, "head": 0, "method": {"method": "METHOD_VERTICAL_SLASH",
   "vertical_slash": {"vertical_size": 100, "slash_size": 200, "last_q": 64}}}]})");
}

void Methods() {
  for (Method m : kAllMethods) {
    MethodConfig c;
    c.method = m;
    v1::MethodConfig p;
    MethodConfigToProto(c, &p);
    Write("method_config", MethodName(m), p.SerializeAsString());
  }
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  spattn::root = argv[1];
  mkdir(argv[1], 0755);
  spattn::Requests();
  spattn::Tensors();
  spattn::Records();
  spattn::Json();
  spattn::Methods();
  return 0;
}
