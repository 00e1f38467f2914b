#include "server/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "index/crc32c.h"

namespace spattn {
namespace testing_util {
namespace {

v1::DataType ProtoDType(DType t) {
  switch (t) {
    case DType::kF32:
      return v1::DATA_TYPE_FP32;
    case DType::kF16:
      return v1::DATA_TYPE_FP16;
    case DType::kBF16:
      return v1::DATA_TYPE_BF16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

void SetTensor(v1::TensorRef* t, DType dtype, int64_t tokens, int heads, int dim,
               const std::vector<uint8_t>& bytes) {
  t->mutable_desc()->set_dtype(ProtoDType(dtype));
  t->mutable_desc()->add_shape(tokens);
  t->mutable_desc()->add_shape(heads);
  t->mutable_desc()->add_shape(dim);
  t->mutable_inline_data()->set_data(bytes.data(), bytes.size());
}

}  // namespace

v1::AttentionRequest InlineRequest(HostProblem& hp) {
  const AttentionProblem& p = hp.problem();
  v1::AttentionRequest r;
  r.set_request_id("test");
  r.set_num_q_heads(p.num_q_heads);
  r.set_num_kv_heads(p.num_kv_heads);
  r.set_head_dim(p.head_dim);
  r.set_softmax_scale(p.softmax_scale);
  r.set_causal(p.causal);
  for (int32_t x : p.cu_seqlens_q) r.add_cu_seqlens_q(x);
  for (int32_t x : p.cu_seqlens_k) r.add_cu_seqlens_k(x);
  SetTensor(r.mutable_q(), p.dtype, p.total_q(), p.num_q_heads, p.head_dim, hp.q_bytes());
  SetTensor(r.mutable_k(), p.dtype, p.total_k(), p.num_kv_heads, p.head_dim, hp.k_bytes());
  SetTensor(r.mutable_v(), p.dtype, p.total_k(), p.num_kv_heads, p.head_dim, hp.v_bytes());
  return r;
}

std::string UniqueShmKey(const std::string& tag) {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) | rd();
  return absl::StrCat("/spattn-", tag, "_", getpid(), "_", absl::Hex(r));
}

std::string Describe(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

void FakeIndexService::PutModel(const v1::Model& model) {
  std::lock_guard<std::mutex> lock(mu_);
  models_[model.model_id()] = model;
}

void FakeIndexService::PutVersion(const std::string& model_id, uint64_t version,
                                  const std::vector<v1::HeadConfig>& configs) {
  std::lock_guard<std::mutex> lock(mu_);
  versions_[{model_id, version}] = configs;
}

void FakeIndexService::Publish(const std::string& model_id, uint64_t version) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_[model_id] = version;
  }
  cv_.notify_all();
}

void FakeIndexService::PutTensor(const std::string& model_id, uint64_t version,
                                 const v1::TensorHeader& header, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  tensors_[{model_id, version}].emplace_back(header, bytes);
}

int FakeIndexService::get_head_configs_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return get_head_configs_calls_;
}

void FakeIndexService::CloseWatchers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++close_generation_;
  }
  cv_.notify_all();
}

grpc::Status FakeIndexService::GetModel(grpc::ServerContext*, const v1::GetModelRequest* req,
                                        v1::Model* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(req->model_id());
  if (it == models_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such model");
  *resp = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeIndexService::GetHeadConfigs(grpc::ServerContext*,
                                              const v1::GetHeadConfigsRequest* req,
                                              v1::GetHeadConfigsResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  ++get_head_configs_calls_;
  auto m = models_.find(req->model_id());
  if (m == models_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such model");
  uint64_t version = req->version();
  if (version == 0) {
    auto p = published_.find(req->model_id());
    if (p == published_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "nothing published");
    }
    version = p->second;
  }
  auto v = versions_.find({req->model_id(), version});
  if (v == versions_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such version");
  resp->set_version(version);
  *resp->mutable_model() = m->second;
  for (const v1::HeadConfig& c : v->second) {
    if (req->has_layer() && c.layer() != req->layer()) continue;
    *resp->add_configs() = c;
  }
  return grpc::Status::OK;
}

grpc::Status FakeIndexService::WatchPublished(grpc::ServerContext* ctx,
                                              const v1::WatchPublishedRequest* req,
                                              grpc::ServerWriter<v1::PublishedEvent>* writer) {
  uint64_t sent = req->after_version();
  std::unique_lock<std::mutex> lock(mu_);
  const int generation = close_generation_;
  for (;;) {
    auto p = published_.find(req->model_id());
    if (p != published_.end() && p->second > sent) {
      v1::PublishedEvent e;
      e.set_model_id(req->model_id());
      e.set_version(p->second);
      sent = p->second;
      lock.unlock();
      if (!writer->Write(e)) return grpc::Status::CANCELLED;
      lock.lock();
      continue;
    }
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    if (close_generation_ != generation) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "closing");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

grpc::Status FakeIndexService::GetTensors(grpc::ServerContext*, const v1::GetTensorsRequest* req,
                                          grpc::ServerWriter<v1::TensorChunk>* writer) {
  std::vector<std::pair<v1::TensorHeader, std::string>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tensors_.find({req->model_id(), req->version()});
    if (it != tensors_.end()) out = it->second;
  }
  for (const auto& t : out) {
    if (t.first.key().kind() != req->kind()) continue;
    if (req->has_layer() && t.first.key().layer() != req->layer()) continue;
    v1::TensorChunk header;
    *header.mutable_header() = t.first;
    writer->Write(header);
    // Two chunks, to exercise reassembly.
    const size_t half = t.second.size() / 2;
    v1::TensorChunk a, b;
    a.set_data(t.second.substr(0, half));
    b.set_data(t.second.substr(half));
    writer->Write(a);
    writer->Write(b);
  }
  return grpc::Status::OK;
}

FakeIndexServer::FakeIndexServer() { StartOn("127.0.0.1:0"); }

FakeIndexServer::~FakeIndexServer() { Stop(); }

std::string FakeIndexServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

bool FakeIndexServer::StartOn(const std::string& address) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) return false;
  port_ = port;
  return true;
}

void FakeIndexServer::Stop() {
  if (server_ == nullptr) return;
  service_.CloseWatchers();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_->Wait();
  server_.reset();
}

bool FakeIndexServer::Restart() {
  Stop();
  return StartOn(address());
}

bool ProducerProcess::Start(const std::string& binary, const std::string& input, size_t extra) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    const std::string extra_s = std::to_string(extra);
    execl(binary.c_str(), binary.c_str(), input.c_str(), extra_s.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  in_ = fdopen(to_child[1], "w");
  out_ = fdopen(from_child[0], "r");
  return pid_ > 0;
}

std::string ProducerProcess::ReadLine() {
  char buf[512];
  if (fgets(buf, sizeof(buf), out_) == nullptr) return "";
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

void ProducerProcess::Send(const std::string& line) {
  fprintf(in_, "%s\n", line.c_str());
  fflush(in_);
}

int ProducerProcess::Stop() {
  Send("exit");
  fclose(in_);
  fclose(out_);
  int status = 0;
  waitpid(pid_, &status, 0);
  return status;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace testing_util
}  // namespace spattn
