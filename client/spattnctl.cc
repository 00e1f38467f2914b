// spattnctl: command-line client of the spattn worker (and, through `index`, of the index
// service). Run `spattnctl help` for the commands.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/attention_client.h"
#include "client/calibrate_command.h"
#include "client/flags.h"
#include "client/index_commands.h"
#include "kernels/fidelity.h"
#include "kernels/host_problem.h"
#include "kernels/io/tensor_io.h"
#include "kernels/method_config.h"
#include "kernels/reference/reference_attention.h"
#include "kernels/status_macros.h"
#include "kernels/workload/tensor_problem.h"
#include "kernels/workload/workload.h"
#include "proto/grpc_security.h"
#include "proto/method_config_convert.h"

namespace spattn {
namespace {

constexpr char kUsage[] = R"(usage: spattnctl [--address=host:port] [--timeout_s=60] COMMAND [flags]

--address: host:port, or unix:/path of the worker's Unix socket (needed for --transport=shm and
`regions register`: the worker maps only shared memory the calling user owns). TLS:
--tls_ca=CA.pem [--tls_cert=C.pem --tls_key=C.key] [--tls_server_name=NAME]; bearer token:
--token_file=FILE (default $SPATTN_TOKEN_FILE).

commands:
  metadata                          RPCs, methods (implemented on cpu/cuda), devices, limits
  health [--service=NAME]           grpc.health.v1 status ("" = the whole worker)
  regions list                      registered shared-memory / CUDA regions
  regions register --name=N --shm_key=/KEY --byte_size=B [--offset=0]
  regions unregister [--name=N]     one region, or all without --name
  attention [flags]                 send one request (or a stream of layers), print per-head stats
      input, one of:
        --q=Q --k=K --v=V [--layout=auto|thd|hsd|bhsd]   tensors from .npy / .safetensors[:name]
        synthetic (default): --seq_len=4096 [--q_len=seq_len] [--batch=1] --q_heads=32
          --kv_heads=8 --head_dim=128 --seed=1 --workload=llm_mix|<head kind>|random
          [--rope_theta=500000] [--concentration=1]
      [--dtype=bf16|fp16|fp32] [--non_causal] [--softmax_scale=S]
      --transport=inline|shm        how Q/K/V/O travel (default inline)
      --method=NAME                 override every head (dense, a_shape, vertical_slash, ...)
      --NAME.PARAM=V                a parameter of that method, e.g. --vertical_slash.last_q=32
                                    (the names of kernels/method_config.h; default: the paper's)
      --model=ID --layer=L [--config_version=V]   use the model's head configs
      --layers=N                    stream N layers (one message each) through one stream
      --recall                      estimate attention-mass recall per head (worker side)
      --check                       also compute dense attention here and print the output's
                                    relative L2 error against it (slow for long inputs)
      --out=PATH.npy                write the output ([tokens, heads, head_dim], the input dtype)
  index ...                         index-service commands (`spattnctl index help`; they take
                                    --server=HOST:PORT or $SPATTN_INDEX_ADDR, not --address)
  calibrate ...                     offline per-head pattern search on calibration prompts
                                    (synthetic or captured Q/K/V per layer): prints the chosen
                                    method per head, writes --out=configs.json and/or publishes
                                    a new version with --publish --model=ID (`spattnctl
                                    calibrate help`; --server / $SPATTN_INDEX_ADDR as index)

The worker address defaults to $SPATTN_WORKER or 127.0.0.1:50051.
)";

// Flags of `attention`, `regions` and `health` that take no value.
CommandLine::Options CommandOptions() {
  CommandLine::Options o;
  o.boolean = {"non_causal", "recall", "check"};
  return o;
}

int Fail(const absl::Status& s) {
  std::cerr << "spattnctl: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return 1;
}

int Fail(const std::string& msg) {
  std::cerr << "spattnctl: " << msg << "\n";
  return 2;
}

int Metadata(AttentionClient& client) {
  auto md = client.Metadata();
  if (!md.ok()) return Fail(md.status());
  std::printf("%s %s  device=%s\n", md->name().c_str(), md->version().c_str(),
              md->device().c_str());
  for (const auto& d : md->devices()) {
    std::printf("  device %s:%d %s %s%s\n", d.kind().c_str(), d.ordinal(), d.name().c_str(),
                d.uuid().c_str(),
                d.memory_bytes()
                    ? absl::StrFormat(" %.1f GiB", d.memory_bytes() / 1073741824.0).c_str()
                    : "");
  }
  std::printf("limits: max_message_bytes=%llu max_inline_bytes=%llu\n",
              static_cast<unsigned long long>(md->max_message_bytes()),
              static_cast<unsigned long long>(md->max_inline_bytes()));
  std::printf("index service: %s (%s)\n",
              md->index_service().empty() ? "none" : md->index_service().c_str(),
              md->index_service_reachable() ? "reachable" : "not reachable");
  std::string dtypes;
  for (int t : md->dtypes()) {
    absl::StrAppend(&dtypes, dtypes.empty() ? "" : ",", v1::DataType_Name(t));
  }
  std::printf("dtypes: %s\n", dtypes.c_str());
  std::printf("%-24s %s\n", "rpc", "implemented");
  for (const auto& r : md->rpcs()) {
    std::printf("%-24s %-5s %s\n", r.name().c_str(), r.implemented() ? "yes" : "no",
                r.note().c_str());
  }
  std::printf("%-18s %-5s %-5s %s\n", "method", "cpu", "cuda", "gpu_index_builder");
  for (const auto& m : md->methods()) {
    std::printf("%-18s %-5s %-5s %s\n", m.name().c_str(), m.implemented_cpu() ? "yes" : "no",
                m.implemented_cuda() ? "yes" : "no", m.gpu_index_builder() ? "yes" : "no");
  }
  return 0;
}

int Regions(AttentionClient& client, CommandLine& f) {
  const std::string sub = f.positional().size() > 1 ? f.positional()[1] : "list";
  if (sub == "list") {
    auto rows = client.ListRegions();
    if (!rows.ok()) return Fail(rows.status());
    std::printf("%-20s %-7s %-24s %12s %12s %6s %s\n", "name", "kind", "shm_key", "offset",
                "byte_size", "device", "pinned");
    for (const auto& r : *rows) {
      std::printf("%-20s %-7s %-24s %12llu %12llu %6d %s\n", r.name().c_str(), r.kind().c_str(),
                  r.shm_key().c_str(), static_cast<unsigned long long>(r.offset()),
                  static_cast<unsigned long long>(r.byte_size()), r.device_id(),
                  r.pinned() ? "yes" : "no");
    }
    return 0;
  }
  if (sub == "register") {
    if (!f.Has("name") || !f.Has("shm_key"))
      return Fail("regions register: needs --name and --shm_key");
    absl::StatusOr<int64_t> offset = f.Value<int64_t>("offset", 0);
    absl::StatusOr<int64_t> size = f.Value<int64_t>("byte_size", 0);
    if (!offset.ok()) return Fail(std::string(offset.status().message()));
    if (!size.ok()) return Fail(std::string(size.status().message()));
    const absl::Status s =
        client.RegisterSystemRegion(f.Get("name", ""), f.Get("shm_key", ""), *offset, *size);
    if (!s.ok()) return Fail(s);
    std::printf("registered %s\n", f.Get("name", "").c_str());
    return 0;
  }
  if (sub == "unregister") {
    auto n = client.UnregisterRegion(f.Get("name", ""));
    if (!n.ok()) return Fail(n.status());
    std::printf("unregistered %d region(s)\n", *n);
    return 0;
  }
  return Fail(absl::StrCat("regions: unknown subcommand '", sub, "'"));
}

// Prints one answer: a row per head (with the synthetic workload's head kind when known) and a
// summary over heads.
void PrintResponse(const v1::AttentionResponse& r, const std::vector<std::string>& head_kinds) {
  std::printf("request %s layer %u  device=%s  config_version=%llu  density=%.4f\n",
              r.request_id().c_str(), r.layer(), r.device().c_str(),
              static_cast<unsigned long long>(r.config_version_used()), r.density());
  if (r.heads_size() > 0) {
    const bool kinds = !head_kinds.empty();
    std::printf("  %5s  %-15s%-18s %9s %9s\n", "head", kinds ? "workload kind" : "", "method",
                "density", "recall");
    double recall_sum = 0, recall_min = 1;
    int recalls = 0;
    for (const auto& h : r.heads()) {
      const std::string kind =
          kinds && h.head() < head_kinds.size() ? head_kinds[h.head()] : std::string();
      std::printf("  %5u  %-15s%-18s %9.4f %9s\n", h.head(), kind.c_str(), h.method_name().c_str(),
                  h.density(), h.recall() < 0 ? "-" : absl::StrFormat("%.4f", h.recall()).c_str());
      if (h.recall() >= 0) {
        recall_sum += h.recall();
        recall_min = std::min(recall_min, h.recall());
        ++recalls;
      }
    }
    if (recalls > 0) {
      std::printf(
          "  all heads: density %.4f (%.1fx fewer pairs than dense), recall mean %.4f "
          "min %.4f\n",
          r.density(), r.density() > 0 ? 1.0 / r.density() : 0.0, recall_sum / recalls, recall_min);
    }
  }
  const auto& t = r.timings();
  std::printf(
      "  stages (ms): resolve %.2f  config %.2f  index_build %.2f  kernel %.2f  "
      "recall %.2f  output %.2f  total %.2f  (host<->GPU copies %.2f)\n",
      t.resolve_seconds() * 1e3, t.config_seconds() * 1e3, t.index_build_seconds() * 1e3,
      t.kernel_seconds() * 1e3, t.recall_seconds() * 1e3, t.output_seconds() * 1e3,
      t.total_seconds() * 1e3, t.transfer_seconds() * 1e3);
}

// The input of layer `l`: tensors from files (the same for every layer), a synthetic LLM-like
// workload (seed + l), or plain random values.
// `head_kinds` gets the synthetic workload's kind of each q head (left empty otherwise).
absl::StatusOr<std::unique_ptr<HostProblem>> MakeLayerInput(CommandLine& f, int64_t l,
                                                            std::vector<std::string>* head_kinds) {
  head_kinds->clear();
  SPATTN_ASSIGN_OR_RETURN(const bool non_causal, f.Bool("non_causal"));
  const bool causal = !non_causal;
  SPATTN_ASSIGN_OR_RETURN(const double scale, f.Value<double>("softmax_scale", 0));
  std::optional<DType> dtype;
  if (f.Has("dtype")) {
    auto t = ParseDType(f.Get("dtype", ""));
    if (!t.ok()) return t.status();
    dtype = *t;
  }
  if (f.Has("q") || f.Has("k") || f.Has("v")) {
    if (!f.Has("q") || !f.Has("k") || !f.Has("v")) {
      return absl::InvalidArgumentError("--q, --k and --v go together");
    }
    TensorProblemOptions o;
    auto layout = ParseTensorLayout(f.Get("layout", "auto"));
    if (!layout.ok()) return layout.status();
    o.layout = *layout;
    o.dtype = dtype;
    o.causal = causal;
    o.softmax_scale = static_cast<float>(scale);
    auto q = ReadTensorSpec(f.Get("q", ""));
    if (!q.ok()) return q.status();
    auto k = ReadTensorSpec(f.Get("k", ""));
    if (!k.ok()) return k.status();
    auto v = ReadTensorSpec(f.Get("v", ""));
    if (!v.ok()) return v.status();
    return ProblemFromTensors(*q, *k, *v, o);
  }
  SPATTN_ASSIGN_OR_RETURN(const int64_t seq_len, f.Value<int64_t>("seq_len", 4096));
  SPATTN_ASSIGN_OR_RETURN(int64_t q_len, f.Value<int64_t>("q_len", -1));
  SPATTN_ASSIGN_OR_RETURN(const int64_t batch, f.Value<int64_t>("batch", 1));
  SPATTN_ASSIGN_OR_RETURN(const int64_t hq, f.Value<int64_t>("q_heads", 32));
  SPATTN_ASSIGN_OR_RETURN(const int64_t hkv, f.Value<int64_t>("kv_heads", 8));
  SPATTN_ASSIGN_OR_RETURN(const int64_t d, f.Value<int64_t>("head_dim", 128));
  SPATTN_ASSIGN_OR_RETURN(const int64_t seed, f.Value<int64_t>("seed", 1));
  if (q_len < 0) q_len = seq_len;
  if (seq_len <= 0 || q_len <= 0 || q_len > seq_len || batch <= 0 || hq <= 0 || hkv <= 0 ||
      d <= 0 || seq_len > (1 << 30)) {
    return absl::InvalidArgumentError("sizes must be positive and q_len <= seq_len");
  }
  ProblemShape shape;
  shape.q_lens.assign(batch, static_cast<int32_t>(q_len));
  shape.k_lens.assign(batch, static_cast<int32_t>(seq_len));
  shape.num_q_heads = static_cast<int>(hq);
  shape.num_kv_heads = static_cast<int>(hkv);
  shape.head_dim = static_cast<int>(d);
  shape.dtype = dtype.value_or(DType::kBF16);
  shape.causal = causal;
  shape.softmax_scale = static_cast<float>(scale);
  const std::string workload = f.Get("workload", "llm_mix");
  if (workload == "random") {
    auto hp = std::make_unique<HostProblem>(shape);
    hp->FillRandom(static_cast<uint64_t>(seed + l));
    return hp;
  }
  WorkloadOptions o;
  o.workload = workload;
  o.shape = shape;
  o.seed = static_cast<uint64_t>(seed + l);
  SPATTN_RETURN_IF_ERROR(f.Read("rope_theta", &o.rope_theta));
  SPATTN_RETURN_IF_ERROR(f.Read("concentration", &o.concentration));
  auto w = GenerateWorkload(o);
  if (!w.ok()) return w.status();
  for (const HeadPlan& plan : w->heads) head_kinds->push_back(HeadKindName(plan.kind));
  return std::move(w->host);
}

// Writes the output of `p` (dtype of the problem) to `path` as [total_q, heads, head_dim].
absl::Status WriteOutput(const std::string& path, const AttentionProblem& p,
                         const std::vector<float>& out) {
  auto t = HostTensor::FromFloats(out, {p.total_q(), p.num_q_heads, p.head_dim}, p.dtype);
  if (!t.ok()) return t.status();
  return WriteNpy(path, *t);
}

int Attention(AttentionClient& client, CommandLine& f) {
  absl::StatusOr<int64_t> layers_or = f.Value<int64_t>("layers", 1);
  absl::StatusOr<int64_t> layer_or = f.Value<int64_t>("layer", 0);
  absl::StatusOr<int64_t> version_or = f.Value<int64_t>("config_version", 0);
  absl::StatusOr<bool> recall = f.Bool("recall");
  absl::StatusOr<bool> check = f.Bool("check");
  for (const absl::Status& s : {layers_or.status(), layer_or.status(), version_or.status(),
                                recall.status(), check.status()}) {
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  const int64_t layers = *layers_or, layer = *layer_or, version = *version_or;
  if (layers <= 0) return Fail("--layers: must be > 0");
  const std::string transport = f.Get("transport", "inline");
  if (transport != "inline" && transport != "shm") {
    return Fail("--transport: expected inline or shm");
  }
  std::vector<std::string> head_kinds;
  auto first = MakeLayerInput(f, 0, &head_kinds);
  if (!first.ok()) return Fail(first.status());
  std::unique_ptr<HostProblem> hp = std::move(*first);
  const AttentionProblem& p0 = hp->problem();
  const DType dtype = p0.dtype;
  const size_t qb = hp->q_bytes().size(), kb = hp->k_bytes().size();
  const std::vector<int64_t> q_shape = {p0.total_q(), p0.num_q_heads, p0.head_dim};
  const std::vector<int64_t> kv_shape = {p0.total_k(), p0.num_kv_heads, p0.head_dim};

  v1::AttentionRequest base;
  std::random_device rd;
  base.set_request_id(absl::StrCat("spattnctl-", getpid(), "-", absl::Hex(rd())));
  base.set_num_q_heads(p0.num_q_heads);
  base.set_num_kv_heads(p0.num_kv_heads);
  base.set_head_dim(p0.head_dim);
  base.set_softmax_scale(p0.softmax_scale);
  base.set_causal(p0.causal);
  for (int32_t x : p0.cu_seqlens_q) base.add_cu_seqlens_q(x);
  for (int32_t x : p0.cu_seqlens_k) base.add_cu_seqlens_k(x);
  base.set_return_stats(true);
  base.set_estimate_recall(*recall);
  if (f.Has("model")) {
    base.set_model_id(f.Get("model", ""));
    base.set_config_version(version);
  }
  if (f.Has("method")) {
    auto m = ParseMethod(f.Get("method", ""));
    if (!m.ok()) return Fail(m.status());
    base.mutable_method_override()->set_method(ToProtoMethod(*m));
    // --<method>.<param>=V flags (the parameter table) set the override's parameters.
    MethodConfig config;
    config.method = *m;
    bool any = false;
    for (const std::string& name : f.names()) {
      if (name.find('.') == std::string::npos) continue;
      if (!absl::StartsWith(name, absl::StrCat(MethodName(*m), "."))) {
        return Fail(absl::StrCat("--", name, ": not a parameter of --method=", MethodName(*m)));
      }
      const absl::Status s = SetMethodParam(name, f.Get(name), &config);
      if (!s.ok()) return Fail(std::string(s.message()));
      any = true;
    }
    if (any) MethodConfigToProto(config, base.mutable_method_override());
  }
  for (const std::string& name : f.names()) {
    if (name.find('.') != std::string::npos && !f.Has("method")) {
      return Fail(absl::StrCat("--", name, ": method parameters go with --method"));
    }
  }

  std::unique_ptr<SharedMemoryRegion> shm;
  // Keys start with the worker's default --shm_prefix "/spattn-".
  const std::string region = absl::StrCat("spattn-ctl-", getpid(), "-", absl::Hex(rd()));
  if (transport == "shm") {
    auto created = SharedMemoryRegion::Create(absl::StrCat("/", region), qb * 2 + kb * 2);
    if (!created.ok()) return Fail(created.status());
    shm = std::move(*created);
    const absl::Status s = client.RegisterSystemRegion(region, *shm);
    if (!s.ok()) return Fail(s);
  }
  // Unregisters the region (the object is unlinked when `shm` goes).
  auto finish = [&](int rc) {
    if (shm) client.UnregisterRegion(region).IgnoreError();
    return rc;
  };

  // One layer: its request (inputs written into the region for shm).
  auto request_for = [&](int64_t l) -> absl::StatusOr<v1::AttentionRequest> {
    if (l > 0) {
      auto next = MakeLayerInput(f, l, &head_kinds);
      if (!next.ok()) return next.status();
      hp = std::move(*next);
    }
    v1::AttentionRequest r = base;
    r.set_layer(static_cast<uint32_t>(layer + l));
    if (shm) {
      // Layers of one stream reuse the region: the next layer is written after the answer.
      SPATTN_RETURN_IF_ERROR(shm->Write(0, hp->q_bytes().data(), qb));
      SPATTN_RETURN_IF_ERROR(shm->Write(qb, hp->k_bytes().data(), kb));
      SPATTN_RETURN_IF_ERROR(shm->Write(qb + kb, hp->v_bytes().data(), kb));
      *r.mutable_q() = RegionTensor(dtype, q_shape, region, 0, qb);
      *r.mutable_k() = RegionTensor(dtype, kv_shape, region, qb, kb);
      *r.mutable_v() = RegionTensor(dtype, kv_shape, region, qb + kb, kb);
      *r.mutable_output() = RegionTensor(dtype, q_shape, region, qb + 2 * kb, qb);
    } else {
      *r.mutable_q() = InlineTensor(dtype, q_shape, hp->q_bytes().data(), qb);
      *r.mutable_k() = InlineTensor(dtype, kv_shape, hp->k_bytes().data(), kb);
      *r.mutable_v() = InlineTensor(dtype, kv_shape, hp->v_bytes().data(), kb);
    }
    return r;
  };
  // Prints one answer; --check compares with dense attention of the layer's input, --out writes
  // the output (layer index appended when there are several).
  auto report = [&](int64_t l, const v1::AttentionResponse& r) -> int {
    PrintResponse(r, head_kinds);
    if (!*check && !f.Has("out")) return 0;
    std::vector<float> got(qb / DTypeSize(dtype));
    if (shm) {
      ToFloat(shm->data() + qb + 2 * kb, dtype, static_cast<int64_t>(got.size()), got.data());
    } else {
      auto out = DecodeInlineOutput(r);
      if (!out.ok()) return Fail(out.status());
      got = std::move(*out);
    }
    if (*check) {
      std::vector<float> want;
      const absl::Status s = ReferenceAttention(hp->problem(), {}, {}, &want, nullptr);
      if (!s.ok()) return Fail(s);
      std::printf("  output vs dense attention: relative L2 error %.3e\n",
                  RelativeL2Error(got, want));
    }
    if (f.Has("out")) {
      const std::string path =
          layers == 1 ? f.Get("out", "") : absl::StrCat(f.Get("out", ""), ".layer", l, ".npy");
      const absl::Status s = WriteOutput(path, hp->problem(), got);
      if (!s.ok()) return Fail(s);
      std::printf("  output written to %s\n", path.c_str());
    }
    return 0;
  };

  if (layers == 1) {
    auto req = request_for(0);
    if (!req.ok()) return finish(Fail(req.status()));
    auto r = client.ComputeAttention(*req);
    if (!r.ok()) return finish(Fail(r.status()));
    return finish(report(0, *r));
  }
  auto stream = client.OpenStream();
  for (int64_t l = 0; l < layers; ++l) {
    auto req = request_for(l);
    if (!req.ok()) return finish(Fail(req.status()));
    const absl::Status sent = stream->Send(*req);
    auto r = sent.ok() ? stream->Receive() : absl::StatusOr<v1::AttentionResponse>(sent);
    if (!r.ok()) {
      const absl::Status fin = stream->Finish();
      return finish(Fail(fin.ok() ? r.status() : fin));
    }
    const int rc = report(l, *r);
    if (rc != 0) return finish(rc);
  }
  const absl::Status fin = stream->Finish();
  return finish(fin.ok() ? 0 : Fail(fin));
}

// The flags each worker command reads; anything else is an unknown flag.
const std::map<std::string, std::vector<std::string>>& CommandFlags() {
  static const auto* const kFlags = new std::map<std::string, std::vector<std::string>>{
      {"metadata", {}},
      {"health", {"service"}},
      {"regions", {"name", "shm_key", "offset", "byte_size"}},
      {"attention",
       {"q",
        "k",
        "v",
        "layout",
        "seq_len",
        "q_len",
        "batch",
        "q_heads",
        "kv_heads",
        "head_dim",
        "seed",
        "workload",
        "rope_theta",
        "concentration",
        "dtype",
        "non_causal",
        "softmax_scale",
        "transport",
        "method",
        "model",
        "layer",
        "config_version",
        "layers",
        "recall",
        "check",
        "out"}},
  };
  return *kFlags;
}

int Main(int argc, char** argv) {
  // Global flags come before the command word.
  int i = 1;
  while (i < argc && absl::StartsWith(argv[i], "--")) ++i;
  const std::vector<std::string> global_words(argv + 1, argv + i);
  absl::StatusOr<CommandLine> global = CommandLine::Parse(global_words, CommandLine::Options());
  if (!global.ok()) return Fail(absl::StrCat(global.status().message(), "\n", kUsage));
  absl::StatusOr<bool> help = global->Bool("help");
  if (help.ok() && *help) {
    std::cout << kUsage;
    return 0;
  }
  const std::string address =
      global->Get("address", getenv("SPATTN_WORKER") ? getenv("SPATTN_WORKER") : "127.0.0.1:50051");
  absl::StatusOr<double> timeout_s = global->Value<double>("timeout_s", 60);
  if (!timeout_s.ok() || *timeout_s <= 0) {
    return Fail("--timeout_s: expected a positive number");
  }
  const char* token_env = getenv("SPATTN_TOKEN_FILE");
  absl::StatusOr<ClientSecurityOptions> security =
      ClientSecurityFromFlags(global->Get("tls_ca", ""), global->Get("tls_cert", ""),
                              global->Get("tls_key", ""), global->Get("tls_server_name", ""),
                              global->Get("token_file", token_env != nullptr ? token_env : ""));
  if (absl::Status s = global->CheckAllUsed(); !s.ok()) {
    return Fail(absl::StrCat(s.message(),
                             " (global flags: --address, --timeout_s, --tls_ca, --tls_cert, "
                             "--tls_key, --tls_server_name, --token_file, --help)\n",
                             kUsage));
  }
  if (!security.ok()) return Fail(security.status());
  if (i >= argc || std::string(argv[i]) == "help") {
    std::cout << kUsage;
    return i >= argc ? 2 : 0;
  }
  const std::string command = argv[i];
  if (command == "index") return RunIndexCommand(argc - i - 1, argv + i + 1);
  if (command == "calibrate") return RunCalibrateCommand(argc - i - 1, argv + i + 1);
  auto known = CommandFlags().find(command);
  if (known == CommandFlags().end()) {
    return Fail(absl::StrCat("unknown command '", command, "'\n", kUsage));
  }
  const std::vector<std::string> words(argv + i, argv + argc);
  absl::StatusOr<CommandLine> flags = CommandLine::Parse(words, CommandOptions());
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  if (absl::StatusOr<bool> h = flags->Bool("help"); h.ok() && *h) {
    std::cout << kUsage;
    return 0;
  }
  for (const std::string& name : known->second) flags->MarkUsed(name);
  if (command == "attention") {
    for (const std::string& name : flags->names()) {
      if (name.find('.') != std::string::npos) flags->MarkUsed(name);  // --<method>.<param>
    }
  }
  if (absl::Status s = flags->CheckAllUsed(); !s.ok()) {
    return Fail(absl::StrCat(command, ": ", s.message(), " (see spattnctl --help)"));
  }
  ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(*timeout_s);
  options.security = *security;
  // --timeout_s bounds the whole command, connecting included.
  options.connect_timeout = std::min(options.connect_timeout, options.timeout);
  auto client = AttentionClient::Connect(options);
  if (!client.ok()) return Fail(client.status());
  if (command == "metadata") return Metadata(**client);
  if (command == "health") {
    auto h = (*client)->Health(flags->Get("service", ""));
    if (!h.ok()) return Fail(h.status());
    std::printf("%s\n", h->c_str());
    return *h == "SERVING" ? 0 : 1;
  }
  if (command == "regions") return Regions(**client, *flags);
  return Attention(**client, *flags);
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) { return spattn::Main(argc, argv); }
