// The worker's local cache of what the index service knows: per (model, version), the model and
// its per-head method configs, and per (model, version, layer) the learned assets (Saap's
// centroids and classifiers). Version 0 means "the published version": it is fetched once and
// then kept fresh by a WatchPublished stream per model. A pinned version (config_version > 0) is
// immutable and cached as is. When the index service is down, everything cached keeps serving;
// only models never seen before fail (UNAVAILABLE).
#ifndef SPATTN_SERVER_CONFIG_CACHE_H_
#define SPATTN_SERVER_CONFIG_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/method_config.h"
#include "proto/grpc_security.h"
#include "server/request.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {

struct ConfigCacheOptions {
  // host:port of the index service. Default: "" (no index service: every Get fails with
  // FAILED_PRECONDITION).
  std::string index_address;
  // TLS / mTLS and bearer token for the index service (plaintext, no token by default).
  ClientSecurityOptions security;
  // Longest wait for one index-service RPC on the request path (capped by the request's own
  // deadline). Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Reconnect back-off of the watch streams: doubles from min to max. Default: 100 ms, 5 s.
  absl::Duration retry_min = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(5);
  // Pinned versions kept per model (oldest fetched dropped first). Default: 16.
  int max_pinned_versions = 16;
  // Layers of learned assets kept over all models (oldest fetched dropped first). Default: 512.
  int max_asset_layers = 512;
  // Largest message the index service may send. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Called (from any thread) whenever the link to the index service goes up or down.
  // Default: none.
  std::function<void(bool up)> on_link_change;
};

// Thread-safe: Get/GetAssets may be called from many executor threads at once.
class ConfigCache {
 public:
  // Connects to options.index_address lazily: the index service may come up after the worker.
  explicit ConfigCache(const ConfigCacheOptions& options);
  // For tests: talk through `stub` instead of a channel to options.index_address.
  ConfigCache(const ConfigCacheOptions& options,
              std::unique_ptr<v1::IndexService::StubInterface> stub);
  ~ConfigCache();  // Calls Shutdown().
  ConfigCache(const ConfigCache&) = delete;
  ConfigCache& operator=(const ConfigCache&) = delete;

  bool configured() const { return stub_ != nullptr; }

  // The config of `model_id` at `version` (0 = published; a model with nothing published yet
  // gets version 0 and its default method everywhere). NOT_FOUND for an unknown model or version,
  // UNAVAILABLE when the index service is unreachable and nothing is cached.
  absl::StatusOr<std::shared_ptr<const ModelConfig>> Get(const std::string& model_id,
                                                         uint64_t version, absl::Time deadline);

  // The learned assets of one layer of `model` (empty assets when none are stored).
  absl::StatusOr<std::shared_ptr<const LayerAssets>> GetAssets(const ModelConfig& model, int layer,
                                                               absl::Time deadline);

  // Whether the last contact with the index service worked (true when none is configured).
  bool link_up() const;
  // One line for health details and logs, e.g. "index service 10.0.0.2:7000 down for 12.3 s;
  // serving 2 models from cache".
  std::string LinkDetail() const;
  // Published versions currently cached, by model (for tests and metadata).
  std::map<std::string, uint64_t> PublishedVersions() const;

  // Stops the watch streams; later Gets still serve from cache but fetch nothing new.
  void Shutdown();

 private:
  absl::StatusOr<std::shared_ptr<const ModelConfig>> Fetch(const std::string& model_id,
                                                           uint64_t version, absl::Time deadline);
  void WatchLoop(std::string model_id);
  void SetLink(bool up);
  void StartWatchLocked(const std::string& model_id);
  bool SleepUnlessStopped(absl::Duration d);
  void SetDeadline(grpc::ClientContext* ctx, absl::Time deadline) const;

  const ConfigCacheOptions options_;
  bool stub_override_ = false;
  std::unique_ptr<v1::IndexService::StubInterface> stub_;

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopped_ = false;                                                 // Guarded by mu_.
  bool link_up_ = true;                                                  // Guarded by mu_.
  absl::Time link_down_since_ = absl::InfinitePast();                    // Guarded by mu_.
  std::map<std::string, std::shared_ptr<const ModelConfig>> published_;  // Guarded by mu_.
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const ModelConfig>>
      pinned_;                                                  // Guarded by mu_.
  std::vector<std::pair<std::string, uint64_t>> pinned_order_;  // Guarded by mu_.
  std::map<std::tuple<std::string, uint64_t, int>, std::shared_ptr<const LayerAssets>>
      assets_;                                                        // Guarded by mu_.
  std::vector<std::tuple<std::string, uint64_t, int>> assets_order_;  // Guarded by mu_.
  std::set<grpc::ClientContext*> watch_contexts_;                     // Guarded by mu_.
  std::map<std::string, std::thread> watchers_;                       // Guarded by mu_.
};

}  // namespace spattn

#endif  // SPATTN_SERVER_CONFIG_CACHE_H_
