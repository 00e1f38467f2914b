// spattn-worker: the stateless attention worker. Flags (or `--config=FILE` with one
// `name = value` per line, '#' comments; flags on the command line win) are listed by --help.
// SIGTERM/SIGINT drain gracefully: health NOT_SERVING, in-flight calls finish, then exit 0.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/flags.h"
#include "kernels/method_config.h"
#include "proto/grpc_security.h"
#include "server/log.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

struct Flag {
  const char* name;
  const char* help;
};

constexpr Flag kFlags[] = {
    {"listen",
     "gRPC listen addresses: host:port and/or unix:/path, comma-separated (default "
     "0.0.0.0:50051); shared memory is registered through a unix: socket"},
    {"unix_socket_mode", "permissions of unix: sockets, octal (default 0660)"},
    {"shm_prefix", "shared-memory keys the worker maps must start with this (default /spattn-)"},
    {"allow_tcp_shm",
     "true: accept shared-memory regions over TCP, and CUDA IPC from anonymous TCP callers "
     "(no proof of who owns a segment; default false)"},
    {"tls_cert", "PEM certificate chain: serve TLS on the TCP address"},
    {"tls_key", "PEM private key of tls_cert"},
    {"tls_ca", "PEM CA bundle verifying client certificates (mTLS)"},
    {"tls_require_client_cert", "true: refuse TLS clients without a certificate (default false)"},
    {"auth_tokens_file",
     "tokens and mTLS identities with roles ('token SECRET ROLE NAME' / 'cert ID ROLE' lines): "
     "region RPCs then need the write role, attention the read role (default: off)"},
    {"index_tls_ca", "PEM CA bundle verifying the index service (TLS to it)"},
    {"index_tls_cert", "PEM client certificate for the index service (mTLS)"},
    {"index_tls_key", "PEM private key of index_tls_cert"},
    {"index_tls_server_name", "name checked against the index service's certificate"},
    {"index_token_file", "file whose first line is the bearer token for the index service"},
    {"metrics", "Prometheus endpoint host:port, '' = none (default 0.0.0.0:9464)"},
    {"index", "index service host:port, '' = none (default '')"},
    {"max_message_bytes", "largest gRPC message (default 268435456)"},
    {"max_inline_bytes", "largest inline tensor (default 67108864)"},
    {"queue_capacity", "requests waiting per device before RESOURCE_EXHAUSTED (default 64)"},
    {"executor_threads", "requests running at once per device (default 1)"},
    {"cpu_threads", "threads of the CPU kernels inside one request, 0 = all cores (default 0)"},
    {"dense_below_tokens", "run dense when every sequence is shorter, 0 = never (default 0)"},
    {"devices", "auto | cpu | cuda | cuda:0,cuda:1[,cpu] (default auto: every GPU, else cpu)"},
    {"gpu_workspace_bytes", "per GPU: CUDA engine workspace (default 1073741824)"},
    {"gpu_staging_bytes",
     "per GPU: device copies of host (inline/shm) tensors of a request (default 4294967296)"},
    {"saap_assets_bytes",
     "per GPU: Saap layer assets (centroids, classifiers) cached on the device, least recently "
     "used evicted first; the layer in use always stays, 0 = only it (default 2147483648)"},
    {"pin_shared_memory", "page-lock shm regions while a GPU serves: true | false (default true)"},
    {"default_method", "method without model or override (default dense)"},
    {"recall_sample_rows", "query rows sampled per head for estimate_recall (default 64)"},
    {"block_m", "query rows per index block (default 64)"},
    {"sampled_lines_block_m",
     "query rows per index block of sampled_lines, 0 = block_m (default 128)"},
    {"recall_probe_rows",
     "recall guard rows per head: 0 off, -1 auto = 32 on CPU, 64 on CUDA (default -1)"},
    {"recall_target", "recall guard target; <= 0 estimates without widening (default 0.95)"},
    {"recall_length_exponent",
     "recall guard: head configs start from budgets x (served / calibrated length)^E "
     "(default 0.68; 0: as published)"},
    {"recall_adaptive",
     "recall guard: the adaptive tries, auto (per head: sampled_lines,flex_prefill for "
     "sampled_lines heads, flex_prefill for others) or M or M1,M2 of sampled_lines | "
     "flex_prefill | none (default auto)"},
    {"index_rpc_timeout_s", "index-service RPC timeout, seconds (default 5)"},
    {"drain_grace_s", "seconds NOT_SERVING before refusing new calls on SIGTERM (default 0)"},
    {"drain_timeout_s", "longest wait for in-flight calls on SIGTERM, seconds (default 30)"},
    {"log_level", "debug | info | warning | error (default info)"},
    {"config", "file of 'name = value' lines with the flags above"},
};

void Usage() {
  std::cerr << "usage: spattn-worker [--name=value ...]\n";
  for (const Flag& f : kFlags) std::cerr << "  --" << f.name << ": " << f.help << "\n";
}

bool Known(const std::string& name) {
  for (const Flag& f : kFlags) {
    if (name == f.name) return true;
  }
  return false;
}

bool ReadConfigFile(const std::string& path, std::map<std::string, std::string>* values,
                    std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = absl::StrCat("--config: cannot read ", path);
    return false;
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    absl::string_view s = absl::StripAsciiWhitespace(line);
    if (s.empty() || s[0] == '#') continue;
    const size_t eq = s.find('=');
    if (eq == absl::string_view::npos) {
      *error = absl::StrCat(path, ":", n, ": expected 'name = value'");
      return false;
    }
    const std::string name(absl::StripAsciiWhitespace(s.substr(0, eq)));
    if (!Known(name) || name == "config") {
      *error = absl::StrCat(path, ":", n, ": unknown setting '", name, "'");
      return false;
    }
    (*values)[name] = std::string(absl::StripAsciiWhitespace(s.substr(eq + 1)));
  }
  return true;
}

template <typename T>
bool ParseNumber(const std::map<std::string, std::string>& values, const char* name, T* out,
                 std::string* error) {
  auto it = values.find(name);
  if (it == values.end()) return true;
  if (!absl::SimpleAtoi(it->second, out)) {
    *error = absl::StrCat("--", name, ": not an integer: '", it->second, "'");
    return false;
  }
  return true;
}

bool ParseSeconds(const std::map<std::string, std::string>& values, const char* name,
                  absl::Duration* out, std::string* error) {
  auto it = values.find(name);
  if (it == values.end()) return true;
  double s = 0;
  if (!absl::SimpleAtod(it->second, &s) || s < 0) {
    *error = absl::StrCat("--", name, ": not a non-negative number: '", it->second, "'");
    return false;
  }
  *out = absl::Seconds(s);
  return true;
}

int Main(int argc, char** argv) {
  std::map<std::string, std::string> values, from_args;
  std::string error;
  MainFlags flags;
  flags.program = "spattn-worker";
  flags.usage = Usage;
  flags.read = [&](CommandLine& line) {
    for (const Flag& f : kFlags) {
      if (line.Has(f.name)) from_args[f.name] = line.Get(f.name);
    }
    return line.CheckAllUsed();
  };
  const int rc = HandleMainFlags(argc, argv, flags);
  if (rc >= 0) return rc;
  if (from_args.count("config") != 0 && !ReadConfigFile(from_args["config"], &values, &error)) {
    std::cerr << "spattn-worker: " << error << "\n";
    return 2;
  }
  for (const auto& kv : from_args) values[kv.first] = kv.second;

  WorkerOptions o;
  o.listen_address = "0.0.0.0:50051";
  o.metrics_address = "0.0.0.0:9464";
  if (values.count("listen")) o.listen_address = values["listen"];
  if (values.count("metrics")) o.metrics_address = values["metrics"];
  if (values.count("index")) o.index_address = values["index"];
  if (values.count("devices")) o.devices = values["devices"];
  if (!ParseNumber(values, "max_message_bytes", &o.max_message_bytes, &error) ||
      !ParseNumber(values, "max_inline_bytes", &o.max_inline_bytes, &error) ||
      !ParseNumber(values, "queue_capacity", &o.queue_capacity, &error) ||
      !ParseNumber(values, "executor_threads", &o.executor_threads, &error) ||
      !ParseNumber(values, "cpu_threads", &o.cpu_threads, &error) ||
      !ParseNumber(values, "dense_below_tokens", &o.dense_below_tokens, &error) ||
      !ParseNumber(values, "recall_sample_rows", &o.recall_sample_rows, &error) ||
      !ParseNumber(values, "block_m", &o.block_m, &error) ||
      !ParseNumber(values, "sampled_lines_block_m", &o.sampled_lines_block_m, &error) ||
      !ParseNumber(values, "recall_probe_rows", &o.recall_probe_rows, &error) ||
      !ParseNumber(values, "gpu_workspace_bytes", &o.gpu_workspace_bytes, &error) ||
      !ParseNumber(values, "gpu_staging_bytes", &o.gpu_staging_bytes, &error) ||
      !ParseNumber(values, "saap_assets_bytes", &o.saap_assets_bytes, &error) ||
      !ParseSeconds(values, "index_rpc_timeout_s", &o.index_rpc_timeout, &error) ||
      !ParseSeconds(values, "drain_grace_s", &o.drain_grace, &error) ||
      !ParseSeconds(values, "drain_timeout_s", &o.drain_timeout, &error)) {
    std::cerr << "spattn-worker: " << error << "\n";
    return 2;
  }
  for (auto [name, field] : {std::pair{"recall_target", &o.recall_target},
                             std::pair{"recall_length_exponent", &o.recall_length_exponent}}) {
    if (values.count(name) && !absl::SimpleAtod(values[name], field)) {
      std::cerr << "spattn-worker: --" << name << ": not a number: '" << values[name] << "'\n";
      return 2;
    }
  }
  if (values.count("recall_adaptive")) {
    RecallGuardOptions guard;
    if (absl::Status st = SetAdaptiveTries(values["recall_adaptive"], &guard); !st.ok()) {
      std::cerr << "spattn-worker: --recall_adaptive: " << st.message() << "\n";
      return 2;
    }
    o.recall_adaptive = guard.adaptive;
    o.recall_adaptive_also = guard.adaptive_also;
    o.recall_adaptive_auto = guard.adaptive_auto;
  }
  for (const char* name : {"allow_tcp_shm", "tls_require_client_cert"}) {
    if (values.count(name) && values[name] != "true" && values[name] != "false") {
      std::cerr << "spattn-worker: --" << name << ": expected true or false\n";
      return 2;
    }
  }
  o.allow_tcp_shm = values["allow_tcp_shm"] == "true";
  if (values.count("shm_prefix")) o.shm_prefix = values["shm_prefix"];
  if (values.count("unix_socket_mode")) {
    const std::string& m = values["unix_socket_mode"];
    char* end = nullptr;
    const long mode = std::strtol(m.c_str(), &end, 8);
    if (m.empty() || *end != '\0' || mode < 0 || mode > 0777) {
      std::cerr << "spattn-worker: --unix_socket_mode: expected an octal mode such as 0660\n";
      return 2;
    }
    o.unix_socket_mode = static_cast<mode_t>(mode);
  }
  o.tls.cert_file = values["tls_cert"];
  o.tls.key_file = values["tls_key"];
  o.tls.ca_file = values["tls_ca"];
  o.tls.require_client_cert = values["tls_require_client_cert"] == "true";
  if (!values["auth_tokens_file"].empty()) {
    auto auth = LoadAuthFile(values["auth_tokens_file"]);
    if (!auth.ok()) {
      std::cerr << "spattn-worker: --auth_tokens_file: " << auth.status().message() << "\n";
      return 2;
    }
    o.auth = *std::move(auth);
  }
  o.index_security.ca_file = values["index_tls_ca"];
  o.index_security.cert_file = values["index_tls_cert"];
  o.index_security.key_file = values["index_tls_key"];
  o.index_security.server_name_override = values["index_tls_server_name"];
  {
    auto token = ReadTokenFile(values["index_token_file"]);
    if (!token.ok()) {
      std::cerr << "spattn-worker: --index_token_file: " << token.status().message() << "\n";
      return 2;
    }
    o.index_security.bearer_token = *token;
  }
  if (values.count("pin_shared_memory")) {
    const std::string& v = values["pin_shared_memory"];
    if (v != "true" && v != "false") {
      std::cerr << "spattn-worker: --pin_shared_memory: expected true or false\n";
      return 2;
    }
    o.pin_shared_memory = v == "true";
  }
  if (values.count("default_method")) {
    auto m = ParseMethod(values["default_method"]);
    if (!m.ok()) {
      std::cerr << "spattn-worker: --default_method: " << m.status().message() << "\n";
      return 2;
    }
    o.default_method.method = *m;
  }
  if (values.count("log_level")) {
    LogLevel level;
    if (!ParseLogLevel(values["log_level"], &level)) {
      std::cerr << "spattn-worker: --log_level: expected debug, info, warning or error\n";
      return 2;
    }
    SetLogLevel(level);
  }

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = WorkerServer::Start(o);
  if (!server.ok()) {
    std::cerr << "spattn-worker: " << server.status() << "\n";
    return 1;
  }
  // Machine-readable line for scripts that start the worker on port 0.
  std::printf("spattn-worker listening on %s metrics_port %d device %s\n",
              (*server)->address().c_str(), (*server)->metrics_port(), (*server)->device().c_str());
  std::fflush(stdout);
  WorkerServer* s = server->get();
  std::thread signals([s, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    Log(LogLevel::kInfo, "signal", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    s->Shutdown();
  });
  s->Wait();
  signals.join();
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) { return spattn::Main(argc, argv); }
