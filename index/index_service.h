// IndexServiceImpl: the gRPC IndexService (callback API) over an IndexStore. Converts statuses
// through //proto:grpc_status, records metrics, fans published versions out to watchers.
//
// The store can be attached and detached at run time (the server does so while opening,
// restoring or closing the database); without one every RPC answers UNAVAILABLE.
//
// Thread-safety: thread-safe. gRPC calls the handlers from its own threads.
#ifndef SPATTN_INDEX_INDEX_SERVICE_H_
#define SPATTN_INDEX_INDEX_SERVICE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "index/metrics.h"
#include "index/store.h"
#include "proto/grpc_security.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {

struct IndexServiceOptions {
  // Bytes of tensor data per GetTensors message. Default: 1 MiB.
  int chunk_bytes = 1 << 20;
  // A watcher further behind than this many events is ended with RESOURCE_EXHAUSTED (it can
  // reconnect with after_version). Default: 1024.
  int max_watch_queue = 1024;
  // Backup/ListBackups name a directory under this one (a name, not a path:
  // [A-Za-z0-9._-]{1,128}); empty = the Backup RPCs are off (FAILED_PRECONDITION).
  // Default: "".
  std::string backup_root;
  // Bearer tokens / mTLS identities with roles: when set, writes (models, versions, configs,
  // tensors, publish, delete, backups) need the write role and reads (get, list, watch) the read
  // role. Default: none (authorization off).
  AuthConfig auth;
};

class IndexServiceImpl final : public v1::IndexService::CallbackService {
 public:
  class Watcher;

  // `metrics` must outlive the service.
  IndexServiceImpl(IndexMetrics* metrics, const IndexServiceOptions& options);
  ~IndexServiceImpl() override;

  // Serves from `store` from now on; watchers are brought up to date with each model's current
  // version.
  void AttachStore(std::shared_ptr<IndexStore> store);
  // Stops serving from the store (RPCs answer UNAVAILABLE) and waits up to `timeout` for running
  // calls to release it. Returns the store (the caller closes it by dropping it), or
  // DEADLINE_EXCEEDED if calls still hold it.
  absl::StatusOr<std::shared_ptr<IndexStore>> DetachStore(absl::Duration timeout);
  // Ends every watch stream with UNAVAILABLE and refuses new ones; stops the backup thread.
  void Shutdown();

  grpc::ServerUnaryReactor* PutModel(grpc::CallbackServerContext* ctx,
                                     const v1::PutModelRequest* request,
                                     v1::PutModelResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* ctx,
                                     const v1::GetModelRequest* request,
                                     v1::Model* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteModel(grpc::CallbackServerContext* ctx,
                                        const v1::DeleteModelRequest* request,
                                        v1::DeleteModelResponse* response) override;
  grpc::ServerUnaryReactor* CreateVersion(grpc::CallbackServerContext* ctx,
                                          const v1::CreateVersionRequest* request,
                                          v1::VersionInfo* response) override;
  grpc::ServerUnaryReactor* PutHeadConfigs(grpc::CallbackServerContext* ctx,
                                           const v1::PutHeadConfigsRequest* request,
                                           v1::PutHeadConfigsResponse* response) override;
  grpc::ServerUnaryReactor* GetHeadConfigs(grpc::CallbackServerContext* ctx,
                                           const v1::GetHeadConfigsRequest* request,
                                           v1::GetHeadConfigsResponse* response) override;
  grpc::ServerReadReactor<v1::TensorChunk>* PutTensors(grpc::CallbackServerContext* ctx,
                                                       v1::PutTensorsResponse* response) override;
  grpc::ServerWriteReactor<v1::TensorChunk>* GetTensors(
      grpc::CallbackServerContext* ctx, const v1::GetTensorsRequest* request) override;
  grpc::ServerUnaryReactor* SealVersion(grpc::CallbackServerContext* ctx,
                                        const v1::SealVersionRequest* request,
                                        v1::VersionInfo* response) override;
  grpc::ServerUnaryReactor* PublishVersion(grpc::CallbackServerContext* ctx,
                                           const v1::PublishVersionRequest* request,
                                           v1::PublishVersionResponse* response) override;
  grpc::ServerUnaryReactor* ListVersions(grpc::CallbackServerContext* ctx,
                                         const v1::ListVersionsRequest* request,
                                         v1::ListVersionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteVersion(grpc::CallbackServerContext* ctx,
                                          const v1::DeleteVersionRequest* request,
                                          v1::DeleteVersionResponse* response) override;
  grpc::ServerWriteReactor<v1::PublishedEvent>* WatchPublished(
      grpc::CallbackServerContext* ctx, const v1::WatchPublishedRequest* request) override;
  grpc::ServerUnaryReactor* Backup(grpc::CallbackServerContext* ctx,
                                   const v1::BackupRequest* request,
                                   v1::BackupResponse* response) override;
  grpc::ServerUnaryReactor* ListBackups(grpc::CallbackServerContext* ctx,
                                        const v1::ListBackupsRequest* request,
                                        v1::ListBackupsResponse* response) override;

  // Internal, for the stream reactors.
  IndexMetrics* metrics() const { return metrics_; }
  const IndexServiceOptions& options() const { return options_; }
  void RemoveWatcher(Watcher* watcher);

 private:
  // The attached store, or UNAVAILABLE.
  absl::StatusOr<std::shared_ptr<IndexStore>> GetStore();
  // GetStore() after checking that the caller of `ctx` may call `rpc` (UNAUTHENTICATED /
  // PERMISSION_DENIED otherwise).
  absl::StatusOr<std::shared_ptr<IndexStore>> AuthorizedStore(grpc::CallbackServerContext* ctx,
                                                              const char* rpc);
  // Runs `fn` against the store and finishes the unary call with its status.
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* rpc, Fn fn);
  // Publish listener target: called under the store's write lock, in commit order.
  void OnPublished(const std::string& model_id, uint64_t version, int64_t published_unix_ms);
  // Runs `task` on the background thread (long operations such as backups).
  void RunInBackground(std::function<void()> task);

  IndexMetrics* const metrics_;
  const IndexServiceOptions options_;
  const Authorizer authorizer_;

  absl::Mutex store_mu_;
  std::shared_ptr<IndexStore> store_ ABSL_GUARDED_BY(store_mu_);

  // Lock order: store write lock -> watch_mu_ -> a watcher's own lock.
  absl::Mutex watch_mu_;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(watch_mu_);
  bool shut_down_ ABSL_GUARDED_BY(watch_mu_) = false;

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  std::deque<std::function<void()>> bg_tasks_;
  bool bg_stop_ = false;
  std::thread bg_thread_;
};

}  // namespace spattn

#endif  // SPATTN_INDEX_INDEX_SERVICE_H_
