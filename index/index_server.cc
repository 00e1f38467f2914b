#include "index/index_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index/index_service.h"
#include "index/metrics.h"
#include "index/store.h"

namespace spattn {
namespace {

constexpr char kServiceName[] = "spattn.v1.IndexService";

void Log(const std::string& line) { std::fprintf(stderr, "[spattn-index] %s\n", line.c_str()); }

}  // namespace

IndexServer::IndexServer(const IndexServerOptions& options) : options_(options) {}

IndexServer::~IndexServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<IndexServer>> IndexServer::Start(const IndexServerOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: is empty");
  if (options.keep_versions < 0) return absl::InvalidArgumentError("keep_versions: must be >= 0");
  if (options.max_message_bytes < (64 << 10)) {
    return absl::InvalidArgumentError("max_message_bytes: must be at least 65536");
  }
  std::unique_ptr<IndexServer> server(new IndexServer(options));
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->metrics_ = std::make_unique<IndexMetrics>(*server->registry_);
  if (!options.metrics_address.empty()) {
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("metrics_address: cannot listen on '",
                                                 options.metrics_address, "': ", e.what()));
    }
    server->exposer_->RegisterCollectable(server->registry_);
    std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_port_ = ports.empty() ? 0 : ports[0];
  }

  IndexServiceOptions service_options;
  // Leave room for the message framing around a data chunk.
  service_options.chunk_bytes = std::min(options.chunk_bytes, options.max_message_bytes - 4096);
  service_options.backup_root = options.backup_root;
  service_options.auth = options.auth;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  server->service_ = std::make_unique<IndexServiceImpl>(server->metrics_.get(), service_options);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *creds, &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->server_.reset();
    return absl::UnavailableError(
        absl::StrCat("listen_address: cannot listen on '", options.listen_address, "'"));
  }
  server->SetServing(false);

  absl::MutexLock lock(&server->mu_);
  if (!options.restore_from.empty()) {
    if (IndexStore::DatabaseExists(options.data_dir)) {
      Log(absl::StrCat("data_dir ", options.data_dir,
                       " already holds a database; not restoring from ", options.restore_from));
    } else {
      absl::Status s = IndexStore::RestoreLatestBackup(options.restore_from, options.data_dir);
      if (!s.ok()) return s;
      Log(absl::StrCat("restored the latest backup of ", options.restore_from, " into ",
                       options.data_dir));
    }
  }
  absl::Status s = server->OpenStoreLocked();
  if (!s.ok()) return s;
  return server;
}

std::string IndexServer::address() const {
  const std::string& a = options_.listen_address;
  const size_t colon = a.rfind(':');
  std::string host = colon == std::string::npos ? a : a.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", port_);
}

void IndexServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(kServiceName, serving);
  health->SetServingStatus("", serving);
}

absl::Status IndexServer::OpenStoreLocked() {
  IndexStoreOptions store_options;
  store_options.path = options_.data_dir;
  store_options.keep_versions = options_.keep_versions;
  store_options.sync_writes = options_.sync_writes;
  IndexMetrics* metrics = metrics_.get();
  store_options.op_observer = [metrics](absl::string_view op, absl::string_view cf,
                                        absl::string_view result) {
    metrics->RecordRocksDbOp(op, cf, result);
  };
  absl::StatusOr<std::unique_ptr<IndexStore>> store = IndexStore::Open(store_options);
  if (!store.ok()) return store.status();
  service_->AttachStore(std::shared_ptr<IndexStore>(*std::move(store)));
  SetServing(true);
  return absl::OkStatus();
}

absl::Status IndexServer::OpenStore() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::FailedPreconditionError("the server is shut down");
  return OpenStoreLocked();
}

absl::Status IndexServer::CloseStore() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::FailedPreconditionError("the server is shut down");
  SetServing(false);
  absl::StatusOr<std::shared_ptr<IndexStore>> store = service_->DetachStore(absl::Seconds(10));
  return store.status();  // Dropping the last reference closes the database.
}

void IndexServer::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
      health->Shutdown();
    }
  }
  if (service_ != nullptr) service_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }
  if (service_ != nullptr) service_->DetachStore(absl::Seconds(5)).IgnoreError();
  exposer_.reset();
}

}  // namespace spattn
