// IndexServer: the index service process in a box (RocksDB store, gRPC IndexService with health
// and reflection, optional Prometheus exposer). The spattn-index binary and in-process
// integration tests both start it through Start().
//
// Start order: metrics, gRPC (health NOT_SERVING), restore (if asked and data_dir holds no
// database), open the database, health SERVING. CloseStore()/OpenStore() take the database away
// and back at run time (health NOT_SERVING, RPCs UNAVAILABLE in between).
//
// Thread-safety: all methods are thread-safe; Shutdown() may be called more than once.
#ifndef SPATTN_INDEX_INDEX_SERVER_H_
#define SPATTN_INDEX_INDEX_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/grpc_security.h"

namespace grpc {
class Server;
}  // namespace grpc
namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace spattn {

class IndexMetrics;
class IndexServiceImpl;

struct IndexServerOptions {
  // RocksDB directory; created when missing. Default: none (required).
  std::string data_dir;
  // gRPC listen address; port 0 picks a free port (see port()). Default: "127.0.0.1:0".
  std::string listen_address = "127.0.0.1:0";
  // Prometheus exposer address ("host:port", port 0 = any); "" = no exposer. Default: "".
  std::string metrics_address;
  // Backup directory restored into data_dir before opening, when data_dir holds no database yet
  // (an existing database is kept and the restore skipped, so restarts never roll back).
  // Default: "" (no restore).
  std::string restore_from;
  // Versions kept per model (older STAGED/RETIRED ones are deleted); 0 = all. Default: 0.
  int keep_versions = 0;
  // Largest gRPC message received or sent, in bytes. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
  // Tensor bytes per GetTensors message (capped to fit max_message_bytes). Default: 1 MiB.
  int chunk_bytes = 1 << 20;
  // fsync the WAL before acknowledging writes. Default: true.
  bool sync_writes = true;
  // Backup RPCs name directories under this one (names, not paths); "" = backups over RPC
  // are off. Default: "".
  std::string backup_root;
  // TLS / mTLS of the gRPC listener. Default: plaintext.
  ServerTlsOptions tls;
  // Tokens / mTLS identities with roles (see IndexServiceOptions::auth). Default: none.
  AuthConfig auth;
};

class IndexServer {
 public:
  static absl::StatusOr<std::unique_ptr<IndexServer>> Start(const IndexServerOptions& options);
  ~IndexServer();
  IndexServer(const IndexServer&) = delete;
  IndexServer& operator=(const IndexServer&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:PORT" style address clients can dial.
  std::string address() const;
  // 0 when there is no exposer.
  int metrics_port() const { return metrics_port_; }
  prometheus::Registry& registry() { return *registry_; }

  // Closes the database (waiting up to 10 s for running calls): health NOT_SERVING, RPCs
  // UNAVAILABLE until OpenStore().
  absl::Status CloseStore();
  // Opens data_dir again and serves from it.
  absl::Status OpenStore();

  // Health NOT_SERVING, watch streams ended, gRPC drained (in-flight calls get 5 s), database
  // closed, exposer stopped.
  void Shutdown();

 private:
  explicit IndexServer(const IndexServerOptions& options);
  absl::Status OpenStoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetServing(bool serving);

  const IndexServerOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<IndexMetrics> metrics_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<IndexServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int metrics_port_ = 0;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace spattn

#endif  // SPATTN_INDEX_INDEX_SERVER_H_
