// spattn-load-bench: load and fault scenarios against the real binaries (a bench, not a timed
// test; figures in tests/load/README.md):
//   shed     the worker at 2x its measured capacity (open loop): RESOURCE_EXHAUSTED sheds the
//            excess, RSS stays bounded, and it serves normally right after;
//   retry    a client with retries (gRPC retry policy, UNAVAILABLE only, exponential back-off)
//            rides over a worker restart on the same port; one without retries fails;
//   drain    SIGTERM under load: calls in flight finish OK, later ones get UNAVAILABLE, exit 0;
//   index    the index service SIGKILLed and restarted under a running worker: the worker keeps
//            serving the cached model, then resumes its watch; versions published right after
//            the restart all reach it (none skipped, from its config_refreshed log lines).
//
//   bazel build -c opt //tests/load:spattn-load-bench //server:spattn-worker //index:spattn-index
//   bazel-bin/tests/load/spattn-load-bench --worker=bazel-bin/server/spattn-worker
//       --index=bazel-bin/index/spattn-index    (one command line)
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/attention_client.h"
#include "client/flags.h"
#include "index/test_util.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

using Clock = std::chrono::steady_clock;

// The command line (client/flags.h; --help lists it).
struct BenchFlags {
  std::string worker = "bazel-bin/server/spattn-worker";  // spattn-worker binary
  std::string index = "bazel-bin/index/spattn-index";     // spattn-index binary
  std::string scenarios = "shed,retry,drain,index";       // comma-separated scenarios
  int seq_len = 2048;            // tokens per request (one sequence, dense, 4/2 heads, d 64, bf16)
  double overload_seconds = 10;  // shed: seconds at 2x capacity
  int queue_capacity = 8;        // shed: the worker's --queue_capacity
  std::string work_dir = "/tmp/spattn-load-bench";  // scratch directory
};
BenchFlags flags;

constexpr char kUsage[] =
    "usage: spattn-load-bench [--name=value ...]\n"
    "  --worker: spattn-worker binary (default bazel-bin/server/spattn-worker)\n"
    "  --index: spattn-index binary (default bazel-bin/index/spattn-index)\n"
    "  --scenarios: comma-separated of shed, retry, drain, index (default all)\n"
    "  --seq_len: tokens per request (default 2048)\n"
    "  --overload_seconds: shed: seconds at 2x capacity (default 10)\n"
    "  --queue_capacity: shed: the worker's --queue_capacity (default 8)\n"
    "  --work_dir: scratch directory (default /tmp/spattn-load-bench)\n";

absl::Status ReadFlags(CommandLine& line) {
  for (auto [name, out] : {std::pair<const char*, std::string*>{"worker", &flags.worker},
                           {"index", &flags.index},
                           {"scenarios", &flags.scenarios},
                           {"work_dir", &flags.work_dir}}) {
    absl::Status s = line.Read(name, out);
    if (!s.ok()) return s;
  }
  for (auto [name, out] : {std::pair<const char*, int*>{"seq_len", &flags.seq_len},
                           {"queue_capacity", &flags.queue_capacity}}) {
    absl::Status s = line.Read(name, out);
    if (!s.ok()) return s;
    if (*out <= 0) return absl::InvalidArgumentError(absl::StrCat("--", name, ": must be > 0"));
  }
  absl::Status s = line.Read("overload_seconds", &flags.overload_seconds);
  if (!s.ok()) return s;
  if (!(flags.overload_seconds > 0)) {
    return absl::InvalidArgumentError("--overload_seconds: must be > 0");
  }
  return line.CheckAllUsed();
}

struct Process {
  pid_t pid = -1;
  std::string first_line;  // First stdout line (the worker's "listening on ...").
};

// Starts argv with stderr to `err_file`; reads its first stdout line when `read_line`.
Process Spawn(const std::vector<std::string>& argv, const std::string& err_file, bool read_line) {
  int out[2];
  if (pipe(out) != 0) return {};
  Process p;
  p.pid = fork();
  if (p.pid == 0) {
    dup2(out[1], 1);
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(err, 2);
    close(out[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  if (read_line) {
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') p.first_line += c;
  }
  // Keep draining stdout in the background so the child never blocks on it.
  std::thread([fd = out[0]] {
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
  }).detach();
  return p;
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int64_t RssKiB(pid_t pid, const char* field = "VmRSS:") {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + strlen(field));
  }
  return 0;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

Process StartWorker(const std::vector<std::string>& extra, const std::string& err) {
  std::vector<std::string> argv = {flags.worker, "--metrics=", "--devices=cpu", "--cpu_threads=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process p = Spawn(argv, err, true);
  return p;
}

std::string AddressOf(const Process& worker) {
  // "spattn-worker listening on ADDRESS metrics_port N device D"
  std::vector<std::string> f = absl::StrSplit(worker.first_line, ' ');
  return f.size() > 3 ? f[3] : "";
}

v1::AttentionRequest MakeRequest(const std::string& model = "") {
  const int n = flags.seq_len;
  v1::AttentionRequest r;
  r.set_model_id(model);
  r.set_num_q_heads(4);
  r.set_num_kv_heads(2);
  r.set_head_dim(64);
  r.set_causal(true);
  r.add_cu_seqlens_q(0);
  r.add_cu_seqlens_q(n);
  std::string q(static_cast<size_t>(n) * 4 * 64 * 2, '\0'),
      kv(static_cast<size_t>(n) * 2 * 64 * 2, '\0');
  for (size_t i = 0; i < q.size(); i += 2) q[i + 1] = static_cast<char>(0x3c + (i / 2) % 3);
  for (size_t i = 0; i < kv.size(); i += 2) kv[i + 1] = static_cast<char>(0x3c + (i / 2) % 5);
  *r.mutable_q() = InlineTensor(DType::kBF16, {n, 4, 64}, q.data(), q.size());
  *r.mutable_k() = InlineTensor(DType::kBF16, {n, 2, 64}, kv.data(), kv.size());
  *r.mutable_v() = InlineTensor(DType::kBF16, {n, 2, 64}, kv.data(), kv.size());
  if (model.empty()) r.mutable_method_override()->set_method(v1::METHOD_DENSE);
  return r;
}

std::unique_ptr<AttentionClient> Connect(const std::string& address, int attempts = 1) {
  ClientOptions o;
  o.address = address;
  o.max_attempts = attempts;
  o.timeout = absl::Seconds(30);
  auto c = AttentionClient::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect %s: %s\n", address.c_str(), c.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*c);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// ---- shed: 2x capacity, open loop.
void Shed(const std::string& dir) {
  const int queue = flags.queue_capacity;
  Process w = StartWorker(
      {"--listen=127.0.0.1:0", absl::StrCat("--queue_capacity=", queue), "--executor_threads=1"},
      dir + "/shed.err");
  auto client = Connect(AddressOf(w));
  const v1::AttentionRequest req = MakeRequest();
  for (int i = 0; i < 3; ++i) client->ComputeAttention(req).IgnoreError();  // Warm up.
  const int64_t rss_base = RssKiB(w.pid);
  // Capacity: sequential requests for ~3 s.
  std::vector<double> base_ms;
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::seconds(3)) {
    const auto s = Clock::now();
    if (!client->ComputeAttention(req).ok()) std::fprintf(stderr, "baseline request failed\n");
    base_ms.push_back(Ms(Clock::now() - s));
  }
  const double capacity = base_ms.size() / (Ms(Clock::now() - t0) / 1000);
  const double rate = 2 * capacity;
  std::atomic<int64_t> ok{0}, shed{0}, failed{0}, inflight{0};
  std::atomic<int64_t> peak_rss{rss_base};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      peak_rss = std::max<int64_t>(peak_rss.load(), RssKiB(w.pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Call {
    grpc::ClientContext ctx;
    v1::AttentionResponse resp;
  };
  const double seconds = flags.overload_seconds;
  const int64_t total = static_cast<int64_t>(rate * seconds);
  const auto start = Clock::now();
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(i / rate)));
    auto* call = new Call;
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ++inflight;
    client->stub()->async()->ComputeAttention(
        &call->ctx, &req, &call->resp, [&, call](grpc::Status s) {
          if (s.ok()) {
            ++ok;
          } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            ++shed;
          } else {
            ++failed;
          }
          delete call;
          --inflight;
        });
  }
  while (inflight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double overload_s = Ms(Clock::now() - start) / 1000;
  // Recovery: sequential requests right after.
  std::vector<double> after_ms;
  int after_failed = 0;
  for (int i = 0; i < 20; ++i) {
    const auto s = Clock::now();
    if (!client->ComputeAttention(req).ok()) ++after_failed;
    after_ms.push_back(Ms(Clock::now() - s));
  }
  sampling = false;
  sampler.join();
  const int64_t hwm = RssKiB(w.pid, "VmHWM:");
  kill(w.pid, SIGTERM);
  const int rc = Wait(w.pid);
  std::printf(
      "shed: capacity %.1f req/s (p50 %.1f ms, %d tokens); offered %.1f req/s for %.1f s: "
      "%lld requests, %lld ok (%.1f req/s), %lld shed RESOURCE_EXHAUSTED, %lld failed otherwise; "
      "RSS %lld KiB before, peak %lld KiB (VmHWM %lld KiB); after: %d/20 failed, p50 %.1f ms; "
      "exit %d\n",
      capacity, Percentile(base_ms, 0.5), flags.seq_len, rate, seconds,
      static_cast<long long>(total), static_cast<long long>(ok.load()), ok.load() / overload_s,
      static_cast<long long>(shed.load()), static_cast<long long>(failed.load()),
      static_cast<long long>(rss_base), static_cast<long long>(peak_rss.load()),
      static_cast<long long>(hwm), after_failed, Percentile(after_ms, 0.5), rc);
}

// ---- retry: a worker restart on the same port.
void Retry(const std::string& dir) {
  const int port = FreePort();
  const std::string listen = absl::StrCat("--listen=127.0.0.1:", port);
  Process w = StartWorker({listen}, dir + "/retry.err");
  const std::string address = AddressOf(w);
  auto with_retries = Connect(address, 8);
  auto without = Connect(address, 1);
  const v1::AttentionRequest req = MakeRequest();
  if (!with_retries->ComputeAttention(req).ok()) std::fprintf(stderr, "retry: first call failed\n");
  kill(w.pid, SIGKILL);
  Wait(w.pid);
  const absl::Status no_retry = without->ComputeAttention(req).status();
  // Restart the worker 400 ms after the next call starts.
  Process w2;
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    w2 = StartWorker({listen}, dir + "/retry.err");
  });
  const auto s = Clock::now();
  const absl::Status retried = with_retries->ComputeAttention(req).status();
  const double ms = Ms(Clock::now() - s);
  restart.join();
  kill(w2.pid, SIGTERM);
  Wait(w2.pid);
  std::printf(
      "retry: worker SIGKILLed, restarted on the same port 400 ms later: without retries %s; "
      "with retries (8 attempts, back-off 100 ms doubling to 2 s) %s after %.0f ms\n",
      absl::StatusCodeToString(no_retry.code()).c_str(),
      absl::StatusCodeToString(retried.code()).c_str(), ms);
}

// ---- drain: SIGTERM under load.
void Drain(const std::string& dir) {
  Process w = StartWorker({"--listen=127.0.0.1:0", "--queue_capacity=64", "--drain_timeout_s=60"},
                          dir + "/drain.err");
  const std::string address = AddressOf(w);
  std::atomic<bool> term_sent{false};
  std::mutex mu;
  std::map<std::string, int> before, after;  // Status code -> count (call started before/after).
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      auto client = Connect(address, 1);
      const v1::AttentionRequest req = MakeRequest();
      for (;;) {
        const bool started_after = term_sent.load();
        const absl::Status s = client->ComputeAttention(req).status();
        {
          std::lock_guard<std::mutex> lock(mu);
          ++(started_after ? after : before)[absl::StatusCodeToString(s.code())];
        }
        if (started_after && !s.ok()) return;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto t = Clock::now();
  term_sent = true;
  kill(w.pid, SIGTERM);
  const int rc = Wait(w.pid);
  const double drain_ms = Ms(Clock::now() - t);
  for (std::thread& th : clients) th.join();
  auto show = [](const std::map<std::string, int>& m) {
    std::string s;
    for (const auto& [code, n] : m) absl::StrAppend(&s, s.empty() ? "" : ", ", n, " ", code);
    return s;
  };
  std::printf(
      "drain: 8 closed-loop clients, SIGTERM after 2 s: calls started before it: %s; after it: "
      "%s; the worker exited %d after %.0f ms\n",
      show(before).c_str(), show(after).c_str(), rc, drain_ms);
}

// ---- index: killed and restarted under a running worker.
class Index {
 public:
  explicit Index(const std::string& address)
      : stub_(v1::IndexService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (v1::IndexService::Stub::*m)(grpc::ClientContext*, const Req&,
                                                              Resp*),
                    const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);
    return (stub_.get()->*m)(&ctx, req, resp);
  }
  // Creates, seals and publishes the next version; returns it (0 on failure).
  uint64_t PublishNext(const std::string& model, uint64_t current) {
    v1::CreateVersionRequest c;
    c.set_model_id(model);
    c.set_base_version(current);
    v1::VersionInfo v;
    if (!Call(&v1::IndexService::Stub::CreateVersion, c, &v).ok()) return 0;
    v1::SealVersionRequest s;
    s.set_model_id(model);
    s.set_version(v.version());
    v1::VersionInfo sealed;
    if (!Call(&v1::IndexService::Stub::SealVersion, s, &sealed).ok()) return 0;
    v1::PublishVersionRequest p;
    p.set_model_id(model);
    p.set_version(v.version());
    p.set_expected_current_version(current);
    v1::PublishVersionResponse r;
    if (!Call(&v1::IndexService::Stub::PublishVersion, p, &r).ok()) return 0;
    return v.version();
  }

 private:
  std::unique_ptr<v1::IndexService::Stub> stub_;
};

void IndexOutage(const std::string& dir) {
  const int port = FreePort();
  const std::string index_address = absl::StrCat("127.0.0.1:", port);
  const std::vector<std::string> index_argv = {flags.index,
                                               absl::StrCat("--data_dir=", dir, "/index-db"),
                                               absl::StrCat("--listen=", index_address)};
  Process index = Spawn(index_argv, dir + "/index.err", false);
  Index ix(index_address);
  v1::PutModelRequest pm;
  *pm.mutable_model() = testing_util::MakeModel("bench-m", 2, 4, 2, 64);
  v1::PutModelResponse pmr;
  if (!ix.Call(&v1::IndexService::Stub::PutModel, pm, &pmr).ok()) {
    std::fprintf(stderr, "index: PutModel failed\n");
    return;
  }
  std::set<uint64_t> published;
  uint64_t current = ix.PublishNext("bench-m", 0);
  published.insert(current);
  const std::string worker_err = dir + "/index-worker.err";
  std::remove(worker_err.c_str());
  Process w =
      StartWorker({"--listen=127.0.0.1:0", absl::StrCat("--index=", index_address)}, worker_err);
  const std::string address = AddressOf(w);
  std::atomic<bool> stop{false}, outage{false};
  std::atomic<int64_t> ok{0}, failed{0}, during_ok{0}, during_failed{0};
  std::atomic<uint64_t> last_version{0};
  std::thread load([&] {
    auto client = Connect(address, 1);
    v1::AttentionRequest req = MakeRequest("bench-m");
    req.set_layer(1);
    while (!stop.load()) {
      auto r = client->ComputeAttention(req);
      const bool down = outage.load();
      if (r.ok()) {
        ++ok;
        if (down) ++during_ok;
        last_version = r->config_version_used();
      } else {
        ++failed;
        if (down) ++during_failed;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  outage = true;
  kill(index.pid, SIGKILL);
  Wait(index.pid);
  std::this_thread::sleep_for(std::chrono::seconds(4));  // The worker serves from its cache.
  index = Spawn(index_argv, dir + "/index.err", false);
  const auto restarted = Clock::now();
  // Published right after the restart, while the worker is still backing off its reconnect.
  for (int i = 0; i < 5; ++i) {
    const uint64_t v = ix.PublishNext("bench-m", current);
    if (v != 0) {
      current = v;
      published.insert(v);
    }
  }
  const double publish_ms = Ms(Clock::now() - restarted);
  outage = false;
  const auto wait_start = Clock::now();
  while (last_version.load() != current && Clock::now() - wait_start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double caught_up_ms = Ms(Clock::now() - restarted);
  stop = true;
  load.join();
  kill(w.pid, SIGTERM);
  Wait(w.pid);
  kill(index.pid, SIGTERM);
  Wait(index.pid);
  // Versions the worker applied (its log), besides the first it fetched.
  std::set<uint64_t> seen = {*published.begin()};
  std::ifstream in(worker_err);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("event=config_refreshed") == std::string::npos) continue;
    const size_t p = line.find(" version=");
    if (p != std::string::npos) seen.insert(std::strtoull(line.c_str() + p + 9, nullptr, 10));
  }
  int lost = 0;
  for (uint64_t v : published) lost += seen.count(v) == 0;
  std::printf(
      "index: SIGKILL under a running worker, 4 s down: %lld requests ok / %lld failed during the "
      "outage (cached model); restarted, 5 versions published within %.0f ms; the worker served "
      "version %llu after %.0f ms; versions published %zu, applied by the worker %zu, lost %d; "
      "requests in all: %lld ok, %lld failed\n",
      static_cast<long long>(during_ok.load()), static_cast<long long>(during_failed.load()),
      publish_ms, static_cast<unsigned long long>(last_version.load()), caught_up_ms,
      published.size(), seen.size(), lost, static_cast<long long>(ok.load()),
      static_cast<long long>(failed.load()));
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) {
  spattn::MainFlags flags;
  flags.program = "spattn-load-bench";
  flags.usage = [] { std::fputs(spattn::kUsage, stderr); };
  flags.read = [](spattn::CommandLine& line) { return spattn::ReadFlags(line); };
  const int rc = spattn::HandleMainFlags(argc, argv, flags);
  if (rc >= 0) return rc;
  signal(SIGPIPE, SIG_IGN);
  const std::string dir = spattn::flags.work_dir;
  std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str());
  for (absl::string_view s : absl::StrSplit(spattn::flags.scenarios, ',')) {
    if (s == "shed") spattn::Shed(dir);
    if (s == "retry") spattn::Retry(dir);
    if (s == "drain") spattn::Drain(dir);
    if (s == "index") spattn::IndexOutage(dir);
    std::fflush(stdout);
  }
  return 0;
}
