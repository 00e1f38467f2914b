#include "index/index_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "index/crc32c.h"
#include "index/validate.h"
#include "kernels/status_macros.h"
#include "proto/grpc_status.h"
#include "proto/reactor_order.h"

namespace spattn {
namespace {

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// A server-streaming reactor that only reports an error (used when a stream cannot start).
template <typename Message>
class FailedWriter final : public grpc::ServerWriteReactor<Message> {
 public:
  FailedWriter(IndexMetrics* metrics, const char* rpc, const absl::Status& status)
      : metrics_(metrics), rpc_(rpc), code_(status.code()) {
    this->Finish(ToGrpcStatus(status));
  }
  void OnDone() override {
    metrics_->RecordRpc(rpc_, code_, 0.0);
    delete this;
  }

 private:
  IndexMetrics* metrics_;
  const char* rpc_;
  absl::StatusCode code_;
};

// ---------------------------------------------------------------------------------------------
// PutTensors: header chunk, then data chunks until total_bytes; each tensor is verified (crc32c,
// shape, finite values) and committed when its last byte arrives. The stream's tensors are
// synced to disk before the response.
class PutTensorsReactor final : public grpc::ServerReadReactor<v1::TensorChunk> {
 public:
  PutTensorsReactor(IndexMetrics* metrics, absl::StatusOr<std::shared_ptr<IndexStore>> store,
                    v1::PutTensorsResponse* response)
      : metrics_(metrics), response_(response) {
    if (!store.ok()) {
      Done(store.status());
      return;
    }
    store_ = *std::move(store);
    Read();
  }

  void OnReadDone(bool ok) override {
    ReactorAcquire(this);
    if (!ok) {
      if (cancelled_) {
        Done(absl::CancelledError("PutTensors cancelled by the client"));
      } else if (in_tensor_) {
        Done(absl::InvalidArgumentError(absl::StrCat(
            "stream ended inside ", TensorKeyName(header_.key()), ": got ", buffer_.size(), " of ",
            header_.total_bytes(), " bytes; that tensor was not stored")));
      } else {
        absl::Status s = store_->Sync();
        response_->set_tensors_written(tensors_);
        response_->set_bytes_written(bytes_);
        Done(s);
      }
      return;
    }
    absl::Status s = Handle();
    if (!s.ok()) {
      Done(s);
      return;
    }
    Read();
  }

  void OnCancel() override { cancelled_ = true; }

  void OnDone() override {
    ReactorAcquire(this);
    metrics_->RecordRpc("PutTensors", status_.code(), SecondsSince(start_));
    delete this;
  }

 private:
  void Read() {
    ReactorRelease(this);
    StartRead(&chunk_);
  }

  absl::Status Handle() {
    switch (chunk_.part_case()) {
      case v1::TensorChunk::kHeader: {
        if (in_tensor_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "chunk: a header arrived before ", TensorKeyName(header_.key()), " was complete (",
              buffer_.size(), " of ", header_.total_bytes(), " bytes)"));
        }
        const v1::TensorHeader& h = chunk_.header();
        if (tensors_ == 0 && !have_target_) {
          model_id_ = h.model_id();
          version_ = h.version();
          have_target_ = true;
        } else if (h.model_id() != model_id_ || h.version() != version_) {
          return absl::InvalidArgumentError(
              "header.model_id/version: all tensors of one PutTensors stream must name the same "
              "model and version");
        }
        SPATTN_RETURN_IF_ERROR(store_->CheckTensorHeader(h.model_id(), h.version(), h.key(),
                                                         h.desc(), h.total_bytes()));
        header_ = h;
        buffer_.clear();
        buffer_.reserve(h.total_bytes());
        in_tensor_ = true;
        return absl::OkStatus();
      }
      case v1::TensorChunk::kData: {
        if (!in_tensor_) {
          return absl::InvalidArgumentError("chunk: data arrived before any tensor header");
        }
        const std::string& data = chunk_.data();
        if (buffer_.size() + data.size() > header_.total_bytes()) {
          return absl::InvalidArgumentError(absl::StrCat("data: more bytes than total_bytes (",
                                                         header_.total_bytes(), ") for ",
                                                         TensorKeyName(header_.key())));
        }
        buffer_.append(data);
        if (buffer_.size() < header_.total_bytes()) return absl::OkStatus();
        in_tensor_ = false;
        const uint32_t crc = Crc32c(buffer_);
        if (crc != header_.crc32c()) {
          return absl::DataLossError(absl::StrFormat(
              "crc32c: %s arrived with crc32c %08x but its header says %08x (corrupted in "
              "transfer); nothing of it was stored",
              TensorKeyName(header_.key()), crc, header_.crc32c()));
        }
        SPATTN_RETURN_IF_ERROR(
            store_->PutTensor(model_id_, version_, header_.key(), header_.desc(), buffer_)
                .status());
        ++tensors_;
        bytes_ += buffer_.size();
        std::string().swap(buffer_);
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError("chunk: has neither header nor data");
    }
  }

  void Done(const absl::Status& status) {
    status_ = status;
    ReactorRelease(this);
    Finish(ToGrpcStatus(status));
  }

  IndexMetrics* const metrics_;
  v1::PutTensorsResponse* const response_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<IndexStore> store_;
  v1::TensorChunk chunk_;
  bool have_target_ = false;
  std::string model_id_;
  uint64_t version_ = 0;
  bool in_tensor_ = false;
  v1::TensorHeader header_;
  std::string buffer_;
  uint64_t tensors_ = 0;
  uint64_t bytes_ = 0;
  std::atomic<bool> cancelled_{false};  // OnCancel may run on another thread.
  absl::Status status_;
};

// ---------------------------------------------------------------------------------------------
// GetTensors: per tensor a header, then its bytes in chunks of `chunk_bytes`, one write at a
// time (flow control comes from waiting for OnWriteDone).
class GetTensorsReactor final : public grpc::ServerWriteReactor<v1::TensorChunk> {
 public:
  GetTensorsReactor(IndexMetrics* metrics, std::shared_ptr<IndexStore> store,
                    std::unique_ptr<TensorReader> reader, std::string model_id, int chunk_bytes)
      : metrics_(metrics),
        store_(std::move(store)),
        reader_(std::move(reader)),
        model_id_(std::move(model_id)),
        chunk_bytes_(std::max(chunk_bytes, 1)) {
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    ReactorAcquire(this);
    if (!ok) {
      Done(absl::CancelledError("GetTensors: the client went away"));
      return;
    }
    WriteNext();
  }

  void OnDone() override {
    ReactorAcquire(this);
    metrics_->RecordRpc("GetTensors", status_.code(), SecondsSince(start_));
    delete this;
  }

 private:
  void WriteNext() {
    msg_.Clear();
    if (have_tensor_ && offset_ < tensor_.data.size()) {
      const size_t n = std::min<size_t>(chunk_bytes_, tensor_.data.size() - offset_);
      msg_.set_data(tensor_.data.data() + offset_, n);
      offset_ += n;
      ReactorRelease(this);
      StartWrite(&msg_);
      return;
    }
    absl::StatusOr<bool> next = reader_->Next(&tensor_);
    if (!next.ok()) {
      Done(next.status());
      return;
    }
    if (!*next) {
      Done(absl::OkStatus());
      return;
    }
    have_tensor_ = true;
    offset_ = 0;
    v1::TensorHeader* h = msg_.mutable_header();
    h->set_model_id(model_id_);
    h->set_version(reader_->version());
    *h->mutable_key() = tensor_.key;
    *h->mutable_desc() = tensor_.desc;
    h->set_total_bytes(tensor_.data.size());
    h->set_crc32c(tensor_.crc32c);
    ReactorRelease(this);
    StartWrite(&msg_);
  }

  void Done(const absl::Status& status) {
    status_ = status;
    ReactorRelease(this);
    Finish(ToGrpcStatus(status));
  }

  IndexMetrics* const metrics_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<IndexStore> store_;  // Keeps the database open under the reader.
  std::unique_ptr<TensorReader> reader_;
  const std::string model_id_;
  const int chunk_bytes_;
  v1::TensorChunk msg_;
  StoredTensor tensor_;
  bool have_tensor_ = false;
  size_t offset_ = 0;
  absl::Status status_;
};

// A backup directory from a request: a name (not a path) of a directory under the server's
// --backup_root, so clients cannot make the server write or read anywhere else on its host.
absl::StatusOr<std::string> ResolveBackupDir(const std::string& root, const std::string& name) {
  if (root.empty()) {
    return absl::FailedPreconditionError(
        "backups are off on this server (start it with --backup_root=DIR)");
  }
  if (name.empty() || name.size() > 128 || name == "." || name == "..") {
    return absl::InvalidArgumentError("backup_dir: must be a name of 1 to 128 characters");
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          "backup_dir: a name under the server's backup root ([A-Za-z0-9._-]), not a path");
    }
  }
  return (std::filesystem::path(root) / name).string();
}

// Reads: everything else (and backups) writes.
Role RoleFor(absl::string_view rpc) {
  for (const char* read : {"GetModel", "ListModels", "GetHeadConfigs", "GetTensors", "ListVersions",
                           "WatchPublished"}) {
    if (rpc == read) return Role::kRead;
  }
  return Role::kWrite;
}

}  // namespace

namespace {

// (published_unix_ms, version) of the versions published after `after_version` was, sorted;
// empty when `after_version` is 0, unknown or never published (the watcher then starts from the
// current version alone).
std::vector<std::pair<int64_t, uint64_t>> MissedPublishes(IndexStore& store,
                                                          const std::string& model_id,
                                                          uint64_t after_version) {
  std::vector<std::pair<int64_t, uint64_t>> missed;
  if (after_version == 0) return missed;
  absl::StatusOr<v1::ListVersionsResponse> versions = store.ListVersions(model_id);
  if (!versions.ok()) return missed;
  int64_t since = -1;
  for (const v1::VersionInfo& v : versions->versions()) {
    if (v.version() == after_version && v.published_unix_ms() > 0) since = v.published_unix_ms();
  }
  if (since < 0) return missed;
  for (const v1::VersionInfo& v : versions->versions()) {
    const bool was_published =
        v.state() == v1::VERSION_STATE_PUBLISHED || v.state() == v1::VERSION_STATE_RETIRED;
    const bool later = v.published_unix_ms() > since ||
                       (v.published_unix_ms() == since && v.version() > after_version);
    if (was_published && v.version() != after_version && later) {
      missed.emplace_back(v.published_unix_ms(), v.version());
    }
  }
  std::sort(missed.begin(), missed.end());
  return missed;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// WatchPublished: one reactor per stream, registered with the service; events are queued and
// written one at a time, in publish order.
class IndexServiceImpl::Watcher final : public grpc::ServerWriteReactor<v1::PublishedEvent> {
 public:
  Watcher(IndexServiceImpl* service, std::string model_id)
      : service_(service), model_id_(std::move(model_id)) {}

  const std::string& model_id() const { return model_id_; }

  // Queues an event and starts writing when idle. A repeat of the last queued version is
  // dropped: it only happens when registration and a publish race (both report the new version).
  void Push(uint64_t version, int64_t published_unix_ms) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finishing_ || (has_last_ && version == last_version_)) return;
    if (queue_.size() >= static_cast<size_t>(service_->options().max_watch_queue)) {
      FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "watcher fell too far behind; reconnect with after_version"));
      return;
    }
    has_last_ = true;
    last_version_ = version;
    v1::PublishedEvent event;
    event.set_model_id(model_id_);
    event.set_version(version);
    event.set_published_unix_ms(published_unix_ms);
    queue_.push_back(std::move(event));
    MaybeWriteLocked();
  }

  void Close(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
    if (finishing_) {
      if (!finished_) {
        finished_ = true;
        ReactorRelease(this);
        Finish(final_status_);
      }
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    Close(grpc::Status::CANCELLED);
    // gRPC calls OnDone only after OnCancel has returned (the count of running callbacks is
    // dropped inside libgrpc++); OnDone then destroys mu_, which Close just unlocked here.
    ReactorRelease(this);
  }

  void OnDone() override {
    ReactorAcquire(this);
    service_->RemoveWatcher(this);
    service_->metrics()->RecordRpc("WatchPublished", FromGrpcStatus(final_status_).code(),
                                   SecondsSince(start_));
    delete this;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || queue_.empty()) return;
    in_flight_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&in_flight_);
  }

  // Finishes now, or after the write in flight completes (no Finish with a write pending).
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    final_status_ = status;
    if (!writing_) {
      finished_ = true;
      ReactorRelease(this);
      Finish(status);
    }
  }

  IndexServiceImpl* const service_;
  const std::string model_id_;
  const absl::Time start_ = absl::Now();
  absl::Mutex mu_;
  std::deque<v1::PublishedEvent> queue_ ABSL_GUARDED_BY(mu_);
  v1::PublishedEvent in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool has_last_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_version_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status final_status_;
};

// ---------------------------------------------------------------------------------------------

IndexServiceImpl::IndexServiceImpl(IndexMetrics* metrics, const IndexServiceOptions& options)
    : metrics_(metrics), options_(options), authorizer_(options.auth) {
  bg_thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(bg_mu_);
    while (true) {
      bg_cv_.wait(lock, [this] { return bg_stop_ || !bg_tasks_.empty(); });
      if (bg_tasks_.empty()) return;  // Stopping, and every queued task has run.
      std::function<void()> task = std::move(bg_tasks_.front());
      bg_tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  });
}

IndexServiceImpl::~IndexServiceImpl() { Shutdown(); }

void IndexServiceImpl::RunInBackground(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    if (!bg_stop_) {
      bg_tasks_.push_back(std::move(task));
      bg_cv_.notify_one();
      return;
    }
  }
  task();  // Shutting down: run inline so the call still finishes.
}

void IndexServiceImpl::Shutdown() {
  {
    absl::MutexLock lock(&watch_mu_);
    shut_down_ = true;
    for (Watcher* w : watchers_) {
      w->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "index service shutting down"));
    }
  }
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_stop_ = true;
    bg_cv_.notify_all();
  }
  if (bg_thread_.joinable()) bg_thread_.join();
}

void IndexServiceImpl::AttachStore(std::shared_ptr<IndexStore> store) {
  store->SetPublishListener([this](const std::string& model_id, uint64_t version, int64_t ts) {
    OnPublished(model_id, version, ts);
  });
  {
    absl::MutexLock lock(&store_mu_);
    store_ = store;
  }
  // Gauges and watchers catch up with what this database says is published.
  absl::StatusOr<std::vector<v1::Model>> models = store->ListModels();
  if (models.ok()) {
    for (const v1::Model& m : *models) {
      absl::StatusOr<CurrentVersion> current = store->GetCurrent(m.model_id());
      if (current.ok()) metrics_->SetPublishedVersion(m.model_id(), current->version);
    }
  }
  absl::MutexLock lock(&watch_mu_);
  for (Watcher* w : watchers_) {
    absl::StatusOr<CurrentVersion> current = store->GetCurrent(w->model_id());
    if (current.ok() && current->version != 0) {
      w->Push(current->version, current->published_unix_ms);
    }
  }
}

absl::StatusOr<std::shared_ptr<IndexStore>> IndexServiceImpl::DetachStore(absl::Duration timeout) {
  std::shared_ptr<IndexStore> store;
  {
    absl::MutexLock lock(&store_mu_);
    store = std::move(store_);
    store_.reset();
  }
  if (store == nullptr) return absl::FailedPreconditionError("no database is attached");
  store->SetPublishListener(nullptr);
  const absl::Time deadline = absl::Now() + timeout;
  while (store.use_count() > 1) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          "running calls still use the database; it closes when they end");
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return store;
}

absl::StatusOr<std::shared_ptr<IndexStore>> IndexServiceImpl::GetStore() {
  absl::MutexLock lock(&store_mu_);
  if (store_ == nullptr) {
    return absl::UnavailableError("the index database is not open (starting, restoring or closed)");
  }
  return store_;
}

void IndexServiceImpl::OnPublished(const std::string& model_id, uint64_t version,
                                   int64_t published_unix_ms) {
  metrics_->SetPublishedVersion(model_id, version);
  absl::MutexLock lock(&watch_mu_);
  for (Watcher* w : watchers_) {
    if (w->model_id() == model_id) w->Push(version, published_unix_ms);
  }
}

absl::StatusOr<std::shared_ptr<IndexStore>> IndexServiceImpl::AuthorizedStore(
    grpc::CallbackServerContext* ctx, const char* rpc) {
  const absl::Status allowed = authorizer_.Check(authorizer_.Identify(*ctx), RoleFor(rpc), rpc);
  if (!allowed.ok()) return allowed;
  return GetStore();
}

void IndexServiceImpl::RemoveWatcher(Watcher* watcher) {
  absl::MutexLock lock(&watch_mu_);
  if (watchers_.erase(watcher) > 0) metrics_->WatcherRemoved();
}

template <typename Fn>
grpc::ServerUnaryReactor* IndexServiceImpl::Unary(grpc::CallbackServerContext* ctx, const char* rpc,
                                                  Fn fn) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status status;
  absl::StatusOr<std::shared_ptr<IndexStore>> store = AuthorizedStore(ctx, rpc);
  if (!store.ok()) {
    status = store.status();
  } else if (ctx->IsCancelled()) {
    status = absl::CancelledError(absl::StrCat(rpc, " cancelled before it started"));
  } else {
    status = fn(**store);
  }
  metrics_->RecordRpc(rpc, status.code(), SecondsSince(start));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* IndexServiceImpl::PutModel(grpc::CallbackServerContext* ctx,
                                                     const v1::PutModelRequest* request,
                                                     v1::PutModelResponse* response) {
  return Unary(ctx, "PutModel", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(PutModelResult result, store.PutModel(request->model()));
    *response->mutable_model() = std::move(result.model);
    response->set_created(result.created);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::GetModel(grpc::CallbackServerContext* ctx,
                                                     const v1::GetModelRequest* request,
                                                     v1::Model* response) {
  return Unary(ctx, "GetModel", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(*response, store.GetModel(request->model_id()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::ListModels(grpc::CallbackServerContext* ctx,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return Unary(ctx, "ListModels", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(std::vector<v1::Model> models, store.ListModels());
    for (v1::Model& m : models) *response->add_models() = std::move(m);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::DeleteModel(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteModelRequest* request,
                                                        v1::DeleteModelResponse* response) {
  return Unary(ctx, "DeleteModel", [&](IndexStore& store) -> absl::Status {
    SPATTN_RETURN_IF_ERROR(store.DeleteModel(request->model_id(), request->force()));
    metrics_->RemoveModel(request->model_id());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::CreateVersion(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateVersionRequest* request,
                                                          v1::VersionInfo* response) {
  return Unary(ctx, "CreateVersion", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(
        *response,
        store.CreateVersion(request->model_id(), request->base_version(), request->description()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::PutHeadConfigs(grpc::CallbackServerContext* ctx,
                                                           const v1::PutHeadConfigsRequest* request,
                                                           v1::PutHeadConfigsResponse* response) {
  return Unary(ctx, "PutHeadConfigs", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(
        uint64_t written,
        store.PutHeadConfigs(request->model_id(), request->version(), request->configs()));
    response->set_written(written);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::GetHeadConfigs(grpc::CallbackServerContext* ctx,
                                                           const v1::GetHeadConfigsRequest* request,
                                                           v1::GetHeadConfigsResponse* response) {
  return Unary(ctx, "GetHeadConfigs", [&](IndexStore& store) -> absl::Status {
    std::optional<uint32_t> layer;
    if (request->has_layer()) layer = request->layer();
    SPATTN_ASSIGN_OR_RETURN(*response,
                            store.GetHeadConfigs(request->model_id(), request->version(), layer));
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<v1::TensorChunk>* IndexServiceImpl::PutTensors(
    grpc::CallbackServerContext* ctx, v1::PutTensorsResponse* response) {
  return new PutTensorsReactor(metrics_, AuthorizedStore(ctx, "PutTensors"), response);
}

grpc::ServerWriteReactor<v1::TensorChunk>* IndexServiceImpl::GetTensors(
    grpc::CallbackServerContext* ctx, const v1::GetTensorsRequest* request) {
  absl::StatusOr<std::shared_ptr<IndexStore>> store = AuthorizedStore(ctx, "GetTensors");
  if (!store.ok()) return new FailedWriter<v1::TensorChunk>(metrics_, "GetTensors", store.status());
  std::optional<uint32_t> layer;
  if (request->has_layer()) layer = request->layer();
  absl::StatusOr<std::unique_ptr<TensorReader>> reader =
      (*store)->ReadTensors(request->model_id(), request->version(), request->kind(), layer);
  if (!reader.ok()) {
    return new FailedWriter<v1::TensorChunk>(metrics_, "GetTensors", reader.status());
  }
  return new GetTensorsReactor(metrics_, *std::move(store), *std::move(reader), request->model_id(),
                               options_.chunk_bytes);
}

grpc::ServerUnaryReactor* IndexServiceImpl::SealVersion(grpc::CallbackServerContext* ctx,
                                                        const v1::SealVersionRequest* request,
                                                        v1::VersionInfo* response) {
  return Unary(ctx, "SealVersion", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(*response, store.SealVersion(request->model_id(), request->version()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::PublishVersion(grpc::CallbackServerContext* ctx,
                                                           const v1::PublishVersionRequest* request,
                                                           v1::PublishVersionResponse* response) {
  return Unary(ctx, "PublishVersion", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(PublishResult result,
                            store.PublishVersion(request->model_id(), request->version(),
                                                 request->expected_current_version()));
    *response->mutable_published() = std::move(result.published);
    response->set_previous_version(result.previous_version);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::ListVersions(grpc::CallbackServerContext* ctx,
                                                         const v1::ListVersionsRequest* request,
                                                         v1::ListVersionsResponse* response) {
  return Unary(ctx, "ListVersions", [&](IndexStore& store) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(*response, store.ListVersions(request->model_id()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* IndexServiceImpl::DeleteVersion(grpc::CallbackServerContext* ctx,
                                                          const v1::DeleteVersionRequest* request,
                                                          v1::DeleteVersionResponse* response) {
  return Unary(ctx, "DeleteVersion", [&](IndexStore& store) -> absl::Status {
    return store.DeleteVersion(request->model_id(), request->version());
  });
}

grpc::ServerWriteReactor<v1::PublishedEvent>* IndexServiceImpl::WatchPublished(
    grpc::CallbackServerContext* ctx, const v1::WatchPublishedRequest* request) {
  absl::StatusOr<std::shared_ptr<IndexStore>> store = AuthorizedStore(ctx, "WatchPublished");
  absl::Status status = store.status();
  if (status.ok()) status = ValidateModelId(request->model_id());
  if (!status.ok()) {
    return new FailedWriter<v1::PublishedEvent>(metrics_, "WatchPublished", status);
  }
  auto* watcher = new Watcher(this, request->model_id());
  absl::MutexLock lock(&watch_mu_);
  if (shut_down_) {
    watcher->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "index service shutting down"));
    return watcher;
  }
  // Registered before reading the current version, under watch_mu_ (which a publish must take to
  // notify): no publish is missed, and a duplicate is dropped by the watcher.
  absl::StatusOr<CurrentVersion> current = (*store)->GetCurrent(request->model_id());
  if (!current.ok()) {
    watcher->Close(ToGrpcStatus(current.status()));
    return watcher;
  }
  watchers_.insert(watcher);
  metrics_->WatcherAdded();
  if (current->version != 0 && current->version != request->after_version()) {
    // A reconnecting watcher first gets what it missed: every version published after
    // `after_version`, in publish order (by each version's latest publish; equal milliseconds
    // by version number), ending with the current one.
    for (const auto& [ms, version] :
         MissedPublishes(**store, request->model_id(), request->after_version())) {
      if (version != current->version) watcher->Push(version, ms);
    }
    watcher->Push(current->version, current->published_unix_ms);
  }
  return watcher;
}

grpc::ServerUnaryReactor* IndexServiceImpl::Backup(grpc::CallbackServerContext* ctx,
                                                   const v1::BackupRequest* request,
                                                   v1::BackupResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<std::shared_ptr<IndexStore>> store = AuthorizedStore(ctx, "Backup");
  if (!store.ok()) {
    metrics_->RecordRpc("Backup", store.status().code(), SecondsSince(start));
    reactor->Finish(ToGrpcStatus(store.status()));
    return reactor;
  }
  absl::StatusOr<std::string> dir = ResolveBackupDir(options_.backup_root, request->backup_dir());
  if (!dir.ok()) {
    metrics_->RecordRpc("Backup", dir.status().code(), SecondsSince(start));
    reactor->Finish(ToGrpcStatus(dir.status()));
    return reactor;
  }
  // Backups take seconds: run them off the gRPC thread.
  RunInBackground([this, reactor, response, start, dir = *dir, store = *std::move(store)] {
    absl::StatusOr<BackupEntry> entry = store->Backup(dir);
    if (entry.ok()) {
      response->set_backup_id(entry->backup_id);
      response->set_size_bytes(entry->size_bytes);
      response->set_timestamp_unix(entry->timestamp_unix);
    }
    metrics_->RecordRpc("Backup", entry.status().code(), SecondsSince(start));
    reactor->Finish(ToGrpcStatus(entry.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* IndexServiceImpl::ListBackups(grpc::CallbackServerContext* ctx,
                                                        const v1::ListBackupsRequest* request,
                                                        v1::ListBackupsResponse* response) {
  return Unary(ctx, "ListBackups", [&](IndexStore&) -> absl::Status {
    SPATTN_ASSIGN_OR_RETURN(std::string dir,
                            ResolveBackupDir(options_.backup_root, request->backup_dir()));
    SPATTN_ASSIGN_OR_RETURN(std::vector<BackupEntry> entries, IndexStore::ListBackups(dir));
    for (const BackupEntry& e : entries) {
      v1::BackupResponse* b = response->add_backups();
      b->set_backup_id(e.backup_id);
      b->set_size_bytes(e.size_bytes);
      b->set_timestamp_unix(e.timestamp_unix);
    }
    return absl::OkStatus();
  });
}

}  // namespace spattn
