#include "client/index_commands.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/flags.h"
#include "index/tensor_client.h"
#include "kernels/io/tensor_io.h"
#include "kernels/status_macros.h"
#include "proto/grpc_security.h"
#include "proto/grpc_status.h"

namespace spattn {
namespace {

constexpr char kUsage[] =
    R"(usage: spattnctl index [--server=HOST:PORT] [--timeout=SECONDS] COMMAND ...

The server defaults to $SPATTN_INDEX_ADDR, else 127.0.0.1:50061. VERSION 0 means "published".
TLS: --tls_ca=CA.pem [--tls_cert=CLIENT.pem --tls_key=CLIENT.key] [--tls_server_name=NAME];
a bearer token: --token_file=FILE (default $SPATTN_TOKEN_FILE).

Models
  models list
  models get MODEL
  models put --json=FILE
  models put --model=ID --layers=N --q_heads=N --kv_heads=N --head_dim=N
             [--rope_theta=X] [--default_method=NAME] [--description=TEXT]
  models delete MODEL [--force]            (--force also deletes its versions)
Versions
  versions MODEL                           list versions with state and sizes
  create-version MODEL [--base=VERSION] [--description=TEXT]
  seal MODEL VERSION
  publish MODEL VERSION --expect=CURRENT   (compare-and-set; 0 = nothing published yet)
  delete-version MODEL VERSION
Head configs
  configs import MODEL VERSION FILE [--format=auto|spattn|minference]
  configs export MODEL [--version=V] [--out=FILE]
Tensors (FILE: .npy, .safetensors or .safetensors:NAME; fp16/bf16 are widened to fp32)
  centroids upload MODEL VERSION FILE      [L, kv_heads, C, head_dim] for all layers, or
                                           [C, head_dim] with --layer=L --kv_head=H
  centroids download MODEL [--version=V] --out=FILE.npy [--layer=L --kv_head=H]
  classifier upload MODEL VERSION --dir=DIR          files l{L}_h{H}_{param}.npy
  classifier upload MODEL VERSION --layer=L --head=H --name=PARAM FILE
  classifier download MODEL [--version=V] --dir=DIR [--layer=L]
Operations
  watch MODEL [--after=VERSION] [--count=N]
  backup NAME                              online backup into NAME under the server's --backup_root
  list-backups NAME
  health
)";

// ---- Arguments: positional words and --flags (client/flags.h), read through typed getters.

class Args {
 public:
  static absl::StatusOr<Args> Parse(int argc, char** argv) {
    CommandLine::Options options;
    options.boolean = {"force"};
    SPATTN_ASSIGN_OR_RETURN(CommandLine line, CommandLine::Parse(argc, argv, options));
    return Args(std::move(line));
  }

  bool Has(const std::string& name) const { return line_.Has(name); }
  std::string Get(const std::string& name, const std::string& fallback = "") {
    return line_.Get(name, fallback);
  }
  absl::StatusOr<uint64_t> GetUint(const std::string& name, uint64_t fallback) {
    return line_.Value<uint64_t>(name, fallback);
  }
  absl::StatusOr<uint64_t> RequireUint(const std::string& name) {
    if (!Has(name)) return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
    return GetUint(name, 0);
  }
  bool GetBool(const std::string& name) { return line_.Bool(name).value_or(true); }
  // Words after the command words.
  const std::vector<std::string>& positional() const { return line_.positional(); }
  absl::StatusOr<uint64_t> PositionalUint(size_t i, const char* what) const {
    uint64_t v;
    if (i >= positional().size() || !absl::SimpleAtoi(positional()[i], &v)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " (a number) is required"));
    }
    return v;
  }
  absl::StatusOr<std::string> PositionalString(size_t i, const char* what) const {
    if (i >= positional().size())
      return absl::InvalidArgumentError(absl::StrCat(what, " is required"));
    return positional()[i];
  }
  // Flags given but never read: typos.
  absl::Status CheckAllUsed() const { return line_.CheckAllUsed(); }

 private:
  explicit Args(CommandLine line) : line_(std::move(line)) {}
  CommandLine line_;
};

// ---- Formatting.

std::string Time(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string Bytes(uint64_t n) {
  if (n < 1024) return absl::StrCat(n, " B");
  if (n < (1 << 20)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  if (n < (uint64_t{1} << 30)) return absl::StrFormat("%.1f MiB", n / 1048576.0);
  return absl::StrFormat("%.2f GiB", n / 1073741824.0);
}

std::string MethodName(v1::Method m) {
  if (m == v1::METHOD_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(absl::StripPrefix(v1::Method_Name(m), "METHOD_"));
}

std::string StateName(v1::VersionState s) {
  return std::string(absl::StripPrefix(v1::VersionState_Name(s), "VERSION_STATE_"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  out << contents;
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing '", path, "'"));
}

// A tensor file as fp32 (what the index stores): .npy, .safetensors or .safetensors:name;
// fp16/bf16 content is widened.
struct Fp32Tensor {
  std::vector<int64_t> shape;
  std::string bytes;
};

absl::StatusOr<Fp32Tensor> ReadFp32(const std::string& spec) {
  absl::StatusOr<HostTensor> t = ReadTensorSpec(spec);
  if (!t.ok()) return t.status();
  Fp32Tensor out;
  out.shape = t->shape;
  if (t->dtype == DType::kF32) {
    out.bytes.assign(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
  } else {
    out.bytes = FloatsToBytes(t->ToFloats());
  }
  return out;
}

absl::Status WriteFp32Npy(const std::string& path, const std::vector<int64_t>& shape,
                          const std::string& bytes) {
  HostTensor t;
  t.dtype = DType::kF32;
  t.shape = shape;
  t.bytes.assign(bytes.begin(), bytes.end());
  return WriteNpy(path, t);
}

absl::Status FromProtobuf(const google::protobuf::util::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.ToString()));
}

// ---- The client.

class Cli {
 public:
  Cli(const std::string& server, absl::Duration timeout, const ClientSecurityOptions& security)
      : timeout_(timeout) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    // RunIndexCommand validated `security` (ClientSecurityFromFlags).
    channel_ = MakeChannel(server, security, args).value();
    stub_ = v1::IndexService::NewStub(channel_);
  }

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::IndexService::Stub::*method)(grpc::ClientContext*,
                                                                           const Req&, Resp*),
                            const Req& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
    Resp response;
    grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  absl::Status Run(const std::string& command, Args& args);

 private:
  absl::Status Models(Args& args);
  absl::Status ModelsPut(Args& args);
  absl::Status Versions(Args& args);
  absl::Status CreateVersion(Args& args);
  absl::Status Seal(Args& args);
  absl::Status Publish(Args& args);
  absl::Status DeleteVersion(Args& args);
  absl::Status Configs(Args& args);
  absl::Status Centroids(Args& args);
  absl::Status Classifier(Args& args);
  absl::Status Watch(Args& args);
  absl::Status Backup(Args& args);
  absl::Status ListBackups(Args& args);
  absl::Status Health(Args& args);
  absl::StatusOr<std::vector<DownloadedTensor>> Download(const std::string& model, uint64_t version,
                                                         v1::TensorKind kind,
                                                         std::optional<uint32_t> layer);

  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::IndexService::Stub> stub_;
};

void PrintModel(const v1::Model& m) {
  std::printf("model %s\n", m.model_id().c_str());
  std::printf("  layers %u, q heads %u, kv heads %u, head_dim %u\n", m.num_layers(),
              m.num_q_heads(), m.num_kv_heads(), m.head_dim());
  std::printf("  rope_theta %g", m.rope_theta());
  if (!m.rope_scaling().type().empty()) {
    std::printf(", rope_scaling %s (factor %g)", m.rope_scaling().type().c_str(),
                m.rope_scaling().factor());
  }
  std::printf("\n  default method %s\n", MethodName(m.default_method().method()).c_str());
  if (!m.description().empty()) std::printf("  description: %s\n", m.description().c_str());
  std::printf("  created %s UTC\n", Time(m.created_unix_ms()).c_str());
}

absl::Status Cli::Models(Args& args) {
  const std::vector<std::string>& pos = args.positional();
  const std::string sub = pos.size() > 1 ? pos[1] : "list";
  if (sub == "list") {
    absl::StatusOr<v1::ListModelsResponse> r =
        Call(&v1::IndexService::Stub::ListModels, v1::ListModelsRequest());
    if (!r.ok()) return r.status();
    std::printf("%-32s %6s %7s %8s %8s  %-16s %s\n", "MODEL", "LAYERS", "Q_HEADS", "KV_HEADS",
                "HEAD_DIM", "DEFAULT_METHOD", "CREATED (UTC)");
    for (const v1::Model& m : r->models()) {
      std::printf("%-32s %6u %7u %8u %8u  %-16s %s\n", m.model_id().c_str(), m.num_layers(),
                  m.num_q_heads(), m.num_kv_heads(), m.head_dim(),
                  MethodName(m.default_method().method()).c_str(),
                  Time(m.created_unix_ms()).c_str());
    }
    if (r->models().empty()) std::printf("(no models)\n");
    return absl::OkStatus();
  }
  if (sub == "get") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    if (!id.ok()) return id.status();
    v1::GetModelRequest req;
    req.set_model_id(*id);
    absl::StatusOr<v1::Model> m = Call(&v1::IndexService::Stub::GetModel, req);
    if (!m.ok()) return m.status();
    PrintModel(*m);
    return absl::OkStatus();
  }
  if (sub == "put") return ModelsPut(args);
  if (sub == "delete") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    if (!id.ok()) return id.status();
    v1::DeleteModelRequest req;
    req.set_model_id(*id);
    req.set_force(args.GetBool("force"));
    absl::StatusOr<v1::DeleteModelResponse> r = Call(&v1::IndexService::Stub::DeleteModel, req);
    if (!r.ok()) return r.status();
    std::printf("deleted model %s\n", id->c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown 'models ", sub, "'"));
}

absl::Status Cli::ModelsPut(Args& args) {
  v1::PutModelRequest req;
  v1::Model* m = req.mutable_model();
  if (args.Has("json")) {
    absl::StatusOr<std::string> text = ReadFile(args.Get("json"));
    if (!text.ok()) return text.status();
    google::protobuf::util::JsonParseOptions options;
    absl::Status s = FromProtobuf(google::protobuf::util::JsonStringToMessage(*text, m, options),
                                  args.Get("json"));
    if (!s.ok()) return s;
  } else {
    m->set_model_id(args.Get("model"));
    for (auto [flag, setter] : std::vector<std::pair<const char*, void (v1::Model::*)(uint32_t)>>{
             {"layers", &v1::Model::set_num_layers},
             {"q_heads", &v1::Model::set_num_q_heads},
             {"kv_heads", &v1::Model::set_num_kv_heads},
             {"head_dim", &v1::Model::set_head_dim}}) {
      absl::StatusOr<uint64_t> v = args.RequireUint(flag);
      if (!v.ok()) return v.status();
      (m->*setter)(static_cast<uint32_t>(*v));
    }
    if (args.Has("rope_theta")) {
      double theta;
      if (!absl::SimpleAtod(args.Get("rope_theta"), &theta)) {
        return absl::InvalidArgumentError("--rope_theta: not a number");
      }
      m->set_rope_theta(theta);
    }
    if (args.Has("default_method")) {
      v1::Method method;
      const std::string name =
          absl::StrCat("METHOD_", absl::AsciiStrToUpper(args.Get("default_method")));
      if (!v1::Method_Parse(name, &method)) {
        return absl::InvalidArgumentError(
            "--default_method: expected dense, a_shape, vertical_slash, block_sparse, "
            "flex_prefill, sample_attention, anchor or saap");
      }
      m->mutable_default_method()->set_method(method);
    }
    m->set_description(args.Get("description"));
  }
  absl::StatusOr<v1::PutModelResponse> r = Call(&v1::IndexService::Stub::PutModel, req);
  if (!r.ok()) return r.status();
  std::printf("%s model %s\n", r->created() ? "created" : "updated", r->model().model_id().c_str());
  return absl::OkStatus();
}

absl::Status Cli::Versions(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  if (!id.ok()) return id.status();
  v1::ListVersionsRequest req;
  req.set_model_id(*id);
  absl::StatusOr<v1::ListVersionsResponse> r = Call(&v1::IndexService::Stub::ListVersions, req);
  if (!r.ok()) return r.status();
  std::printf("model %s, published version: %s\n", id->c_str(),
              r->published_version() == 0 ? "none" : absl::StrCat(r->published_version()).c_str());
  std::printf("%8s  %-9s %8s %8s %11s  %-19s  %-19s  %s\n", "VERSION", "STATE", "CONFIGS",
              "TENSORS", "BYTES", "CREATED (UTC)", "PUBLISHED (UTC)", "DESCRIPTION");
  for (const v1::VersionInfo& v : r->versions()) {
    std::printf("%8llu  %-9s %8llu %8llu %11s  %-19s  %-19s  %s\n",
                static_cast<unsigned long long>(v.version()), StateName(v.state()).c_str(),
                static_cast<unsigned long long>(v.num_head_configs()),
                static_cast<unsigned long long>(v.num_tensors()), Bytes(v.tensor_bytes()).c_str(),
                Time(v.created_unix_ms()).c_str(), Time(v.published_unix_ms()).c_str(),
                v.description().c_str());
  }
  return absl::OkStatus();
}

absl::Status Cli::CreateVersion(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  if (!id.ok()) return id.status();
  absl::StatusOr<uint64_t> base = args.GetUint("base", 0);
  if (!base.ok()) return base.status();
  v1::CreateVersionRequest req;
  req.set_model_id(*id);
  req.set_base_version(*base);
  req.set_description(args.Get("description"));
  absl::StatusOr<v1::VersionInfo> r = Call(&v1::IndexService::Stub::CreateVersion, req);
  if (!r.ok()) return r.status();
  std::printf("created version %llu of %s (OPEN%s)\n",
              static_cast<unsigned long long>(r->version()), id->c_str(),
              *base ? absl::StrCat(", copied from version ", *base).c_str() : "");
  return absl::OkStatus();
}

absl::Status Cli::Seal(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  absl::StatusOr<uint64_t> version = args.PositionalUint(2, "VERSION");
  if (!id.ok()) return id.status();
  if (!version.ok()) return version.status();
  v1::SealVersionRequest req;
  req.set_model_id(*id);
  req.set_version(*version);
  absl::StatusOr<v1::VersionInfo> r = Call(&v1::IndexService::Stub::SealVersion, req);
  if (!r.ok()) return r.status();
  std::printf("version %llu of %s is %s: %llu head configs, %llu tensors (%s)\n",
              static_cast<unsigned long long>(r->version()), id->c_str(),
              StateName(r->state()).c_str(), static_cast<unsigned long long>(r->num_head_configs()),
              static_cast<unsigned long long>(r->num_tensors()), Bytes(r->tensor_bytes()).c_str());
  return absl::OkStatus();
}

absl::Status Cli::Publish(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  absl::StatusOr<uint64_t> version = args.PositionalUint(2, "VERSION");
  absl::StatusOr<uint64_t> expect = args.RequireUint("expect");
  if (!id.ok()) return id.status();
  if (!version.ok()) return version.status();
  if (!expect.ok()) {
    return absl::InvalidArgumentError(
        "--expect=CURRENT is required (the version you expect to replace; 0 if none)");
  }
  v1::PublishVersionRequest req;
  req.set_model_id(*id);
  req.set_version(*version);
  req.set_expected_current_version(*expect);
  absl::StatusOr<v1::PublishVersionResponse> r = Call(&v1::IndexService::Stub::PublishVersion, req);
  if (!r.ok()) return r.status();
  std::printf("published version %llu of %s (previous: %llu)\n",
              static_cast<unsigned long long>(r->published().version()), id->c_str(),
              static_cast<unsigned long long>(r->previous_version()));
  return absl::OkStatus();
}

absl::Status Cli::DeleteVersion(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  absl::StatusOr<uint64_t> version = args.PositionalUint(2, "VERSION");
  if (!id.ok()) return id.status();
  if (!version.ok()) return version.status();
  v1::DeleteVersionRequest req;
  req.set_model_id(*id);
  req.set_version(*version);
  absl::StatusOr<v1::DeleteVersionResponse> r = Call(&v1::IndexService::Stub::DeleteVersion, req);
  if (!r.ok()) return r.status();
  std::printf("deleted version %llu of %s\n", static_cast<unsigned long long>(*version),
              id->c_str());
  return absl::OkStatus();
}

absl::Status Cli::Configs(Args& args) {
  const std::vector<std::string>& pos = args.positional();
  const std::string sub = pos.size() > 1 ? pos[1] : "";
  if (sub == "import") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.PositionalUint(3, "VERSION");
    absl::StatusOr<std::string> file = args.PositionalString(4, "FILE");
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    if (!file.ok()) return file.status();
    absl::StatusOr<std::string> text = ReadFile(*file);
    if (!text.ok()) return text.status();
    std::string format = args.Get("format", "auto");
    if (format == "auto") {
      const size_t first = text->find_first_not_of(" \t\r\n");
      format = first != std::string::npos && (*text)[first] == '[' ? "minference" : "spattn";
    }
    absl::StatusOr<v1::PutHeadConfigsRequest> req;
    if (format == "minference") {
      req = ParseMInferenceConfig(*text);
    } else if (format == "spattn") {
      req = ParseSpattnConfig(*text);
    } else {
      return absl::InvalidArgumentError("--format: expected auto, spattn or minference");
    }
    if (!req.ok()) {
      return absl::Status(req.status().code(), absl::StrCat(*file, ": ", req.status().message()));
    }
    req->set_model_id(*id);
    req->set_version(*version);
    absl::StatusOr<v1::PutHeadConfigsResponse> r =
        Call(&v1::IndexService::Stub::PutHeadConfigs, *req);
    if (!r.ok()) return r.status();
    std::printf("imported %llu head configs (%s format) into version %llu of %s\n",
                static_cast<unsigned long long>(r->written()), format.c_str(),
                static_cast<unsigned long long>(*version), id->c_str());
    return absl::OkStatus();
  }
  if (sub == "export") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.GetUint("version", 0);
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    v1::GetHeadConfigsRequest req;
    req.set_model_id(*id);
    req.set_version(*version);
    absl::StatusOr<v1::GetHeadConfigsResponse> r =
        Call(&v1::IndexService::Stub::GetHeadConfigs, req);
    if (!r.ok()) return r.status();
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    std::string json;
    absl::Status s =
        FromProtobuf(google::protobuf::util::MessageToJsonString(*r, &json, options), "export");
    if (!s.ok()) return s;
    const std::string out = args.Get("out");
    if (out.empty()) {
      std::fwrite(json.data(), 1, json.size(), stdout);
      return absl::OkStatus();
    }
    s = WriteFile(out, json);
    if (!s.ok()) return s;
    std::printf("exported %d head configs of version %llu of %s to %s\n", r->configs_size(),
                static_cast<unsigned long long>(r->version()), id->c_str(), out.c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("expected 'configs import' or 'configs export'");
}

absl::StatusOr<std::vector<DownloadedTensor>> Cli::Download(const std::string& model,
                                                            uint64_t version, v1::TensorKind kind,
                                                            std::optional<uint32_t> layer) {
  v1::GetTensorsRequest req;
  req.set_model_id(model);
  req.set_version(version);
  req.set_kind(kind);
  if (layer.has_value()) req.set_layer(*layer);
  return DownloadTensors(*stub_, req);
}

absl::Status Cli::Centroids(Args& args) {
  const std::vector<std::string>& pos = args.positional();
  const std::string sub = pos.size() > 1 ? pos[1] : "";
  const bool one = args.Has("layer") || args.Has("kv_head");
  absl::StatusOr<uint64_t> layer = args.GetUint("layer", 0);
  absl::StatusOr<uint64_t> kv_head = args.GetUint("kv_head", 0);
  if (!layer.ok()) return layer.status();
  if (!kv_head.ok()) return kv_head.status();
  if (one && !(args.Has("layer") && args.Has("kv_head"))) {
    return absl::InvalidArgumentError("--layer and --kv_head go together");
  }
  if (sub == "upload") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.PositionalUint(3, "VERSION");
    absl::StatusOr<std::string> file = args.PositionalString(4, "FILE");
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    if (!file.ok()) return file.status();
    absl::StatusOr<Fp32Tensor> npy = ReadFp32(*file);
    if (!npy.ok()) return npy.status();
    std::vector<TensorUpload> uploads;
    if (one) {
      if (npy->shape.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(*file, ": with --layer/--kv_head the array must be [C, head_dim]"));
      }
      TensorUpload t;
      t.key.set_kind(v1::TENSOR_KIND_CENTROIDS);
      t.key.set_layer(*layer);
      t.key.set_head(*kv_head);
      t.shape = npy->shape;
      t.bytes = std::move(npy->bytes);
      uploads.push_back(std::move(t));
    } else {
      if (npy->shape.size() != 4) {
        return absl::InvalidArgumentError(absl::StrCat(
            *file,
            ": expected [layers, kv_heads, C, head_dim] (or pass --layer/--kv_head for "
            "one [C, head_dim] array)"));
      }
      const int64_t per = npy->shape[2] * npy->shape[3] * 4;
      for (int64_t l = 0; l < npy->shape[0]; ++l) {
        for (int64_t h = 0; h < npy->shape[1]; ++h) {
          TensorUpload t;
          t.key.set_kind(v1::TENSOR_KIND_CENTROIDS);
          t.key.set_layer(static_cast<uint32_t>(l));
          t.key.set_head(static_cast<uint32_t>(h));
          t.shape = {npy->shape[2], npy->shape[3]};
          t.bytes = npy->bytes.substr((l * npy->shape[1] + h) * per, per);
          uploads.push_back(std::move(t));
        }
      }
    }
    absl::StatusOr<v1::PutTensorsResponse> r = UploadTensors(*stub_, *id, *version, uploads);
    if (!r.ok()) return r.status();
    std::printf("uploaded %llu centroid tensors (%s) into version %llu of %s\n",
                static_cast<unsigned long long>(r->tensors_written()),
                Bytes(r->bytes_written()).c_str(), static_cast<unsigned long long>(*version),
                id->c_str());
    return absl::OkStatus();
  }
  if (sub == "download") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.GetUint("version", 0);
    const std::string out = args.Get("out");
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    if (out.empty()) return absl::InvalidArgumentError("--out=FILE.npy is required");
    std::optional<uint32_t> only_layer;
    if (one) only_layer = static_cast<uint32_t>(*layer);
    absl::StatusOr<std::vector<DownloadedTensor>> tensors =
        Download(*id, *version, v1::TENSOR_KIND_CENTROIDS, only_layer);
    if (!tensors.ok()) return tensors.status();
    if (one) {
      for (const DownloadedTensor& t : *tensors) {
        if (t.header.key().head() != *kv_head) continue;
        std::vector<int64_t> shape(t.header.desc().shape().begin(), t.header.desc().shape().end());
        absl::Status s = WriteFp32Npy(out, shape, t.bytes);
        if (!s.ok()) return s;
        std::printf(
            "wrote centroids(layer=%llu, kv_head=%llu) [%lld, %lld] of version %llu to %s\n",
            static_cast<unsigned long long>(*layer), static_cast<unsigned long long>(*kv_head),
            static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
            static_cast<unsigned long long>(t.header.version()), out.c_str());
        return absl::OkStatus();
      }
      return absl::NotFoundError("no centroids stored for that layer and kv head");
    }
    v1::GetModelRequest mr;
    mr.set_model_id(*id);
    absl::StatusOr<v1::Model> model = Call(&v1::IndexService::Stub::GetModel, mr);
    if (!model.ok()) return model.status();
    const size_t expected = size_t{model->num_layers()} * model->num_kv_heads();
    if (tensors->size() != expected) {
      return absl::FailedPreconditionError(
          absl::StrCat("the version holds ", tensors->size(), " of ", expected,
                       " centroid sets; download them one by one with --layer/--kv_head"));
    }
    const auto& first = (*tensors)[0].header.desc();
    std::string all;
    for (size_t i = 0; i < tensors->size(); ++i) {
      const auto& t = (*tensors)[i];
      if (t.header.desc().shape(0) != first.shape(0)) {
        return absl::FailedPreconditionError(
            "centroid sets differ in size; download them one by one with --layer/--kv_head");
      }
      all += t.bytes;
    }
    absl::Status s = WriteFp32Npy(
        out, {model->num_layers(), model->num_kv_heads(), first.shape(0), first.shape(1)}, all);
    if (!s.ok()) return s;
    std::printf("wrote centroids [%u, %u, %lld, %lld] (%s) of version %llu to %s\n",
                model->num_layers(), model->num_kv_heads(), static_cast<long long>(first.shape(0)),
                static_cast<long long>(first.shape(1)), Bytes(all.size()).c_str(),
                static_cast<unsigned long long>((*tensors)[0].header.version()), out.c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("expected 'centroids upload' or 'centroids download'");
}

// l{L}_h{H}_{param}.npy
bool ParseClassifierFileName(const std::string& name, uint32_t* layer, uint32_t* head,
                             std::string* param) {
  absl::string_view s = name;
  if (!absl::ConsumeSuffix(&s, ".npy") || !absl::ConsumePrefix(&s, "l")) return false;
  std::vector<std::string> parts = absl::StrSplit(s, absl::MaxSplits('_', 2));
  if (parts.size() != 3 || parts[1].empty() || parts[1][0] != 'h') return false;
  return absl::SimpleAtoi(parts[0], layer) && absl::SimpleAtoi(parts[1].substr(1), head) &&
         !parts[2].empty() && (*param = parts[2], true);
}

absl::Status Cli::Classifier(Args& args) {
  const std::vector<std::string>& pos = args.positional();
  const std::string sub = pos.size() > 1 ? pos[1] : "";
  if (sub == "upload") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.PositionalUint(3, "VERSION");
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    std::vector<std::pair<std::string, v1::TensorKey>> files;
    const std::string dir = args.Get("dir");
    if (!dir.empty()) {
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        v1::TensorKey key;
        uint32_t layer, head;
        std::string param;
        if (!ParseClassifierFileName(entry.path().filename().string(), &layer, &head, &param)) {
          continue;
        }
        key.set_kind(v1::TENSOR_KIND_CLASSIFIER);
        key.set_layer(layer);
        key.set_head(head);
        key.set_name(param);
        files.emplace_back(entry.path().string(), key);
      }
      if (ec) return absl::NotFoundError(absl::StrCat("--dir: cannot list '", dir, "'"));
      if (files.empty()) {
        return absl::NotFoundError(
            absl::StrCat("--dir: no files named l{L}_h{H}_{param}.npy in '", dir, "'"));
      }
    } else {
      absl::StatusOr<std::string> file = args.PositionalString(4, "FILE (or --dir)");
      absl::StatusOr<uint64_t> layer = args.RequireUint("layer");
      absl::StatusOr<uint64_t> head = args.RequireUint("head");
      const std::string name = args.Get("name");
      if (!file.ok()) return file.status();
      if (!layer.ok()) return layer.status();
      if (!head.ok()) return head.status();
      if (name.empty()) return absl::InvalidArgumentError("--name=PARAM is required");
      v1::TensorKey key;
      key.set_kind(v1::TENSOR_KIND_CLASSIFIER);
      key.set_layer(*layer);
      key.set_head(*head);
      key.set_name(name);
      files.emplace_back(*file, key);
    }
    std::vector<TensorUpload> uploads;
    for (const auto& [path, key] : files) {
      absl::StatusOr<Fp32Tensor> npy = ReadFp32(path);
      if (!npy.ok()) return npy.status();
      uploads.push_back({key, npy->shape, std::move(npy->bytes)});
    }
    absl::StatusOr<v1::PutTensorsResponse> r = UploadTensors(*stub_, *id, *version, uploads);
    if (!r.ok()) return r.status();
    std::printf("uploaded %llu classifier parameters (%s) into version %llu of %s\n",
                static_cast<unsigned long long>(r->tensors_written()),
                Bytes(r->bytes_written()).c_str(), static_cast<unsigned long long>(*version),
                id->c_str());
    return absl::OkStatus();
  }
  if (sub == "download") {
    absl::StatusOr<std::string> id = args.PositionalString(2, "MODEL");
    absl::StatusOr<uint64_t> version = args.GetUint("version", 0);
    const std::string dir = args.Get("dir");
    std::optional<uint32_t> layer;
    if (args.Has("layer")) {
      absl::StatusOr<uint64_t> l = args.GetUint("layer", 0);
      if (!l.ok()) return l.status();
      layer = static_cast<uint32_t>(*l);
    }
    if (!id.ok()) return id.status();
    if (!version.ok()) return version.status();
    if (dir.empty()) return absl::InvalidArgumentError("--dir=DIR is required");
    absl::StatusOr<std::vector<DownloadedTensor>> tensors =
        Download(*id, *version, v1::TENSOR_KIND_CLASSIFIER, layer);
    if (!tensors.ok()) return tensors.status();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    uint64_t bytes = 0;
    for (const DownloadedTensor& t : *tensors) {
      const v1::TensorKey& k = t.header.key();
      std::vector<int64_t> shape(t.header.desc().shape().begin(), t.header.desc().shape().end());
      const std::string path =
          absl::StrCat(dir, "/l", k.layer(), "_h", k.head(), "_", k.name(), ".npy");
      absl::Status s = WriteFp32Npy(path, shape, t.bytes);
      if (!s.ok()) return s;
      bytes += t.bytes.size();
    }
    std::printf("wrote %zu classifier parameters (%s) to %s\n", tensors->size(),
                Bytes(bytes).c_str(), dir.c_str());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("expected 'classifier upload' or 'classifier download'");
}

absl::Status Cli::Watch(Args& args) {
  absl::StatusOr<std::string> id = args.PositionalString(1, "MODEL");
  absl::StatusOr<uint64_t> after = args.GetUint("after", 0);
  absl::StatusOr<uint64_t> count = args.GetUint("count", 0);
  if (!id.ok()) return id.status();
  if (!after.ok()) return after.status();
  if (!count.ok()) return count.status();
  grpc::ClientContext ctx;  // No deadline: watching is open-ended.
  v1::WatchPublishedRequest req;
  req.set_model_id(*id);
  req.set_after_version(*after);
  std::unique_ptr<grpc::ClientReader<v1::PublishedEvent>> reader = stub_->WatchPublished(&ctx, req);
  std::fprintf(stderr, "watching %s (after version %llu)...\n", id->c_str(),
               static_cast<unsigned long long>(*after));
  v1::PublishedEvent event;
  uint64_t seen = 0;
  while (reader->Read(&event)) {
    std::printf("%s version %llu published %s UTC\n", event.model_id().c_str(),
                static_cast<unsigned long long>(event.version()),
                Time(event.published_unix_ms()).c_str());
    std::fflush(stdout);
    if (*count != 0 && ++seen >= *count) {
      ctx.TryCancel();
      while (reader->Read(&event)) {
      }
      reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish());
}

absl::Status Cli::Backup(Args& args) {
  absl::StatusOr<std::string> dir = args.PositionalString(1, "DIR");
  if (!dir.ok()) return dir.status();
  v1::BackupRequest req;
  req.set_backup_dir(*dir);
  absl::StatusOr<v1::BackupResponse> r = Call(&v1::IndexService::Stub::Backup, req);
  if (!r.ok()) return r.status();
  std::printf("backup %u written to %s on the server (%s)\n", r->backup_id(), dir->c_str(),
              Bytes(r->size_bytes()).c_str());
  return absl::OkStatus();
}

absl::Status Cli::ListBackups(Args& args) {
  absl::StatusOr<std::string> dir = args.PositionalString(1, "DIR");
  if (!dir.ok()) return dir.status();
  v1::ListBackupsRequest req;
  req.set_backup_dir(*dir);
  absl::StatusOr<v1::ListBackupsResponse> r = Call(&v1::IndexService::Stub::ListBackups, req);
  if (!r.ok()) return r.status();
  std::printf("%6s  %-19s  %s\n", "ID", "TIME (UTC)", "SIZE");
  for (const v1::BackupResponse& b : r->backups()) {
    std::printf("%6u  %-19s  %s\n", b.backup_id(), Time(b.timestamp_unix() * 1000).c_str(),
                Bytes(b.size_bytes()).c_str());
  }
  if (r->backups().empty()) std::printf("(no backups)\n");
  return absl::OkStatus();
}

absl::Status Cli::Health(Args& args) {
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  absl::StatusOr<int> h = CheckHealth(channel_, "spattn.v1.IndexService", timeout_);
  if (!h.ok()) return h.status();
  std::printf("spattn.v1.IndexService: %s\n", *h >= 0 && *h < 4 ? kNames[*h] : "?");
  if (*h != 1) return absl::UnavailableError("the index service is not serving");
  return absl::OkStatus();
}

absl::Status Cli::Run(const std::string& command, Args& args) {
  if (command == "models") return Models(args);
  if (command == "versions") return Versions(args);
  if (command == "create-version") return CreateVersion(args);
  if (command == "seal") return Seal(args);
  if (command == "publish") return Publish(args);
  if (command == "delete-version") return DeleteVersion(args);
  if (command == "configs") return Configs(args);
  if (command == "centroids") return Centroids(args);
  if (command == "classifier") return Classifier(args);
  if (command == "watch") return Watch(args);
  if (command == "backup") return Backup(args);
  if (command == "list-backups") return ListBackups(args);
  if (command == "health") return Health(args);
  return absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'"));
}

bool IsUsageError(const absl::Status& s) {
  // Client-side argument problems are raised before any RPC, with these codes and no server.
  return s.code() == absl::StatusCode::kInvalidArgument &&
         (absl::StartsWith(s.message(), "--") || absl::StartsWith(s.message(), "unknown") ||
          absl::StartsWith(s.message(), "expected") ||
          absl::StrContains(s.message(), " is required"));
}

}  // namespace

absl::StatusOr<v1::PutHeadConfigsRequest> ParseMInferenceConfig(absl::string_view json) {
  google::protobuf::ListValue layers;
  absl::Status s = FromProtobuf(
      google::protobuf::util::JsonStringToMessage(std::string(json), &layers), "MInference JSON");
  if (!s.ok()) return s;
  v1::PutHeadConfigsRequest out;
  for (int l = 0; l < layers.values_size(); ++l) {
    const google::protobuf::Value& layer = layers.values(l);
    if (!layer.has_struct_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, ": expected an object {head: [pattern, v, s, score]}"));
    }
    // Heads sorted numerically (JSON object order is not guaranteed).
    std::map<uint32_t, const google::protobuf::Value*> heads;
    for (const auto& [key, value] : layer.struct_value().fields()) {
      uint32_t head;
      if (!absl::SimpleAtoi(key, &head)) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, ": head key is not a number"));
      }
      heads[head] = &value;
    }
    for (const auto& [head, value] : heads) {
      const std::string where = absl::StrCat("layer ", l, " head ", head);
      if (!value->has_list_value() || value->list_value().values_size() < 3 ||
          !value->list_value().values(0).has_string_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": expected [pattern, vertical_size, slash_size, score]"));
      }
      const auto& v = value->list_value().values();
      for (int i = 1; i < v.size(); ++i) {
        if (v[i].kind_case() != google::protobuf::Value::kNumberValue) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": entry ", i, " must be a number"));
        }
      }
      const std::string& pattern = v[0].string_value();
      const double vsize = v[1].number_value(), ssize = v[2].number_value();
      if (vsize < 0 || ssize < 0 || vsize > 1e9 || ssize > 1e9) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": sizes out of range"));
      }
      v1::HeadConfig* c = out.add_configs();
      c->set_layer(static_cast<uint32_t>(l));
      c->set_head(head);
      if (v.size() > 3) c->set_search_score(static_cast<float>(v[3].number_value()));
      v1::MethodConfig* m = c->mutable_method();
      if (pattern == "vertical_and_slash") {
        m->set_method(v1::METHOD_VERTICAL_SLASH);
        m->mutable_vertical_slash()->set_vertical_size(static_cast<int32_t>(vsize));
        m->mutable_vertical_slash()->set_slash_size(static_cast<int32_t>(ssize));
      } else if (pattern == "stream_llm") {
        m->set_method(v1::METHOD_A_SHAPE);
        m->mutable_a_shape()->set_sink_tokens(static_cast<int32_t>(vsize));
        m->mutable_a_shape()->set_local_tokens(static_cast<int32_t>(ssize));
      } else if (pattern == "block_sparse") {
        m->set_method(v1::METHOD_BLOCK_SPARSE);
        m->mutable_block_sparse()->set_top_k(static_cast<int32_t>(vsize));
      } else if (pattern == "dense") {
        m->set_method(v1::METHOD_DENSE);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": unknown pattern (expected vertical_and_slash, stream_llm, block_sparse)"));
      }
    }
  }
  return out;
}

absl::StatusOr<v1::PutHeadConfigsRequest> ParseSpattnConfig(absl::string_view json) {
  v1::GetHeadConfigsResponse parsed;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  absl::Status s =
      FromProtobuf(google::protobuf::util::JsonStringToMessage(std::string(json), &parsed, options),
                   "spattn config JSON");
  if (!s.ok()) return s;
  v1::PutHeadConfigsRequest out;
  *out.mutable_configs() = parsed.configs();
  return out;
}

int RunIndexCommand(int argc, char** argv) {
  absl::StatusOr<Args> args = Args::Parse(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "spattnctl index: %s\n\n%s", std::string(args.status().message()).c_str(),
                 kUsage);
    return 2;
  }
  if (args->positional().empty() || args->positional()[0] == "help" || args->GetBool("help")) {
    std::printf("%s", kUsage);
    return args->positional().empty() && !args->Has("help") ? 2 : 0;
  }
  const char* env = std::getenv("SPATTN_INDEX_ADDR");
  const std::string server = args->Get("server", env != nullptr ? env : "127.0.0.1:50061");
  absl::StatusOr<uint64_t> timeout = args->GetUint("timeout", 60);
  if (!timeout.ok()) {
    std::fprintf(stderr, "spattnctl index: %s\n", std::string(timeout.status().message()).c_str());
    return 2;
  }
  const char* token_env = std::getenv("SPATTN_TOKEN_FILE");
  absl::StatusOr<ClientSecurityOptions> security =
      ClientSecurityFromFlags(args->Get("tls_ca", ""), args->Get("tls_cert", ""),
                              args->Get("tls_key", ""), args->Get("tls_server_name", ""),
                              args->Get("token_file", token_env != nullptr ? token_env : ""));
  if (!security.ok()) {
    std::fprintf(stderr, "spattnctl index: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  Cli cli(server, absl::Seconds(*timeout), *security);
  absl::Status s = cli.Run(args->positional()[0], *args);
  if (s.ok()) s = args->CheckAllUsed();
  if (s.ok()) return 0;
  const bool usage = IsUsageError(s);
  std::fprintf(stderr, "spattnctl index %s: %s: %s\n", args->positional()[0].c_str(),
               absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
  if (usage) std::fprintf(stderr, "(run 'spattnctl index help' for usage)\n");
  return usage ? 2 : 1;
}

}  // namespace spattn
