#include "tests/bench/server_bench_lib.h"

#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/attention_client.h"
#include "client/flags.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/dtype.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"
#include "server/cuda_ipc.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The problem's byte layout, shared by every transport: one buffer [Q | K | V | O].
struct Layout {
  int seq_len = 0, hq = 0, hk = 0, d = 0;
  DType dtype = DType::kBF16;
  int64_t q_bytes() const { return int64_t{seq_len} * hq * d * DTypeSize(dtype); }
  int64_t k_bytes() const { return int64_t{seq_len} * hk * d * DTypeSize(dtype); }
  int64_t q_off() const { return 0; }
  int64_t k_off() const { return q_bytes(); }
  int64_t v_off() const { return q_bytes() + k_bytes(); }
  int64_t o_off() const { return q_bytes() + 2 * k_bytes(); }
  int64_t in_bytes() const { return q_bytes() + 2 * k_bytes(); }
  int64_t total() const { return 2 * q_bytes() + 2 * k_bytes(); }
};

// Deterministic values in [-2, 2) for Q/K/V (the same in the producer process).
void FillInputs(const Layout& l, uint64_t seed, uint8_t* base) {
  const int64_t n = l.in_bytes() / DTypeSize(l.dtype);
  constexpr int64_t kChunk = 1 << 20;
  ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t c) {
    uint64_t x =
        seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c) * 0xBF58476D1CE4E5B9ull + 1;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float v = static_cast<float>(x >> 40) * (4.0f / 16777216.0f) - 2.0f;
      uint16_t h = l.dtype == DType::kBF16 ? FloatToBf16(v) : FloatToFp16(v);
      std::memcpy(base + i * 2, &h, 2);
    }
  });
}

std::string Hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Nearest-rank percentile of `v` (sorted here).
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// ---- The CUDA IPC producer: a second process that owns the tensors in GPU memory, as an LLM
// server would. Prints "handle <hex> bytes <n>", then waits for "exit" on stdin.
int RunProducer(const ServerBenchFlags& f, const Layout& l, std::ostream& out, std::ostream& err) {
  auto buf = CudaDeviceBuffer::Allocate(0, l.total());
  if (!buf.ok()) {
    err << "producer: " << buf.status() << "\n";
    return 1;
  }
  {
    std::unique_ptr<uint8_t[]> host(new uint8_t[static_cast<size_t>(l.in_bytes())]);
    FillInputs(l, f.seed, host.get());
    absl::Status s = (*buf)->CopyFromHost(host.get(), l.in_bytes(), 0);
    if (!s.ok()) {
      err << "producer: " << s << "\n";
      return 1;
    }
  }
  auto handle = CudaIpcExport((*buf)->data());
  if (!handle.ok()) {
    err << "producer: " << handle.status() << "\n";
    return 1;
  }
  out << "handle " << Hex(*handle) << " bytes " << l.total() << std::endl;
  std::string line;
  while (std::getline(std::cin, line) && line != "exit") {
  }
  return 0;
}

// The producer as a child process (this binary again, --ipc_producer).
class ProducerProcess {
 public:
  ~ProducerProcess() { Stop(); }
  absl::Status Start(const std::vector<std::string>& args) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return absl::InternalError("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::vector<char*> argv;
      static char self[] = "/proc/self/exe";
      argv.push_back(self);
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    return pid_ > 0 ? absl::OkStatus() : absl::InternalError("fork");
  }
  std::string ReadLine() {
    char buf[512];
    if (out_ == nullptr || fgets(buf, sizeof(buf), out_) == nullptr) return "";
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Stop() {
    if (pid_ <= 0) return;
    fprintf(in_, "exit\n");
    fclose(in_);
    fclose(out_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

// Median wall time of a synchronous cudaMemcpy of `bytes` from or to host memory, pageable and
// then page-locked (ms); -1 where it could not be measured.
struct CopyTimes {
  double h2d_pageable = -1, h2d_pinned = -1, d2h_pageable = -1, d2h_pinned = -1;
};

CopyTimes MeasureCopies(int64_t in_bytes, int64_t out_bytes, int reps) {
  CopyTimes t;
  const int64_t n = std::max(in_bytes, out_bytes);
  auto dev = CudaDeviceBuffer::Allocate(0, n);
  if (!dev.ok()) return t;
  std::unique_ptr<uint8_t[]> host(new uint8_t[static_cast<size_t>(n)]);
  std::memset(host.get(), 1, static_cast<size_t>(n));  // Touch every page first.
  auto time = [&](bool to_device, int64_t bytes) {
    std::vector<double> ms;
    for (int r = 0; r < reps + 1; ++r) {
      const auto start = Clock::now();
      const absl::Status s = to_device ? (*dev)->CopyFromHost(host.get(), bytes)
                                       : (*dev)->CopyToHost(host.get(), bytes);
      if (!s.ok()) return -1.0;
      if (r > 0) ms.push_back(MsSince(start));  // The first one warms up.
    }
    return Percentile(ms, 0.5);
  };
  t.h2d_pageable = time(true, in_bytes);
  t.d2h_pageable = time(false, out_bytes);
  if (CudaHostRegister(host.get(), static_cast<size_t>(n), false).ok()) {
    t.h2d_pinned = time(true, in_bytes);
    t.d2h_pinned = time(false, out_bytes);
    CudaHostUnregister(host.get());
  }
  return t;
}

// Free bytes of the tmpfs behind POSIX shared memory (containers often give it 64 MiB).
int64_t ShmFreeBytes() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

v1::AttentionRequest BaseRequest(const Layout& l, const MethodConfig& method) {
  v1::AttentionRequest r;
  r.set_request_id("bench");
  r.set_num_q_heads(l.hq);
  r.set_num_kv_heads(l.hk);
  r.set_head_dim(l.d);
  r.set_softmax_scale(1.0f / std::sqrt(static_cast<float>(l.d)));
  r.set_causal(true);
  r.add_cu_seqlens_q(0);
  r.add_cu_seqlens_q(l.seq_len);
  r.add_cu_seqlens_k(0);
  r.add_cu_seqlens_k(l.seq_len);
  r.mutable_method_override()->set_method(ToProtoMethod(method.method));
  return r;
}

struct Shapes {
  std::vector<int64_t> q, kv;
};

Shapes ShapesOf(const Layout& l) { return {{l.seq_len, l.hq, l.d}, {l.seq_len, l.hk, l.d}}; }

struct Timed {
  std::vector<double> call_ms, kernel_ms, worker_ms, transfer_ms, index_ms;
  std::vector<double> resolve_ms, output_ms, unaccounted_ms;  // Worker stages.
  std::string first_output;  // Inline output of the first timed call (inline transport).
};

absl::StatusOr<Timed> TimeCalls(AttentionClient& client, const v1::AttentionRequest& req,
                                int warmup, int repeat, bool keep_output) {
  Timed t;
  for (int i = 0; i < warmup + repeat; ++i) {
    const auto start = Clock::now();
    auto resp = client.ComputeAttention(req);
    const double ms = MsSince(start);
    if (!resp.ok()) return resp.status();
    if (i < warmup) continue;
    t.call_ms.push_back(ms);
    t.kernel_ms.push_back(resp->timings().kernel_seconds() * 1e3);
    t.worker_ms.push_back(resp->timings().total_seconds() * 1e3);
    t.transfer_ms.push_back(resp->timings().transfer_seconds() * 1e3);
    t.index_ms.push_back(resp->timings().index_build_seconds() * 1e3);
    const v1::StageTimings& st = resp->timings();
    t.resolve_ms.push_back(st.resolve_seconds() * 1e3);
    t.output_ms.push_back(st.output_seconds() * 1e3);
    // Wall time of the kernel stage beyond the device's own kernel time (launch, sync, index
    // upload): the total minus the stages.
    t.unaccounted_ms.push_back((st.total_seconds() - st.resolve_seconds() - st.config_seconds() -
                                st.index_build_seconds() - st.kernel_seconds() -
                                st.output_seconds()) *
                               1e3);
    if (keep_output && t.first_output.empty()) t.first_output = resp->output().inline_data().data();
  }
  return t;
}

std::string Num(double v) { return v < 0 ? "null" : absl::StrFormat("%.4f", v); }

// The same problem straight through CudaAttentionEngine in this process (device buffers, no
// worker, no gRPC): wall time of the call and the kernel time its CUDA events give.
struct EngineTimes {
  double wall_ms = -1, kernel_ms = -1;
};

EngineTimes TimeEngine(CudaAttentionEngine& engine, const Layout& l, const uint8_t* host,
                       const MethodConfig& method, int reps) {
  EngineTimes out;
  auto buf = CudaDeviceBuffer::Allocate(engine.device(), l.total());
  if (!buf.ok() || !(*buf)->CopyFromHost(host, l.in_bytes()).ok()) return out;
  uint8_t* base = static_cast<uint8_t*>((*buf)->data());
  AttentionProblem p;
  p.cu_seqlens_q = {0, l.seq_len};
  p.cu_seqlens_k = {0, l.seq_len};
  p.num_q_heads = l.hq;
  p.num_kv_heads = l.hk;
  p.head_dim = l.d;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(l.d));
  p.dtype = l.dtype;
  p.space = MemorySpace::kCuda;
  SetContiguousStrides(&p);
  p.q.data = base + l.q_off();
  p.k.data = base + l.k_off();
  p.v.data = base + l.v_off();
  p.o = base + l.o_off();
  std::vector<int> heads(l.hq);
  for (int h = 0; h < l.hq; ++h) heads[h] = h;
  std::vector<double> wall, kernel;
  for (int r = 0; r < reps + 1; ++r) {
    CudaStageTimes t;
    const auto start = Clock::now();
    absl::Status s;
    if (method.method == Method::kDense) {
      s = engine.RunDense(p, &t);
    } else {  // plan, run, release: the worker's calls
      GpuBuildOptions o;
      o.block_m = 64;
      absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(engine, p, method, heads, o);
      s = built.status();
      if (s.ok()) s = engine.RunSparseDeviceIndex(p, built->view, &t);
      engine.ReleaseIndexes();
    }
    if (!s.ok()) return out;
    if (r == 0) continue;
    wall.push_back(MsSince(start));
    kernel.push_back((t.schedule_seconds + t.kernel_seconds) * 1e3);
  }
  out.wall_ms = Percentile(wall, 0.5);
  out.kernel_ms = Percentile(kernel, 0.5);
  return out;
}

}  // namespace

std::string ServerBenchUsage() {
  return R"(spattn-server-bench: what the worker adds on top of the kernel, per handle kind.
Starts a worker in this process and calls it through the client with the same problem as inline
bytes, a shared-memory region and (with a GPU) a CUDA IPC region owned by a second process.
One JSON line per (seq_len, method, transport).
  --seq_lens=8192,131072   keys (= queries) of the one sequence
  --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --methods=dense,a_shape  methods (parameters at their defaults)
  --transports=inline,shm,cuda_ipc   default: all the machine supports
  --warmup=2 --repeat=10   untimed and timed calls per line
  --devices=auto           the worker's --devices
  --max_inline_total=536870912   skip inline requests with more bytes (in + out)
  --seed=1
)";
}

absl::StatusOr<ServerBenchFlags> ParseServerBenchFlags(const std::vector<std::string>& args) {
  ServerBenchFlags f;
  CommandLine::Options options;
  options.boolean = {"ipc_producer"};
  options.positional = false;
  std::vector<std::string> words = args;
  for (std::string& w : words) {
    if (w == "-h") w = "--help";
  }
  SPATTN_ASSIGN_OR_RETURN(CommandLine line, CommandLine::Parse(words, options));
  auto bad = [&](const std::string& name) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": bad value '", line.Get(name), "'"));
  };
  // A count flag: an integer >= `min`.
  auto count = [&](const std::string& name, int min, int* out) -> absl::Status {
    SPATTN_RETURN_IF_ERROR(line.Read(name, out));
    return *out >= min ? absl::OkStatus() : bad(name);
  };
  SPATTN_RETURN_IF_ERROR(line.Read("help", &f.help));
  SPATTN_RETURN_IF_ERROR(line.Read("ipc_producer", &f.ipc_producer));
  if (line.Has("seq_lens")) {
    f.seq_lens.clear();
    for (absl::string_view s : absl::StrSplit(line.Get("seq_lens"), ',')) {
      int n = 0;
      if (!absl::SimpleAtoi(s, &n) || n <= 0) return bad("seq_lens");
      f.seq_lens.push_back(n);
    }
  }
  SPATTN_RETURN_IF_ERROR(count("heads", 1, &f.heads));
  SPATTN_RETURN_IF_ERROR(count("kv_heads", 1, &f.kv_heads));
  SPATTN_RETURN_IF_ERROR(count("head_dim", 1, &f.head_dim));
  SPATTN_RETURN_IF_ERROR(count("warmup", 0, &f.warmup));
  SPATTN_RETURN_IF_ERROR(count("repeat", 1, &f.repeat));
  f.dtype = line.Get("dtype", f.dtype);
  if (f.dtype != "bf16" && f.dtype != "fp16") return bad("dtype");
  if (line.Has("methods")) {
    f.methods = absl::StrSplit(line.Get("methods"), ',');
    for (const std::string& m : f.methods) {
      if (!ParseMethod(m).ok()) return bad("methods");
    }
  }
  if (line.Has("transports")) {
    f.transports = absl::StrSplit(line.Get("transports"), ',');
    for (const std::string& t : f.transports) {
      if (t != "inline" && t != "shm" && t != "cuda_ipc") return bad("transports");
    }
  }
  f.devices = line.Get("devices", f.devices);
  SPATTN_RETURN_IF_ERROR(line.Read("max_inline_total", &f.max_inline_total));
  SPATTN_RETURN_IF_ERROR(line.Read("seed", &f.seed));
  SPATTN_RETURN_IF_ERROR(line.CheckAllUsed());
  if (f.heads % f.kv_heads != 0) {
    return absl::InvalidArgumentError("--heads must be a multiple of --kv_heads");
  }
  return f;
}

int RunServerBench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto parsed = ParseServerBenchFlags(args);
  if (!parsed.ok()) {
    err << "spattn-server-bench: " << parsed.status().message() << "\n" << ServerBenchUsage();
    return 2;
  }
  const ServerBenchFlags f = *parsed;
  if (f.help) {
    out << ServerBenchUsage();
    return 0;
  }
  auto layout_of = [&](int seq_len) {
    Layout l;
    l.seq_len = seq_len;
    l.hq = f.heads;
    l.hk = f.kv_heads;
    l.d = f.head_dim;
    l.dtype = f.dtype == "fp16" ? DType::kF16 : DType::kBF16;
    return l;
  };
  if (f.ipc_producer) return RunProducer(f, layout_of(f.seq_lens[0]), out, err);

  std::string why;
  const bool gpu = f.devices != "cpu" && !ListCudaDevices(&why).empty();
  std::vector<std::string> transports = f.transports;
  if (transports.empty()) {
    transports = {"inline", "shm"};
    if (gpu) transports.push_back("cuda_ipc");
  }
  int64_t largest = 0;
  for (int s : f.seq_lens) largest = std::max(largest, layout_of(s).total());

  WorkerOptions wo;
  wo.devices = f.devices;
  wo.max_message_bytes = INT_MAX;
  wo.max_inline_bytes = int64_t{1} << 30;
  // The staging pool holds one request's host tensors (Q, K, V, O) plus alignment.
  wo.gpu_staging_bytes = largest + (int64_t{64} << 20);
  // The bench registers its shared memory over loopback TCP (in-process worker).
  wo.allow_tcp_shm = true;
  auto worker = WorkerServer::Start(wo);
  if (!worker.ok()) {
    err << "spattn-server-bench: worker: " << worker.status() << "\n";
    return 1;
  }
  ClientOptions co;
  co.address = (*worker)->address();
  co.max_message_bytes = INT_MAX;
  co.timeout = absl::Seconds(600);
  auto client = AttentionClient::Connect(co);
  if (!client.ok()) {
    err << "spattn-server-bench: client: " << client.status() << "\n";
    return 1;
  }
  const std::string device = absl::StrJoin((*worker)->device_names(), ",");
  // The gRPC floor: a trivial call (ServerMetadata) through the same client and server.
  std::vector<double> floor_ms;
  for (int i = 0; i < 30; ++i) {
    const auto start = Clock::now();
    if (!(*client)->Metadata().ok()) break;
    if (i >= 5) floor_ms.push_back(MsSince(start));
  }
  const double grpc_floor = Percentile(floor_ms, 0.5);
  std::unique_ptr<CudaAttentionEngine> engine;
  if (gpu) {
    auto e = CudaAttentionEngine::Create(0, int64_t{1} << 30);
    if (e.ok()) engine = std::move(*e);
  }
  if (!gpu && f.devices != "cpu") why = absl::StrCat(" (no GPU: ", why, ")");
  err << "worker on " << device << (gpu ? "" : why) << "\n";

  for (int seq_len : f.seq_lens) {
    const Layout l = layout_of(seq_len);
    const Shapes shapes = ShapesOf(l);
    // The host copy of the problem: a shared-memory region when /dev/shm has room (the shm
    // transport reads it in place), else plain memory (and no shm transport).
    const bool want_shm = std::count(transports.begin(), transports.end(), "shm") > 0;
    const int64_t shm_free = ShmFreeBytes();
    std::unique_ptr<SharedMemoryRegion> shm;
    std::unique_ptr<uint8_t[]> plain;
    std::string shm_skip;
    if (want_shm && shm_free >= l.total() + (int64_t{16} << 20)) {
      const std::string key = absl::StrCat("/spattn-srvbench_", getpid(), "_", seq_len);
      auto r = SharedMemoryRegion::Create(key, static_cast<size_t>(l.total()));
      if (r.ok()) {
        shm = std::move(*r);
      } else {
        shm_skip = std::string(r.status().message());
      }
    } else if (want_shm) {
      shm_skip =
          absl::StrCat("/dev/shm has ", shm_free, " bytes free, the problem needs ", l.total());
    }
    uint8_t* base = shm ? shm->data() : nullptr;
    if (base == nullptr) {
      plain.reset(new uint8_t[static_cast<size_t>(l.total())]);
      base = plain.get();
    }
    const auto gen = Clock::now();
    FillInputs(l, f.seed, base);
    err << "seq_len " << seq_len << ": inputs in " << MsSince(gen) << " ms\n";
    bool shm_pinned = false;
    if (shm) {
      absl::Status s = (*client)->RegisterSystemRegion("bench_shm", *shm);
      if (!s.ok()) {
        shm_skip = std::string(s.message());
        shm.reset();
      } else {
        auto rows = (*client)->ListRegions();
        if (rows.ok()) {
          for (const auto& r : *rows) shm_pinned |= r.name() == "bench_shm" && r.pinned();
        }
      }
    }
    CopyTimes copies;
    if (gpu && shm) copies = MeasureCopies(l.in_bytes(), l.q_bytes(), 3);

    ProducerProcess producer;
    std::string ipc_skip;
    const bool want_ipc = std::count(transports.begin(), transports.end(), "cuda_ipc") > 0;
    if (want_ipc && !gpu) ipc_skip = "no GPU";
    if (want_ipc && gpu) {
      std::vector<std::string> pargs = {"--ipc_producer",
                                        absl::StrCat("--seq_lens=", seq_len),
                                        absl::StrCat("--heads=", f.heads),
                                        absl::StrCat("--kv_heads=", f.kv_heads),
                                        absl::StrCat("--head_dim=", f.head_dim),
                                        absl::StrCat("--dtype=", f.dtype),
                                        absl::StrCat("--seed=", f.seed)};
      absl::Status s = producer.Start(pargs);
      const std::string hello = s.ok() ? producer.ReadLine() : "";
      if (hello.rfind("handle ", 0) != 0) {
        ipc_skip = absl::StrCat("producer failed: '", hello, "' ", s.message());
      } else {
        const std::string handle = Unhex(hello.substr(7, 128));
        s = (*client)->RegisterCudaRegion("bench_ipc", handle, 0, static_cast<uint64_t>(l.total()));
        if (!s.ok()) ipc_skip = absl::StrCat("RegisterCudaRegion: ", s.message());
      }
    }

    for (const std::string& method_name : f.methods) {
      MethodConfig method;
      method.method = *ParseMethod(method_name);
      std::string inline_output;
      EngineTimes direct;
      if (engine != nullptr &&
          (method.method == Method::kDense || method.method == Method::kAShape)) {
        direct = TimeEngine(*engine, l, base, method, 5);
      }
      for (const std::string& transport : transports) {
        std::string line = absl::StrCat(
            "{\"bench\":\"server\",\"device\":\"", device, "\",\"transport\":\"", transport,
            "\",\"handle_kind\":\"",
            transport == "inline" ? "inline"
            : transport == "shm"  ? "system"
                                  : "cuda",
            "\",\"seq_len\":", seq_len, ",\"heads\":", l.hq, ",\"kv_heads\":", l.hk,
            ",\"head_dim\":", l.d, ",\"dtype\":\"", f.dtype, "\",\"method\":\"", method_name, "\"");
        v1::AttentionRequest req = BaseRequest(l, method);
        std::string skip;
        if (transport == "inline") {
          if (l.in_bytes() + l.q_bytes() > f.max_inline_total) {
            skip = absl::StrCat("inline request of ", l.in_bytes() + l.q_bytes(),
                                " bytes > --max_inline_total");
          } else {
            *req.mutable_q() = InlineTensor(l.dtype, shapes.q, base + l.q_off(), l.q_bytes());
            *req.mutable_k() = InlineTensor(l.dtype, shapes.kv, base + l.k_off(), l.k_bytes());
            *req.mutable_v() = InlineTensor(l.dtype, shapes.kv, base + l.v_off(), l.k_bytes());
          }
        } else {
          const bool is_shm = transport == "shm";
          if (is_shm && !shm) skip = shm_skip.empty() ? "no shared memory" : shm_skip;
          if (!is_shm && !ipc_skip.empty()) skip = ipc_skip;
          const std::string region = is_shm ? "bench_shm" : "bench_ipc";
          *req.mutable_q() = RegionTensor(l.dtype, shapes.q, region, l.q_off(), l.q_bytes());
          *req.mutable_k() = RegionTensor(l.dtype, shapes.kv, region, l.k_off(), l.k_bytes());
          *req.mutable_v() = RegionTensor(l.dtype, shapes.kv, region, l.v_off(), l.k_bytes());
          *req.mutable_output() = RegionTensor(l.dtype, shapes.q, region, l.o_off(), l.q_bytes());
        }
        if (!skip.empty()) {
          out << line << ",\"skipped\":\"" << absl::StrReplaceAll(skip, {{"\"", "'"}}) << "\"}"
              << std::endl;
          continue;
        }
        auto timed = TimeCalls(**client, req, f.warmup, f.repeat, transport == "inline");
        if (!timed.ok()) {
          out << line << ",\"error\":\""
              << absl::StrReplaceAll(std::string(timed.status().message()), {{"\"", "'"}}) << "\"}"
              << std::endl;
          continue;
        }
        const Timed& t = *timed;
        std::vector<double> overhead, worker_overhead;
        for (size_t i = 0; i < t.call_ms.size(); ++i) {
          overhead.push_back(t.call_ms[i] - t.kernel_ms[i]);
          worker_overhead.push_back(t.worker_ms[i] - t.kernel_ms[i]);
        }
        const double kernel = Percentile(t.kernel_ms, 0.5);
        const double over = Percentile(overhead, 0.5);
        absl::StrAppend(&line, ",\"calls\":", t.call_ms.size(),
                        ",\"call_p50_ms\":", Num(Percentile(t.call_ms, 0.5)),
                        ",\"call_p99_ms\":", Num(Percentile(t.call_ms, 0.99)),
                        ",\"kernel_p50_ms\":", Num(kernel), ",\"overhead_p50_ms\":", Num(over),
                        ",\"overhead_p99_ms\":", Num(Percentile(overhead, 0.99)),
                        ",\"overhead_pct_of_kernel\":", Num(kernel > 0 ? 100 * over / kernel : -1),
                        ",\"worker_overhead_p50_ms\":", Num(Percentile(worker_overhead, 0.5)),
                        ",\"worker_transfer_p50_ms\":", Num(Percentile(t.transfer_ms, 0.5)),
                        ",\"index_build_p50_ms\":", Num(Percentile(t.index_ms, 0.5)),
                        ",\"resolve_p50_ms\":", Num(Percentile(t.resolve_ms, 0.5)),
                        ",\"output_p50_ms\":", Num(Percentile(t.output_ms, 0.5)),
                        ",\"kernel_stage_extra_p50_ms\":", Num(Percentile(t.unaccounted_ms, 0.5)),
                        ",\"grpc_floor_p50_ms\":", Num(grpc_floor), ",\"bytes_in\":", l.in_bytes(),
                        ",\"bytes_out\":", l.q_bytes());
        if (direct.wall_ms >= 0) {
          absl::StrAppend(&line, ",\"engine_wall_p50_ms\":", Num(direct.wall_ms),
                          ",\"engine_kernel_p50_ms\":", Num(direct.kernel_ms),
                          ",\"call_minus_engine_wall_p50_ms\":",
                          absl::StrFormat("%.4f", Percentile(t.call_ms, 0.5) - direct.wall_ms));
        }
        if (transport == "inline") inline_output = t.first_output;
        if (transport == "shm") {
          absl::StrAppend(&line, ",\"region_pinned\":", shm_pinned ? "true" : "false");
          if (!inline_output.empty()) {
            const bool same =
                inline_output.size() == static_cast<size_t>(l.q_bytes()) &&
                std::memcmp(inline_output.data(), base + l.o_off(), inline_output.size()) == 0;
            absl::StrAppend(&line, ",\"output_matches_inline\":", same ? "true" : "false");
          }
          if (copies.h2d_pageable >= 0) {
            const double pinned = copies.h2d_pinned >= 0 && copies.d2h_pinned >= 0
                                      ? copies.h2d_pinned + copies.d2h_pinned
                                      : -1;
            const double pageable = copies.h2d_pageable + copies.d2h_pageable;
            absl::StrAppend(&line, ",\"h2d_pinned_ms\":", Num(copies.h2d_pinned),
                            ",\"d2h_pinned_ms\":", Num(copies.d2h_pinned),
                            ",\"h2d_pageable_ms\":", Num(copies.h2d_pageable),
                            ",\"d2h_pageable_ms\":", Num(copies.d2h_pageable),
                            ",\"copy_pinned_ms\":", Num(pinned),
                            ",\"copy_pageable_ms\":", Num(pageable),
                            ",\"overhead_over_copy_pinned\":", Num(pinned > 0 ? over / pinned : -1),
                            ",\"overhead_over_copy_pageable\":", Num(over / pageable));
          }
        }
        out << line << "}" << std::endl;
      }
    }
    if (shm) (void)(*client)->UnregisterRegion("bench_shm");
    if (ipc_skip.empty() && want_ipc) (void)(*client)->UnregisterRegion("bench_ipc");
    producer.Stop();
  }
  (*worker)->Shutdown();
  return 0;
}

}  // namespace spattn
