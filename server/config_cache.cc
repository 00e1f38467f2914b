#include "server/config_cache.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "index/crc32c.h"
#include "kernels/status_macros.h"
#include "proto/grpc_status.h"
#include "server/convert.h"
#include "server/log.h"

namespace spattn {
namespace {

bool LinkFailure(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

ConfigCache::ConfigCache(const ConfigCacheOptions& options) : options_(options) {
  if (!options_.index_address.empty()) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options_.max_message_bytes);
    // Reconnect quickly once the index service is back.
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.retry_max)));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.retry_min)));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.retry_min)));
    // WorkerServer::Start checked the security options; a failure here leaves no stub (every
    // Get then fails with FAILED_PRECONDITION).
    auto channel = MakeChannel(options_.index_address, options_.security, args);
    if (channel.ok()) {
      stub_ = v1::IndexService::NewStub(*channel);
    } else {
      Log(LogLevel::kError, "index_channel_failed",
          {{"error", std::string(channel.status().message())}});
    }
  }
}

ConfigCache::ConfigCache(const ConfigCacheOptions& options,
                         std::unique_ptr<v1::IndexService::StubInterface> stub)
    : options_(options), stub_override_(true), stub_(std::move(stub)) {}

ConfigCache::~ConfigCache() { Shutdown(); }

void ConfigCache::Shutdown() {
  std::map<std::string, std::thread> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    for (grpc::ClientContext* ctx : watch_contexts_) ctx->TryCancel();
    watchers.swap(watchers_);
  }
  stop_cv_.notify_all();
  for (auto& entry : watchers) entry.second.join();
}

void ConfigCache::SetDeadline(grpc::ClientContext* ctx, absl::Time deadline) const {
  const absl::Time d = std::min(deadline, absl::Now() + options_.rpc_timeout);
  ctx->set_deadline(absl::ToChronoTime(d));
}

void ConfigCache::SetLink(bool up) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_up_ != up) {
      changed = true;
      link_up_ = up;
      link_down_since_ = up ? absl::InfinitePast() : absl::Now();
    }
  }
  if (!changed) return;
  Log(up ? LogLevel::kInfo : LogLevel::kWarning, up ? "index_link_up" : "index_link_down",
      {{"index_address", options_.index_address}});
  if (options_.on_link_change) options_.on_link_change(up);
}

bool ConfigCache::link_up() const {
  std::lock_guard<std::mutex> lock(mu_);
  return link_up_;
}

std::string ConfigCache::LinkDetail() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!configured()) return "no index service configured";
  std::set<std::string> models;
  for (const auto& e : published_) models.insert(e.first);
  for (const auto& e : pinned_) models.insert(e.first.first);
  if (link_up_) {
    return absl::StrCat("index service ", options_.index_address, " up; ", models.size(),
                        " models cached");
  }
  return absl::StrCat("index service ", options_.index_address, " down for ",
                      absl::ToDoubleSeconds(absl::Now() - link_down_since_), " s; serving ",
                      models.size(), " models from cache");
}

std::map<std::string, uint64_t> ConfigCache::PublishedVersions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& e : published_) out[e.first] = e.second->version;
  return out;
}

absl::StatusOr<std::shared_ptr<const ModelConfig>> ConfigCache::Fetch(const std::string& model_id,
                                                                      uint64_t version,
                                                                      absl::Time deadline) {
  v1::Model model;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline);
    v1::GetModelRequest req;
    req.set_model_id(model_id);
    const absl::Status s = FromGrpcStatus(stub_->GetModel(&ctx, req, &model));
    if (!s.ok()) {
      if (LinkFailure(s.code())) SetLink(false);
      if (s.code() == absl::StatusCode::kNotFound) {
        SetLink(true);
        return absl::NotFoundError(
            absl::StrCat("model_id: model '", model_id, "' is not known to the index service"));
      }
      return absl::Status(s.code(),
                          absl::StrCat("index service GetModel('", model_id, "'): ", s.message()));
    }
  }
  SetLink(true);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  v1::GetHeadConfigsRequest req;
  req.set_model_id(model_id);
  req.set_version(version);
  v1::GetHeadConfigsResponse resp;
  const absl::Status s = FromGrpcStatus(stub_->GetHeadConfigs(&ctx, req, &resp));
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kNotFound && version == 0) {
      // Nothing published yet: the model's default method everywhere.
      google::protobuf::RepeatedPtrField<v1::HeadConfig> none;
      SPATTN_ASSIGN_OR_RETURN(ModelConfig m, ModelConfigFromProto(model, 0, none));
      return std::make_shared<const ModelConfig>(std::move(m));
    }
    if (s.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(
          absl::StrCat("config_version: model '", model_id, "' has no version ", version));
    }
    if (LinkFailure(s.code())) SetLink(false);
    return absl::Status(s.code(), absl::StrCat("index service GetHeadConfigs('", model_id, "', ",
                                               version, "): ", s.message()));
  }
  const v1::Model& m = resp.has_model() ? resp.model() : model;
  SPATTN_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfigFromProto(m, resp.version(), resp.configs()));
  return std::make_shared<const ModelConfig>(std::move(cfg));
}

absl::StatusOr<std::shared_ptr<const ModelConfig>> ConfigCache::Get(const std::string& model_id,
                                                                    uint64_t version,
                                                                    absl::Time deadline) {
  if (!configured()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model_id: '", model_id,
                     "' needs head configs, but this worker has no index service configured "
                     "(start it with --index_address, or send a method_override without "
                     "model_id)"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (version == 0) {
      auto it = published_.find(model_id);
      if (it != published_.end()) return it->second;
    } else {
      auto it = pinned_.find({model_id, version});
      if (it != pinned_.end()) return it->second;
      auto pub = published_.find(model_id);
      if (pub != published_.end() && pub->second->version == version) return pub->second;
    }
    if (stopped_) {
      return absl::UnavailableError(
          absl::StrCat("model_id: '", model_id, "' is not cached and the worker is stopping"));
    }
  }
  auto fetched = Fetch(model_id, version, deadline);
  if (!fetched.ok()) {
    if (LinkFailure(fetched.status().code())) {
      return absl::UnavailableError(
          absl::StrCat("index service unreachable and no cached config for model '", model_id,
                       "' version ", version, " (", fetched.status().message(), ")"));
    }
    return fetched.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (version == 0) {
    auto it = published_.find(model_id);
    if (it != published_.end()) return it->second;  // Another thread got there first.
    published_[model_id] = *fetched;
    if (!stopped_) StartWatchLocked(model_id);
    return *fetched;
  }
  auto key = std::make_pair(model_id, version);
  auto it = pinned_.find(key);
  if (it != pinned_.end()) return it->second;
  pinned_[key] = *fetched;
  pinned_order_.push_back(key);
  int count = 0;
  for (const auto& k : pinned_order_) count += k.first == model_id;
  if (count > options_.max_pinned_versions) {
    for (auto o = pinned_order_.begin(); o != pinned_order_.end(); ++o) {
      if (o->first == model_id) {
        pinned_.erase(*o);
        pinned_order_.erase(o);
        break;
      }
    }
  }
  return *fetched;
}

void ConfigCache::StartWatchLocked(const std::string& model_id) {
  if (watchers_.count(model_id) != 0) return;
  watchers_[model_id] = std::thread([this, model_id] { WatchLoop(model_id); });
}

bool ConfigCache::SleepUnlessStopped(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  stop_cv_.wait_for(lock, absl::ToChronoNanoseconds(d), [this] { return stopped_; });
  return !stopped_;
}

void ConfigCache::WatchLoop(std::string model_id) {
  absl::Duration backoff = options_.retry_min;
  bool resync = false;  // The first watch follows the fetch that started it.
  for (;;) {
    uint64_t current = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      current = published_.at(model_id)->version;
    }
    if (resync) {
      // Is the index service back? (Marks the link up.) What was published while the stream
      // was down is not taken from here: the watch below resumes after `current`, and the
      // index service replays every version published since, in publish order, so each one is
      // applied (and logged) in turn and none is skipped.
      auto fresh = Fetch(model_id, 0, absl::InfiniteFuture());
      if (!fresh.ok()) {
        if (!SleepUnlessStopped(backoff)) return;
        backoff = std::min(backoff * 2, options_.retry_max);
        continue;
      }
    }
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      watch_contexts_.insert(&ctx);
    }
    v1::WatchPublishedRequest req;
    req.set_model_id(model_id);
    req.set_after_version(current);
    std::unique_ptr<grpc::ClientReaderInterface<v1::PublishedEvent>> reader(
        stub_->WatchPublished(&ctx, req));
    v1::PublishedEvent event;
    while (reader->Read(&event)) {
      SetLink(true);
      backoff = options_.retry_min;
      if (event.version() <= current) continue;
      auto fresh = Fetch(model_id, event.version(), absl::InfiniteFuture());
      if (!fresh.ok()) {
        Log(LogLevel::kWarning, "config_refresh_failed",
            {{"model_id", model_id},
             {"version", std::to_string(event.version())},
             {"error", std::string(fresh.status().message())}});
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      published_[model_id] = *fresh;
      current = event.version();
      Log(LogLevel::kInfo, "config_refreshed",
          {{"model_id", model_id}, {"version", std::to_string(current)}});
    }
    const grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_contexts_.erase(&ctx);
      if (stopped_) return;
    }
    SetLink(false);
    Log(LogLevel::kWarning, "index_watch_ended",
        {{"model_id", model_id}, {"error", status.error_message()}});
    resync = true;
    if (!SleepUnlessStopped(backoff)) return;
    backoff = std::min(backoff * 2, options_.retry_max);
  }
}

absl::StatusOr<std::shared_ptr<const LayerAssets>> ConfigCache::GetAssets(const ModelConfig& model,
                                                                          int layer,
                                                                          absl::Time deadline) {
  const auto key = std::make_tuple(model.model_id, model.version, layer);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = assets_.find(key);
    if (it != assets_.end()) return it->second;
  }
  if (!configured()) return absl::FailedPreconditionError("no index service configured");
  auto assets = std::make_shared<LayerAssets>();
  assets->rope_theta = model.rope_theta;
  for (v1::TensorKind kind : {v1::TENSOR_KIND_CENTROIDS, v1::TENSOR_KIND_CLASSIFIER}) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline);
    v1::GetTensorsRequest req;
    req.set_model_id(model.model_id);
    req.set_version(model.version);
    req.set_kind(kind);
    req.set_layer(static_cast<uint32_t>(layer));
    std::unique_ptr<grpc::ClientReaderInterface<v1::TensorChunk>> reader(
        stub_->GetTensors(&ctx, req));
    v1::TensorChunk chunk;
    v1::TensorHeader header;
    std::string bytes;
    bool open = false;
    absl::Status bad;
    auto finish_tensor = [&]() -> absl::Status {
      if (bytes.size() != header.total_bytes()) {
        return absl::DataLossError(absl::StrCat("tensor of layer ", header.key().layer(), " head ",
                                                header.key().head(), ": got ", bytes.size(), " of ",
                                                header.total_bytes(), " bytes"));
      }
      if (Crc32c(bytes.data(), bytes.size()) != header.crc32c()) {
        return absl::DataLossError(absl::StrCat("tensor of layer ", header.key().layer(), " head ",
                                                header.key().head(), ": crc32c mismatch"));
      }
      return AddTensorToAssets(header, bytes, model, assets.get());
    };
    while (bad.ok() && reader->Read(&chunk)) {
      if (chunk.has_header()) {
        if (open) bad = finish_tensor();
        header = chunk.header();
        bytes.clear();
        open = true;
      } else if (open) {
        bytes += chunk.data();
      } else {
        bad = absl::DataLossError("tensor data before its header");
      }
    }
    if (!bad.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return bad;
    }
    const absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) {
      if (LinkFailure(s.code())) {
        SetLink(false);
        return absl::UnavailableError(absl::StrCat("index service unreachable and layer ", layer,
                                                   " assets of model '", model.model_id,
                                                   "' are not cached (", s.message(), ")"));
      }
      // A version without stored tensors is not an error: the builder says what it lacks.
      if (s.code() == absl::StatusCode::kNotFound) continue;
      return absl::Status(s.code(), absl::StrCat("index service GetTensors: ", s.message()));
    }
    if (open) SPATTN_RETURN_IF_ERROR(finish_tensor());
  }
  SPATTN_RETURN_IF_ERROR(FinishAssets(model, assets.get()));
  SetLink(true);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = assets_.find(key);
  if (it != assets_.end()) return it->second;
  assets_[key] = assets;
  assets_order_.push_back(key);
  if (static_cast<int>(assets_order_.size()) > options_.max_asset_layers) {
    assets_.erase(assets_order_.front());
    assets_order_.erase(assets_order_.begin());
  }
  return std::shared_ptr<const LayerAssets>(assets);
}

}  // namespace spattn
