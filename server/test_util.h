// Test helpers for the worker: request builders over HostProblem, and a small in-memory
// IndexService (models, versions of head configs, WatchPublished, GetTensors) that tests start on
// a loopback port and can stop and restart to play an index service that goes down.
#ifndef SPATTN_SERVER_TEST_UTIL_H_
#define SPATTN_SERVER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/host_problem.h"
#include "spattn/v1/attention_service.pb.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace testing_util {

// A request for `hp` with every tensor inline, causal as hp says, output returned inline.
v1::AttentionRequest InlineRequest(HostProblem& hp);

// A POSIX shared-memory key no other test run uses, even in another PID namespace (sandboxed
// runs can share a pid, and /dev/shm is shared).
std::string UniqueShmKey(const std::string& tag);

// Status code and message of a failed StatusOr/Status, printable in test failures.
std::string Describe(const absl::Status& s);

// Thread-safe.
class FakeIndexService final : public v1::IndexService::Service {
 public:
  void PutModel(const v1::Model& model);
  // Stores `configs` as `version` of `model_id` (not published).
  void PutVersion(const std::string& model_id, uint64_t version,
                  const std::vector<v1::HeadConfig>& configs);
  // Makes `version` the published one and wakes watchers.
  void Publish(const std::string& model_id, uint64_t version);
  // Adds a tensor returned by GetTensors for (model, version).
  void PutTensor(const std::string& model_id, uint64_t version, const v1::TensorHeader& header,
                 const std::string& bytes);
  int get_head_configs_calls() const;
  // Ends every open WatchPublished stream (as a dying server would).
  void CloseWatchers();

  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                        v1::Model* resp) override;
  grpc::Status GetHeadConfigs(grpc::ServerContext* ctx, const v1::GetHeadConfigsRequest* req,
                              v1::GetHeadConfigsResponse* resp) override;
  grpc::Status WatchPublished(grpc::ServerContext* ctx, const v1::WatchPublishedRequest* req,
                              grpc::ServerWriter<v1::PublishedEvent>* writer) override;
  grpc::Status GetTensors(grpc::ServerContext* ctx, const v1::GetTensorsRequest* req,
                          grpc::ServerWriter<v1::TensorChunk>* writer) override;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, v1::Model> models_;
  std::map<std::pair<std::string, uint64_t>, std::vector<v1::HeadConfig>> versions_;
  std::map<std::string, uint64_t> published_;
  std::map<std::pair<std::string, uint64_t>, std::vector<std::pair<v1::TensorHeader, std::string>>>
      tensors_;
  int get_head_configs_calls_ = 0;
  int close_generation_ = 0;
};

// A FakeIndexService on a loopback port that can be stopped and started again on that port.
// Not thread-safe: one test thread drives Stop/Restart.
class FakeIndexServer {
 public:
  FakeIndexServer();
  ~FakeIndexServer();
  FakeIndexService& service() { return service_; }
  std::string address() const;
  void Stop();
  // Restarts on the same port; false when the port could not be bound again.
  bool Restart();

 private:
  bool StartOn(const std::string& address);
  FakeIndexService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Another process (a test binary such as server/testing/cuda_ipc_producer) with a pipe to its
// stdin and one from its stdout, started as `binary input extra`. Not thread-safe.
class ProducerProcess {
 public:
  bool Start(const std::string& binary, const std::string& input, size_t extra);
  std::string ReadLine();
  void Send(const std::string& line);
  int Stop();  // sends "exit", waits, returns the wait status

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

// Bytes from a string of hex digits ("0aff" -> "\x0a\xff").
std::string FromHex(const std::string& hex);

}  // namespace testing_util
}  // namespace spattn

#endif  // SPATTN_SERVER_TEST_UTIL_H_
