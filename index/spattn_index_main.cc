// spattn-index: the index service binary. See index/README.md.
//   spattn-index --data_dir=/var/lib/spattn-index --listen=0.0.0.0:50061 \
//                --metrics_listen=0.0.0.0:9461
// SIGTERM / SIGINT shut it down gracefully (health NOT_SERVING, streams ended, database closed).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "index/index_server.h"
#include "index/metrics.h"

ABSL_FLAG(std::string, data_dir, "", "RocksDB directory (created when missing). Required.");
ABSL_FLAG(std::string, listen, "0.0.0.0:50061", "gRPC listen address (port 0 = any free port).");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics listen address, e.g. 0.0.0.0:9461; empty = no exposer.");
ABSL_FLAG(std::string, restore_from, "",
          "Backup directory to restore into data_dir on start when data_dir holds no database.");
ABSL_FLAG(int, keep_versions, 0, "Versions kept per model (0 = all).");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "Largest gRPC message sent or received.");
ABSL_FLAG(std::string, backup_root, "",
          "Directory holding the backups the Backup RPC writes; requests name a backup "
          "directory under it ([A-Za-z0-9._-]{1,128}), never a path. Empty = Backup and "
          "ListBackups are off.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle verifying client certificates (mTLS).");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "Refuse TLS clients without a certificate the CA verifies.");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Tokens and mTLS identities with roles ('token SECRET ROLE NAME' / 'cert ID ROLE' "
          "lines, mode 0600): writes then need the write role, reads the read role. Empty = "
          "authorization off.");
ABSL_FLAG(std::string, port_file, "",
          "After start, write the gRPC port (and the metrics port) to this file, for scripts.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "spattn index service: per-model sparse-attention configs, "
      "centroids and classifier weights in RocksDB.");
  absl::ParseCommandLine(argc, argv);

  // Block the shutdown signals before any thread starts, then wait for them on this thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  spattn::IndexServerOptions options;
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  options.restore_from = absl::GetFlag(FLAGS_restore_from);
  options.keep_versions = absl::GetFlag(FLAGS_keep_versions);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.backup_root = absl::GetFlag(FLAGS_backup_root);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  if (!absl::GetFlag(FLAGS_auth_tokens_file).empty()) {
    absl::StatusOr<spattn::AuthConfig> auth =
        spattn::LoadAuthFile(absl::GetFlag(FLAGS_auth_tokens_file));
    if (!auth.ok()) {
      std::fprintf(stderr, "spattn-index: --auth_tokens_file: %s\n",
                   std::string(auth.status().message()).c_str());
      return 2;
    }
    options.auth = *std::move(auth);
  }
  if (options.data_dir.empty()) {
    std::fprintf(stderr, "spattn-index: --data_dir is required\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<spattn::IndexServer>> server = spattn::IndexServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "spattn-index: cannot start: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::string metrics = (*server)->metrics_port() != 0
                            ? absl::StrCat(" metrics on :", (*server)->metrics_port(), "/metrics")
                            : " (no metrics exposer)";
  std::fprintf(stderr,
               "[spattn-index] %s serving spattn.v1.IndexService on %s (listen %s),%s, "
               "data_dir %s, keep_versions %d, max_message_bytes %d\n",
               spattn::kSpattnVersion, (*server)->address().c_str(), options.listen_address.c_str(),
               metrics.c_str(), options.data_dir.c_str(), options.keep_versions,
               options.max_message_bytes);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    // Write then rename, so a reader never sees a partial file.
    const std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*server)->port() << " " << (*server)->metrics_port() << "\n";
    }
    std::rename(tmp.c_str(), port_file.c_str());
  }

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "[spattn-index] signal %d: shutting down\n", sig);
  (*server)->Shutdown();
  std::fprintf(stderr, "[spattn-index] stopped\n");
  return 0;
}
