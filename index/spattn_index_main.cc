// spattn-index: the index service binary. See index/README.md.
//   spattn-index --data_dir=/var/lib/spattn-index --listen=0.0.0.0:50061 \
//                --metrics_listen=0.0.0.0:9461
// SIGTERM / SIGINT shut it down gracefully (health NOT_SERVING, streams ended, database closed).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "index/index_server.h"
#include "index/metrics.h"
#include "kernels/status_macros.h"

namespace {

struct Flag {
  const char* name;
  const char* help;
};

constexpr Flag kFlags[] = {
    {"data_dir", "RocksDB directory (created when missing). Required."},
    {"listen", "gRPC listen address (port 0 = any free port). Default 0.0.0.0:50061."},
    {"metrics_listen",
     "Prometheus /metrics listen address, e.g. 0.0.0.0:9461; empty (default) = no exposer."},
    {"restore_from",
     "Backup directory to restore into data_dir on start when data_dir holds no database."},
    {"keep_versions", "Versions kept per model (default 0 = all)."},
    {"max_message_bytes", "Largest gRPC message sent or received (default 67108864)."},
    {"backup_root",
     "Directory holding the backups the Backup RPC writes; requests name a backup directory "
     "under it ([A-Za-z0-9._-]{1,128}), never a path. Empty (default) = Backup and ListBackups "
     "are off."},
    {"tls_cert", "PEM certificate chain: serve TLS."},
    {"tls_key", "PEM private key of --tls_cert."},
    {"tls_ca", "PEM CA bundle verifying client certificates (mTLS)."},
    {"tls_require_client_cert",
     "Refuse TLS clients without a certificate the CA verifies (default false)."},
    {"auth_tokens_file",
     "Tokens and mTLS identities with roles ('token SECRET ROLE NAME' / 'cert ID ROLE' lines, "
     "mode 0600): writes then need the write role, reads the read role. Empty = authorization "
     "off."},
    {"port_file",
     "After start, write the gRPC port (and the metrics port) to this file, for scripts."},
    {"version", "Print the service version and exit."},
    {"help", "Print this list and exit (also --helpfull, -h)."},
};

void Usage() {
  std::fprintf(stderr,
               "usage: spattn-index --data_dir=DIR [--name=value ...]\n"
               "spattn index service: per-model sparse-attention configs, centroids and "
               "classifier weights in RocksDB.\n");
  for (const Flag& f : kFlags) std::fprintf(stderr, "  --%s: %s\n", f.name, f.help);
}

// The flags into `options` (and `port_file`); INVALID_ARGUMENT naming the flag.
absl::Status ReadFlags(spattn::CommandLine& line, spattn::IndexServerOptions* options,
                       std::string* port_file) {
  options->listen_address = "0.0.0.0:50061";
  SPATTN_RETURN_IF_ERROR(line.Read("data_dir", &options->data_dir));
  SPATTN_RETURN_IF_ERROR(line.Read("listen", &options->listen_address));
  SPATTN_RETURN_IF_ERROR(line.Read("metrics_listen", &options->metrics_address));
  SPATTN_RETURN_IF_ERROR(line.Read("restore_from", &options->restore_from));
  SPATTN_RETURN_IF_ERROR(line.Read("keep_versions", &options->keep_versions));
  SPATTN_RETURN_IF_ERROR(line.Read("max_message_bytes", &options->max_message_bytes));
  SPATTN_RETURN_IF_ERROR(line.Read("backup_root", &options->backup_root));
  SPATTN_RETURN_IF_ERROR(line.Read("tls_cert", &options->tls.cert_file));
  SPATTN_RETURN_IF_ERROR(line.Read("tls_key", &options->tls.key_file));
  SPATTN_RETURN_IF_ERROR(line.Read("tls_ca", &options->tls.ca_file));
  SPATTN_RETURN_IF_ERROR(line.Read("tls_require_client_cert", &options->tls.require_client_cert));
  std::string auth_file;
  SPATTN_RETURN_IF_ERROR(line.Read("auth_tokens_file", &auth_file));
  SPATTN_RETURN_IF_ERROR(line.Read("port_file", port_file));
  SPATTN_RETURN_IF_ERROR(line.CheckAllUsed());
  if (!auth_file.empty()) {
    absl::StatusOr<spattn::AuthConfig> auth = spattn::LoadAuthFile(auth_file);
    if (!auth.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens_file: ", auth.status().message()));
    }
    options->auth = *std::move(auth);
  }
  if (options->data_dir.empty()) return absl::InvalidArgumentError("--data_dir is required");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  spattn::IndexServerOptions options;
  std::string port_file;
  spattn::MainFlags flags;
  flags.program = "spattn-index";
  flags.usage = Usage;
  flags.version = spattn::kSpattnVersion;
  flags.boolean = {"tls_require_client_cert"};
  flags.read = [&](spattn::CommandLine& line) { return ReadFlags(line, &options, &port_file); };
  const int rc = spattn::HandleMainFlags(argc, argv, flags);
  if (rc >= 0) return rc;

  // Block the shutdown signals before any thread starts, then wait for them on this thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

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
