// spattn-worker: the stateless attention worker. Flags (or `--config=FILE` with one
// `name = value` per line, '#' comments; flags on the command line win) are listed by --help.
// SIGTERM/SIGINT drain gracefully: health NOT_SERVING, in-flight calls finish, then exit 0.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/method_config.h"
#include "server/log.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

struct Flag {
  const char* name;
  const char* help;
};

constexpr Flag kFlags[] = {
    {"listen", "gRPC listen address host:port (default 0.0.0.0:50051)"},
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
    {"pin_shared_memory", "page-lock shm regions while a GPU serves: true | false (default true)"},
    {"default_method", "method without model or override (default dense)"},
    {"recall_sample_rows", "query rows sampled per head for estimate_recall (default 64)"},
    {"block_m", "query rows per index block (default 64)"},
    {"recall_probe_rows",
     "recall guard rows per head: 0 off, -1 auto = 32 on CPU, off on CUDA (default -1)"},
    {"recall_target", "recall guard target; <= 0 estimates without widening (default 0.95)"},
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
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    }
    if (arg.rfind("--", 0) != 0 || arg.find('=') == std::string::npos) {
      std::cerr << "spattn-worker: expected --name=value, got '" << arg << "'\n";
      Usage();
      return 2;
    }
    const std::string name = arg.substr(2, arg.find('=') - 2);
    if (!Known(name)) {
      std::cerr << "spattn-worker: unknown flag --" << name << "\n";
      Usage();
      return 2;
    }
    from_args[name] = arg.substr(arg.find('=') + 1);
  }
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
      !ParseNumber(values, "recall_probe_rows", &o.recall_probe_rows, &error) ||
      !ParseNumber(values, "gpu_workspace_bytes", &o.gpu_workspace_bytes, &error) ||
      !ParseNumber(values, "gpu_staging_bytes", &o.gpu_staging_bytes, &error) ||
      !ParseSeconds(values, "index_rpc_timeout_s", &o.index_rpc_timeout, &error) ||
      !ParseSeconds(values, "drain_grace_s", &o.drain_grace, &error) ||
      !ParseSeconds(values, "drain_timeout_s", &o.drain_timeout, &error)) {
    std::cerr << "spattn-worker: " << error << "\n";
    return 2;
  }
  if (values.count("recall_target") &&
      !absl::SimpleAtod(values["recall_target"], &o.recall_target)) {
    std::cerr << "spattn-worker: --recall_target: not a number: '" << values["recall_target"]
              << "'\n";
    return 2;
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
