#include "client/calibrate_command.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/flags.h"
#include "index/tensor_client.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/calibration/saap_calibration.h"
#include "kernels/io/tensor_io.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"
#include "kernels/workload/tensor_problem.h"
#include "kernels/workload/workload.h"
#include "proto/grpc_security.h"
#include "proto/grpc_status.h"
#include "proto/method_config_convert.h"
#include "server/convert.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

constexpr char kUsage[] = R"(usage: spattnctl calibrate [flags]

Chooses every head's sparse-attention method offline, once per model: the kernel-aware pattern
search of MInference (Alg. 1) picks, per head, the cheapest candidate config (kernel pairs + index
build work) whose attention-mass recall on the calibration prompts reaches the target, dense when
none does; then writes and/or publishes the choices.

Input, one of:
  synthetic (default): --workload=llm_mix|<head kind> --seq_len=8192 --q_heads=32 --kv_heads=8
      --head_dim=128 --seed=1 [--model_seed=SEED] [--draws=1] [--rope_theta=500000]
      [--concentration=1] [--holdout_seed=S]
      Layer L is prompt seed+L through model model_seed+L; --draws=N adds prompts
      seed+L+1000*i; --holdout_seed also scores the choices on prompt S+L (printed only).
  captured: --q=Q --k=K --v=V   .npy or .safetensors[:name]; "{layer}" in a path becomes the
      layer number; comma-separated lists give several prompts per layer
      [--layout=auto|thd|hsd|bhsd] [--non_causal] [--softmax_scale=S]
  [--dtype=bf16|fp16|fp32]   (synthetic default bf16; captured default: the file's)
      [--length_buckets=L1,L2,..]  one search per length (instead of --seq_len): each bucket's
      configs serve prompts from the geometric middle to the previous length on (HeadConfig
      min_tokens: 0, sqrt(L1*L2), ...); the worker picks by the request's longest sequence
Layers: --layers=N (layers 0..N-1; default 1) or a list, --layers=0,3,5-7
Search:
  --target_recall=0.95     recall every chosen config must reach on every calibration prompt
  --candidates=auto        auto (default): per search by its calibration length (each
                           --length_buckets bucket by its own), sampled_lines alone with
                           --sampled_lines_margin 0.01 up to --auto_max_len tokens, all
                           above; all: every method but saap (the default before session 27);
                           or a list: a_shape, vertical_slash, block_sparse, flex_prefill,
                           sample_attention, anchor, saap, sampled_lines. With auto and all,
                           --publish adds saap where the published version holds the layer's
                           Saap assets, on the heads that have a classifier
  --auto_max_len=131072    with --candidates=auto: the longest calibration length searched
                           with sampled_lines alone
  --sample_rows=256        query rows per prompt over which recall is computed exactly
  --build_cost_weight=1    weight of the modeled index-build work against kernel pairs
  --sampled_lines_margin=0 with --candidates=all or a list: search sampled_lines at gamma >=
                           the worker's guard's gamma for the target with this margin (its
                           margin is 0.01: 0.96 at 0.95), not below (0 = the candidates' own
                           gammas)
  --block_m=64             query rows per index block: the worker's --block_m
  --sampled_lines_block_m=128
                           query rows per sampled_lines index block: the worker's
                           --sampled_lines_block_m (0 = --block_m)
  --threads=0              CPU threads (0 = all cores)
  saap calibrates centroids and classifiers per layer first (slow on long prompts):
  [--saap_centroids=256] [--saap_hidden=256] [--saap_steps=300]
Output (the per-head table is always printed):
  --out=FILE.json          the choices as spattn JSON (`spattnctl index configs import`)
  --publish --model=ID     a new version of model ID (create the model first with `spattnctl
                           index models put`): based on the published version (other layers
                           keep their configs), searched layers replaced, Saap tensors
                           uploaded, sealed and published with compare-and-set
      [--server=HOST:PORT]   default $SPATTN_INDEX_ADDR, else 127.0.0.1:50061
      [--tls_ca=CA.pem --tls_cert=C.pem --tls_key=C.key --tls_server_name=N --token_file=F]
      [--expect=VERSION]     published version to replace (default: the one read at start)
      [--description=TEXT] [--timeout=60]
)";

// ---- Flags (client/flags.h); every flag must be read (typos fail).

class Flags {
 public:
  static absl::StatusOr<Flags> Parse(int argc, char** argv) {
    CommandLine::Options options;
    options.boolean = {"publish", "non_causal"};
    SPATTN_ASSIGN_OR_RETURN(CommandLine line, CommandLine::Parse(argc, argv, options));
    bool help = false;
    for (const std::string& word : line.positional()) {
      if (word != "help") {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", word, "'"));
      }
      help = true;
    }
    return Flags(std::move(line), help);
  }

  bool help() const { return help_ || line_.Has("help"); }
  bool Has(const std::string& name) const { return line_.Has(name); }
  std::string Get(const std::string& name, const std::string& def) { return line_.Get(name, def); }
  bool GetBool(const std::string& name) { return line_.Bool(name).value_or(true); }
  template <typename T>
  absl::StatusOr<T> GetNumber(const std::string& name, T def) {
    return line_.Value<T>(name, def);
  }
  absl::Status CheckAllUsed() const { return line_.CheckAllUsed(); }

 private:
  Flags(CommandLine line, bool help) : line_(std::move(line)), help_(help) {}
  CommandLine line_;
  bool help_ = false;
};

// ---- Options.

struct Options {
  // Input.
  bool captured = false;
  std::vector<std::string> q_specs, k_specs, v_specs;
  TensorProblemOptions tensor_options;
  WorkloadOptions workload;  // shape, workload name, RoPE, concentration; seeds set per layer
  uint64_t seed = 1;
  std::optional<uint64_t> model_seed;
  int draws = 1;
  std::optional<uint64_t> holdout_seed;
  bool rope_theta_given = false;
  std::vector<int> layers;
  // Search.
  std::vector<Method> methods;
  bool candidates_all = false;  // --candidates=all: Saap joins where the layer has assets
  // --candidates=auto (the default): each search's candidates and sampled_lines margin follow
  // its calibration length (AutoCandidatesForLength; `methods` is then empty); Saap joins where
  // the layer has assets, as with all.
  bool candidates_auto = false;
  int64_t auto_max_len = kAutoSampledLinesMaxTokens;  // --auto_max_len
  // --length_buckets: calibration lengths, ascending (synthetic input); empty = --seq_len only.
  std::vector<int> bucket_lens;
  PatternSearchOptions search;
  SaapCalibrationOptions saap;
  // Output.
  std::string out;
  bool publish = false;
  std::string model, server, description;
  ClientSecurityOptions security;  // --tls_* / --token_file for --publish.
  std::optional<uint64_t> expect;
  int timeout_s = 60;
};

absl::StatusOr<std::vector<int>> ParseLayers(const std::string& spec) {
  std::set<int> layers;
  const bool list = spec.find_first_of(",-") != std::string::npos;
  if (!list) {
    int n;
    if (!absl::SimpleAtoi(spec, &n) || n < 1 || n > 100000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers: expected a layer count >= 1 or a list like 0,3,5-7, got '", spec, "'"));
    }
    for (int l = 0; l < n; ++l) layers.insert(l);
  } else {
    for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
      std::vector<std::string> ends = absl::StrSplit(part, '-');
      int lo, hi;
      if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &lo) ||
          !absl::SimpleAtoi(ends.back(), &hi) || lo < 0 || hi < lo || hi > 100000) {
        return absl::InvalidArgumentError(
            absl::StrCat("--layers: bad entry '", part, "' (expected L or L1-L2)"));
      }
      for (int l = lo; l <= hi; ++l) layers.insert(l);
    }
    if (layers.empty()) return absl::InvalidArgumentError("--layers: no layer given");
  }
  return std::vector<int>(layers.begin(), layers.end());
}

absl::StatusOr<Options> ParseOptions(Flags& f) {
  Options o;
  // Input.
  o.captured = f.Has("q") || f.Has("k") || f.Has("v");
  std::optional<DType> dtype;
  if (f.Has("dtype")) {
    SPATTN_ASSIGN_OR_RETURN(DType t, ParseDType(f.Get("dtype", "")));
    dtype = t;
  }
  SPATTN_ASSIGN_OR_RETURN(double rope_theta, f.GetNumber<double>("rope_theta", 500000.0));
  o.rope_theta_given = f.Has("rope_theta");
  if (!(rope_theta > 1)) return absl::InvalidArgumentError("--rope_theta: must be > 1");
  o.workload.rope_theta = rope_theta;
  if (o.captured) {
    if (!f.Has("q") || !f.Has("k") || !f.Has("v")) {
      return absl::InvalidArgumentError("--q, --k and --v go together");
    }
    o.q_specs = absl::StrSplit(f.Get("q", ""), ',', absl::SkipEmpty());
    o.k_specs = absl::StrSplit(f.Get("k", ""), ',', absl::SkipEmpty());
    o.v_specs = absl::StrSplit(f.Get("v", ""), ',', absl::SkipEmpty());
    if (o.q_specs.empty() || o.q_specs.size() != o.k_specs.size() ||
        o.q_specs.size() != o.v_specs.size()) {
      return absl::InvalidArgumentError(
          "--q, --k and --v: need the same number of comma-separated paths (one per prompt)");
    }
    SPATTN_ASSIGN_OR_RETURN(o.tensor_options.layout, ParseTensorLayout(f.Get("layout", "auto")));
    o.tensor_options.dtype = dtype;
    o.tensor_options.causal = !f.GetBool("non_causal");
    SPATTN_ASSIGN_OR_RETURN(double scale, f.GetNumber<double>("softmax_scale", 0.0));
    o.tensor_options.softmax_scale = static_cast<float>(scale);
    for (const char* synthetic_only :
         {"workload", "seq_len", "q_heads", "kv_heads", "head_dim", "seed", "model_seed", "draws",
          "holdout_seed", "concentration", "length_buckets"}) {
      if (f.Has(synthetic_only)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", synthetic_only, " is for synthetic input, not with --q/--k/--v"));
      }
    }
  } else {
    for (const char* captured_only : {"layout", "non_causal", "softmax_scale"}) {
      if (f.Has(captured_only)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", captured_only, " is for captured tensors (--q/--k/--v)"));
      }
    }
    o.workload.workload = f.Get("workload", "llm_mix");
    SPATTN_ASSIGN_OR_RETURN(int seq_len, f.GetNumber<int>("seq_len", 8192));
    SPATTN_ASSIGN_OR_RETURN(o.workload.shape.num_q_heads, f.GetNumber<int>("q_heads", 32));
    SPATTN_ASSIGN_OR_RETURN(o.workload.shape.num_kv_heads, f.GetNumber<int>("kv_heads", 8));
    SPATTN_ASSIGN_OR_RETURN(o.workload.shape.head_dim, f.GetNumber<int>("head_dim", 128));
    if (seq_len < 1 || seq_len > (1 << 24)) {
      return absl::InvalidArgumentError("--seq_len: must be in [1, 16777216]");
    }
    if (o.workload.shape.num_q_heads < 1 || o.workload.shape.num_kv_heads < 1 ||
        o.workload.shape.num_q_heads % o.workload.shape.num_kv_heads != 0) {
      return absl::InvalidArgumentError(
          "--q_heads, --kv_heads: must be >= 1 and q_heads a multiple of kv_heads");
    }
    o.workload.shape.q_lens = {seq_len};
    if (f.Has("length_buckets")) {
      for (absl::string_view w :
           absl::StrSplit(f.Get("length_buckets", ""), ',', absl::SkipWhitespace())) {
        int len = 0;
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(w), &len) || len < 64 || len > (1 << 24) ||
            (!o.bucket_lens.empty() && len <= o.bucket_lens.back())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--length_buckets: '", w, "' (expected ascending token counts in [64, 16777216])"));
        }
        o.bucket_lens.push_back(len);
      }
      if (o.bucket_lens.empty()) return absl::InvalidArgumentError("--length_buckets: empty");
    }
    o.workload.shape.dtype = dtype.value_or(DType::kBF16);
    SPATTN_ASSIGN_OR_RETURN(o.workload.concentration, f.GetNumber<double>("concentration", 1.0));
    SPATTN_ASSIGN_OR_RETURN(o.seed, f.GetNumber<uint64_t>("seed", 1));
    if (f.Has("model_seed")) {
      SPATTN_ASSIGN_OR_RETURN(uint64_t m, f.GetNumber<uint64_t>("model_seed", 0));
      o.model_seed = m;
    }
    if (f.Has("holdout_seed")) {
      SPATTN_ASSIGN_OR_RETURN(uint64_t h, f.GetNumber<uint64_t>("holdout_seed", 0));
      o.holdout_seed = h;
    }
    SPATTN_ASSIGN_OR_RETURN(o.draws, f.GetNumber<int>("draws", 1));
    if (o.draws < 1 || o.draws > 64)
      return absl::InvalidArgumentError("--draws: must be in [1, 64]");
  }
  SPATTN_ASSIGN_OR_RETURN(o.layers, ParseLayers(f.Get("layers", "1")));

  // Search.
  const std::string candidates = f.Get("candidates", kAutoCandidates);
  o.candidates_auto = IsAutoCandidates(candidates);
  if (!o.candidates_auto) {
    SPATTN_ASSIGN_OR_RETURN(o.methods, ParseCandidateMethods(candidates));
    o.candidates_all = absl::AsciiStrToLower(candidates) == "all";
  }
  SPATTN_ASSIGN_OR_RETURN(o.search.target_recall, f.GetNumber<double>("target_recall", 0.95));
  if (!(o.search.target_recall > 0 && o.search.target_recall <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target_recall: must be in (0, 1], got ", o.search.target_recall));
  }
  SPATTN_ASSIGN_OR_RETURN(o.search.sample_rows, f.GetNumber<int>("sample_rows", 256));
  if (o.search.sample_rows < 1) return absl::InvalidArgumentError("--sample_rows: must be >= 1");
  SPATTN_ASSIGN_OR_RETURN(o.search.build_cost_weight,
                          f.GetNumber<double>("build_cost_weight", 1.0));
  if (!(o.search.build_cost_weight >= 0)) {
    return absl::InvalidArgumentError("--build_cost_weight: must be >= 0");
  }
  SPATTN_ASSIGN_OR_RETURN(o.search.sampled_lines_margin,
                          f.GetNumber<double>("sampled_lines_margin", 0.0));
  if (!(o.search.sampled_lines_margin >= 0) || std::isinf(o.search.sampled_lines_margin)) {
    return absl::InvalidArgumentError(absl::StrCat("--sampled_lines_margin: must be finite and >= 0, got ",
                                                   o.search.sampled_lines_margin));
  }
  SPATTN_ASSIGN_OR_RETURN(o.auto_max_len,
                          f.GetNumber<int64_t>("auto_max_len", kAutoSampledLinesMaxTokens));
  if (o.auto_max_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auto_max_len: must be >= 1 token, got ", o.auto_max_len));
  }
  if (f.Has("auto_max_len") && !o.candidates_auto) {
    return absl::InvalidArgumentError("--auto_max_len: only with --candidates=auto");
  }
  if (o.candidates_auto && f.Has("sampled_lines_margin")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sampled_lines_margin: not with --candidates=auto (the default), which sets it per "
        "calibration length (",
        kAutoSampledLinesMargin, " up to ", o.auto_max_len,
        " tokens, 0 above); give --candidates=all or a list with it"));
  }
  SPATTN_ASSIGN_OR_RETURN(o.search.block_m, f.GetNumber<int>("block_m", 64));
  if (o.search.block_m < 1) return absl::InvalidArgumentError("--block_m: must be >= 1");
  SPATTN_ASSIGN_OR_RETURN(o.search.sampled_lines_block_m,
                          f.GetNumber<int>("sampled_lines_block_m", 128));
  if (o.search.sampled_lines_block_m < 0 || o.search.sampled_lines_block_m % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sampled_lines_block_m: must be 0 or a positive multiple of 16 (the worker's rule), got ",
        o.search.sampled_lines_block_m));
  }
  SPATTN_ASSIGN_OR_RETURN(int threads, f.GetNumber<int>("threads", 0));
  if (threads < 0) return absl::InvalidArgumentError("--threads: must be >= 0");
  SetCpuThreads(threads);
  SPATTN_ASSIGN_OR_RETURN(o.saap.kmeans.num_centroids, f.GetNumber<int>("saap_centroids", 256));
  SPATTN_ASSIGN_OR_RETURN(o.saap.classifier.hidden, f.GetNumber<int>("saap_hidden", 256));
  SPATTN_ASSIGN_OR_RETURN(o.saap.classifier.steps, f.GetNumber<int>("saap_steps", 300));

  // Output.
  o.out = f.Get("out", "");
  o.publish = f.GetBool("publish");
  o.model = f.Get("model", "");
  const char* env = std::getenv("SPATTN_INDEX_ADDR");
  o.server = f.Get("server", env != nullptr ? env : "127.0.0.1:50061");
  o.description = f.Get("description", "");
  {
    const char* token_env = std::getenv("SPATTN_TOKEN_FILE");
    SPATTN_ASSIGN_OR_RETURN(
        o.security,
        ClientSecurityFromFlags(f.Get("tls_ca", ""), f.Get("tls_cert", ""), f.Get("tls_key", ""),
                                f.Get("tls_server_name", ""),
                                f.Get("token_file", token_env != nullptr ? token_env : "")));
  }
  SPATTN_ASSIGN_OR_RETURN(o.timeout_s, f.GetNumber<int>("timeout", 60));
  if (o.timeout_s < 1) return absl::InvalidArgumentError("--timeout: must be >= 1 second");
  if (f.Has("expect")) {
    SPATTN_ASSIGN_OR_RETURN(uint64_t e, f.GetNumber<uint64_t>("expect", 0));
    o.expect = e;
  }
  if (o.publish && o.model.empty()) {
    return absl::InvalidArgumentError("--publish needs --model=ID");
  }
  if (!o.publish && (f.Has("model") || f.Has("expect"))) {
    return absl::InvalidArgumentError("--model and --expect go with --publish");
  }
  return o;
}

// ---- Calibration inputs of one layer.

struct LayerInput {
  std::vector<Workload> workloads;                  // synthetic prompts
  std::vector<std::unique_ptr<HostProblem>> owned;  // captured prompts
  std::vector<const AttentionProblem*> problems;
  std::vector<HeadKind> kinds;        // synthetic: the planted kind per q head
  std::unique_ptr<Workload> holdout;  // synthetic, with --holdout_seed
};

absl::StatusOr<Workload> Synthetic(const Options& o, uint64_t seed, uint64_t model_seed) {
  WorkloadOptions w = o.workload;
  w.seed = seed;
  w.model_seed = model_seed;
  return GenerateWorkload(w);
}

absl::StatusOr<LayerInput> LoadLayer(const Options& o, int layer) {
  LayerInput in;
  if (o.captured) {
    const std::string l = absl::StrCat(layer);
    for (size_t i = 0; i < o.q_specs.size(); ++i) {
      const std::string q = absl::StrReplaceAll(o.q_specs[i], {{"{layer}", l}});
      const std::string k = absl::StrReplaceAll(o.k_specs[i], {{"{layer}", l}});
      const std::string v = absl::StrReplaceAll(o.v_specs[i], {{"{layer}", l}});
      SPATTN_ASSIGN_OR_RETURN(HostTensor qt, ReadTensorSpec(q));
      SPATTN_ASSIGN_OR_RETURN(HostTensor kt, ReadTensorSpec(k));
      SPATTN_ASSIGN_OR_RETURN(HostTensor vt, ReadTensorSpec(v));
      absl::StatusOr<std::unique_ptr<HostProblem>> p =
          ProblemFromTensors(qt, kt, vt, o.tensor_options);
      if (!p.ok()) {
        return absl::Status(p.status().code(),
                            absl::StrCat("layer ", layer, " (", q, "): ", p.status().message()));
      }
      in.problems.push_back(&(*p)->problem());
      in.owned.push_back(std::move(*p));
    }
    return in;
  }
  const uint64_t seed = o.seed + layer;
  const uint64_t model_seed = o.model_seed.value_or(o.seed) + layer;
  for (int d = 0; d < o.draws; ++d) {
    SPATTN_ASSIGN_OR_RETURN(Workload w, Synthetic(o, seed + 1000ull * d, model_seed));
    in.workloads.push_back(std::move(w));
  }
  for (const Workload& w : in.workloads) in.problems.push_back(&w.problem());
  for (const HeadPlan& plan : in.workloads[0].heads) in.kinds.push_back(plan.kind);
  if (o.holdout_seed) {
    SPATTN_ASSIGN_OR_RETURN(Workload w, Synthetic(o, *o.holdout_seed + layer, model_seed));
    in.holdout = std::make_unique<Workload>(std::move(w));
  }
  return in;
}

// ---- Table.

std::string Params(const MethodConfig& c) {
  switch (c.method) {
    case Method::kDense:
      return "-";
    case Method::kAShape:
      return absl::StrCat("sink=", c.a_shape.sink_tokens, " local=", c.a_shape.local_tokens);
    case Method::kVerticalSlash:
      return absl::StrCat("vertical=", c.vertical_slash.vertical_size,
                          " slash=", c.vertical_slash.slash_size);
    case Method::kBlockSparse:
      return absl::StrCat("top_k=", c.block_sparse.top_k, " block=", c.block_sparse.block_size);
    case Method::kFlexPrefill:
      return absl::StrCat("gamma=", c.flex_prefill.gamma, " tau=", c.flex_prefill.tau);
    case Method::kSampleAttention:
      return absl::StrCat("alpha_c=", c.sample_attention.alpha_c,
                          " alpha_s=", c.sample_attention.alpha_s);
    case Method::kAnchor:
      return absl::StrCat("theta=", c.anchor.theta);
    case Method::kSaap:
      return absl::StrCat("top_l=", c.saap.top_l, " C=", c.saap.num_centroids);
    case Method::kSampledLines:
      return absl::StrCat("gamma=", c.sampled_lines.gamma,
                          " rows_per_block=", c.sampled_lines.rows_per_block);
  }
  return "?";
}

// ---- Saap tensors in the layout the worker reads (server/convert.cc AddTensorToAssets):
// centroids per (layer, kv head) [C, head_dim]; classifier parameters per (layer, q head)
// w<i> [in, out] and b<i> [out].

std::vector<TensorUpload> SaapUploads(int layer, const LayerAssets& assets,
                                      const std::set<int>& q_heads, int group, int head_dim) {
  std::vector<TensorUpload> out;
  std::set<int> kv_heads;
  for (int h : q_heads) kv_heads.insert(h / group);
  for (int kv : kv_heads) {
    TensorUpload t;
    t.key.set_kind(v1::TENSOR_KIND_CENTROIDS);
    t.key.set_layer(static_cast<uint32_t>(layer));
    t.key.set_head(static_cast<uint32_t>(kv));
    t.shape = {assets.num_centroids, head_dim};
    t.bytes = FloatsToBytes(assets.centroids[kv]);
    out.push_back(std::move(t));
  }
  for (int h : q_heads) {
    const std::vector<DenseLayerWeights>& mlp = assets.classifiers[h];
    for (size_t i = 0; i < mlp.size(); ++i) {
      TensorUpload w;
      w.key.set_kind(v1::TENSOR_KIND_CLASSIFIER);
      w.key.set_layer(static_cast<uint32_t>(layer));
      w.key.set_head(static_cast<uint32_t>(h));
      w.key.set_name(absl::StrCat("w", i));
      w.shape = {mlp[i].in, mlp[i].out};
      w.bytes = FloatsToBytes(mlp[i].weight);
      TensorUpload b = w;
      b.key.set_name(absl::StrCat("b", i));
      b.shape = {mlp[i].out};
      b.bytes = FloatsToBytes(mlp[i].bias);
      out.push_back(std::move(w));
      out.push_back(std::move(b));
    }
  }
  return out;
}

// ---- The index service side of --publish.

class Publisher {
 public:
  Publisher(const std::string& server, const ClientSecurityOptions& security, int timeout_s)
      : timeout_s_(timeout_s) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    // Validated when the flags were read (ClientSecurityFromFlags).
    stub_ = v1::IndexService::NewStub(MakeChannel(server, security, args).value());
  }

  // Reads the model and its published version (the default compare-and-set expectation).
  absl::Status Begin(const std::string& model_id) {
    model_id_ = model_id;
    v1::GetModelRequest req;
    req.set_model_id(model_id);
    absl::StatusOr<v1::Model> m = Call(&v1::IndexService::Stub::GetModel, req);
    if (!m.ok()) {
      if (m.status().code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(
            absl::StrCat("model '", model_id,
                         "' not found in the index service; create it first with "
                         "`spattnctl index models put --model=",
                         model_id, " ...`"));
      }
      return m.status();
    }
    model_ = *m;
    v1::ListVersionsRequest lv;
    lv.set_model_id(model_id);
    SPATTN_ASSIGN_OR_RETURN(v1::ListVersionsResponse versions,
                            Call(&v1::IndexService::Stub::ListVersions, lv));
    published_ = versions.published_version();
    return absl::OkStatus();
  }

  const v1::Model& model() const { return model_; }
  uint64_t published() const { return published_; }

  // The Saap assets (centroids, classifiers of the heads that have one) the published version
  // holds for `layer`; num_centroids 0 when it holds none.
  absl::StatusOr<LayerAssets> PublishedAssets(int layer) {
    LayerAssets assets;
    assets.rope_theta = model_.rope_theta() > 0 ? model_.rope_theta() : assets.rope_theta;
    if (published_ == 0) return assets;
    SPATTN_ASSIGN_OR_RETURN(
        ModelConfig mc, ModelConfigFromProto(model_, published_,
                                             google::protobuf::RepeatedPtrField<v1::HeadConfig>()));
    v1::GetTensorsRequest req;
    req.set_model_id(model_id_);
    req.set_version(published_);
    req.set_layer(static_cast<uint32_t>(layer));
    auto got = DownloadTensors(*stub_, req);
    if (absl::IsNotFound(got.status())) return assets;
    if (!got.ok()) return got.status();
    if (got->empty()) return assets;
    // Centroids first (classifier shapes are checked against them).
    for (bool centroids : {true, false}) {
      for (const DownloadedTensor& t : *got) {
        if ((t.header.key().kind() == v1::TENSOR_KIND_CENTROIDS) != centroids) continue;
        SPATTN_RETURN_IF_ERROR(AddTensorToAssets(t.header, t.bytes, mc, &assets));
      }
    }
    SPATTN_RETURN_IF_ERROR(FinishAssets(mc, &assets));
    return assets;
  }

  // The calibration must match the model's shape and layer count.
  absl::Status CheckShape(const AttentionProblem& p, const std::vector<int>& layers) const {
    if (static_cast<int>(model_.num_q_heads()) != p.num_q_heads ||
        static_cast<int>(model_.num_kv_heads()) != p.num_kv_heads ||
        static_cast<int>(model_.head_dim()) != p.head_dim) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", model_id_, "' has ", model_.num_q_heads(), " q heads, ", model_.num_kv_heads(),
          " kv heads, head_dim ", model_.head_dim(), "; the calibration input has ", p.num_q_heads,
          ", ", p.num_kv_heads, ", ", p.head_dim));
    }
    for (int l : layers) {
      if (l >= static_cast<int>(model_.num_layers())) {
        return absl::FailedPreconditionError(absl::StrCat("--layers: layer ", l, " is past model '",
                                                          model_id_, "' (", model_.num_layers(),
                                                          " layers)"));
      }
    }
    return absl::OkStatus();
  }

  // Creates a version based on `base`, writes the configs and tensors, seals and publishes it
  // expecting `expect` to be current. Returns the new version.
  absl::StatusOr<v1::PublishVersionResponse> Publish(uint64_t base, uint64_t expect,
                                                     const std::string& description,
                                                     const std::vector<v1::HeadConfig>& configs,
                                                     const std::vector<TensorUpload>& tensors) {
    v1::CreateVersionRequest cv;
    cv.set_model_id(model_id_);
    cv.set_base_version(base);
    cv.set_description(description);
    SPATTN_ASSIGN_OR_RETURN(v1::VersionInfo created,
                            Call(&v1::IndexService::Stub::CreateVersion, cv));
    const uint64_t version = created.version();
    std::printf("created version %llu of %s (base %llu)\n",
                static_cast<unsigned long long>(version), model_id_.c_str(),
                static_cast<unsigned long long>(base));
    auto failed = [&](const absl::Status& s, const char* step) {
      return absl::Status(
          s.code(), absl::StrCat(step, " version ", version, ": ", s.message(),
                                 " (the version is left unpublished; remove it with `spattnctl "
                                 "index delete-version ",
                                 model_id_, " ", version, "`)"));
    };
    v1::PutHeadConfigsRequest put;
    put.set_model_id(model_id_);
    put.set_version(version);
    for (const v1::HeadConfig& c : configs) *put.add_configs() = c;
    absl::StatusOr<v1::PutHeadConfigsResponse> written =
        Call(&v1::IndexService::Stub::PutHeadConfigs, put);
    if (!written.ok()) return failed(written.status(), "writing head configs into");
    if (!tensors.empty()) {
      absl::StatusOr<v1::PutTensorsResponse> up =
          UploadTensors(*stub_, model_id_, version, tensors);
      if (!up.ok()) return failed(up.status(), "uploading Saap tensors into");
      std::printf("uploaded %llu Saap tensors (%llu bytes)\n",
                  static_cast<unsigned long long>(up->tensors_written()),
                  static_cast<unsigned long long>(up->bytes_written()));
    }
    v1::SealVersionRequest seal;
    seal.set_model_id(model_id_);
    seal.set_version(version);
    absl::StatusOr<v1::VersionInfo> sealed = Call(&v1::IndexService::Stub::SealVersion, seal);
    if (!sealed.ok()) return failed(sealed.status(), "sealing");
    v1::PublishVersionRequest pub;
    pub.set_model_id(model_id_);
    pub.set_version(version);
    pub.set_expected_current_version(expect);
    absl::StatusOr<v1::PublishVersionResponse> published =
        Call(&v1::IndexService::Stub::PublishVersion, pub);
    if (!published.ok()) {
      if (published.status().code() == absl::StatusCode::kAborted) {
        return absl::AbortedError(absl::StrCat(
            "publishing version ", version, ": ", published.status().message(), ". Version ",
            version, " stays sealed: publish it with `spattnctl index publish ", model_id_, " ",
            version, " --expect=CURRENT` if it should still win"));
      }
      return failed(published.status(), "publishing");
    }
    return *published;
  }

 private:
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::IndexService::Stub::*method)(grpc::ClientContext*,
                                                                           const Req&, Resp*),
                            const Req& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s_));
    Resp response;
    grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  int timeout_s_;
  std::unique_ptr<v1::IndexService::Stub> stub_;
  std::string model_id_;
  v1::Model model_;
  uint64_t published_ = 0;
};

// ---- The command.

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status Run(Options& o) {
  const auto t_start = std::chrono::steady_clock::now();
  std::unique_ptr<Publisher> publisher;
  uint64_t expect = 0;
  if (o.publish) {
    publisher = std::make_unique<Publisher>(o.server, o.security, o.timeout_s);
    SPATTN_RETURN_IF_ERROR(publisher->Begin(o.model));
    expect = o.expect.value_or(publisher->published());
    std::printf("model %s: %u layers, published version %llu\n", o.model.c_str(),
                publisher->model().num_layers(),
                static_cast<unsigned long long>(publisher->published()));
    if (o.captured && !o.rope_theta_given && publisher->model().rope_theta() > 1) {
      o.workload.rope_theta = publisher->model().rope_theta();
    }
  }
  const bool want_saap =
      std::find(o.methods.begin(), o.methods.end(), Method::kSaap) != o.methods.end();
  if (want_saap && o.captured && !o.rope_theta_given && !o.publish) {
    return absl::InvalidArgumentError(
        "--candidates with saap on captured tensors needs --rope_theta (or --publish, which "
        "reads the model's) to undo RoPE");
  }

  if (want_saap && o.bucket_lens.size() > 1) {
    return absl::InvalidArgumentError(
        "--length_buckets with saap candidates: the worker holds one Saap asset set per layer; "
        "calibrate Saap once (one length), then the buckets with --candidates=all --publish "
        "reuse its published assets");
  }
  std::vector<v1::HeadConfig> configs;
  std::vector<TensorUpload> tensors;
  std::map<std::string, int> method_count;
  double density_sum = 0;
  int heads_total = 0;
  // Length buckets: (calibration length, min_tokens) per search; one search at --seq_len (or the
  // captured length) with min_tokens 0 without them.
  std::vector<std::pair<int, uint32_t>> buckets;
  for (size_t b = 0; b < o.bucket_lens.size(); ++b) {
    const uint32_t from =
        b == 0
            ? 0
            : static_cast<uint32_t>(std::sqrt(double{1} * o.bucket_lens[b - 1] * o.bucket_lens[b]));
    buckets.push_back({o.bucket_lens[b], from});
  }
  if (buckets.empty()) buckets.push_back({0, 0});
  for (size_t lb = 0; lb < o.layers.size() * buckets.size(); ++lb) {
    const size_t li = lb / buckets.size();
    const int layer = o.layers[li];
    const uint32_t min_tokens = buckets[lb % buckets.size()].second;
    Options ob = o;
    if (buckets[lb % buckets.size()].first > 0) {
      ob.workload.shape.q_lens = {buckets[lb % buckets.size()].first};
      std::printf("layer %d: length bucket from %u tokens, calibrated at %d\n", layer, min_tokens,
                  buckets[lb % buckets.size()].first);
    }
    auto t0 = std::chrono::steady_clock::now();
    SPATTN_ASSIGN_OR_RETURN(LayerInput in, LoadLayer(ob, layer));
    const AttentionProblem& p0 = *in.problems[0];
    if (publisher) SPATTN_RETURN_IF_ERROR(publisher->CheckShape(p0, o.layers));
    // The calibration length the configs record (the longest calibration sequence): a worker
    // scales their key-count budgets to the length it serves (HeadConfig.calibrated_tokens).
    uint32_t calibrated_tokens = 0;
    for (const AttentionProblem* p : in.problems) {
      for (int b = 0; b < p->batch(); ++b) {
        calibrated_tokens = std::max(calibrated_tokens, static_cast<uint32_t>(p->k_len(b)));
      }
    }
    std::printf(
        "layer %d: %zu prompt(s) of %d tokens, %d q / %d kv heads, head_dim %d "
        "(loaded in %.1f s); configs record calibrated_tokens %u\n",
        layer, in.problems.size(), p0.total_k(), p0.num_q_heads, p0.num_kv_heads, p0.head_dim,
        SecondsSince(t0), calibrated_tokens);

    // Saap learns its centroids and classifiers on the first prompt before it can compete.
    LayerAssets assets;
    assets.rope_theta = o.workload.rope_theta;
    const LayerAssets* maybe_assets = nullptr;
    if (want_saap) {
      t0 = std::chrono::steady_clock::now();
      SaapCalibrationOptions saap = o.saap;
      absl::Status s = CalibrateSaap(p0, saap, &assets, nullptr);
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("layer ", layer, ": saap calibration: ", s.message()));
      }
      maybe_assets = &assets;
      std::printf("layer %d: saap calibrated (%d centroids) in %.1f s\n", layer,
                  assets.num_centroids, SecondsSince(t0));
    }
    std::vector<Method> methods = o.methods;
    bool candidates_all = o.candidates_all;
    PatternSearchOptions search = o.search;
    if (o.candidates_auto) {
      // This search's candidates by its own calibration length (a bucket's, or the prompt's).
      SPATTN_ASSIGN_OR_RETURN(const CandidateChoice choice,
                              AutoCandidatesForLength(calibrated_tokens, o.auto_max_len));
      methods = choice.methods;
      candidates_all = choice.all;
      search.sampled_lines_margin = choice.sampled_lines_margin;
      std::printf("layer %d: candidates auto at %u tokens: %s\n", layer, calibrated_tokens,
                  CandidateChoiceLabel(choice).c_str());
    }
    if (!want_saap && (candidates_all || o.candidates_auto) && publisher) {
      // Saap in the search by default when the layer has assets (issue 11 item 6): those the
      // published version holds (heads without a classifier skip Saap); with auto next to
      // whatever auto picked (sampled_lines alone up to --auto_max_len, all above).
      absl::StatusOr<LayerAssets> published = publisher->PublishedAssets(layer);
      if (!published.ok()) {
        return absl::Status(published.status().code(),
                            absl::StrCat("layer ", layer, ": published Saap assets: ",
                                         published.status().message()));
      }
      if (published->num_centroids > 0) {
        assets = std::move(*published);
        maybe_assets = &assets;
        methods.push_back(Method::kSaap);
        int with = 0;
        for (int h = 0; h < p0.num_q_heads; ++h) with += HasClassifier(maybe_assets, h);
        std::printf(
            "layer %d: saap joins the search with the published assets (%d centroids, "
            "classifiers for %d of %d heads)\n",
            layer, assets.num_centroids, with, p0.num_q_heads);
      }
    }
    SPATTN_ASSIGN_OR_RETURN(std::vector<MethodConfig> candidates,
                            CandidatesForMethods(methods, maybe_assets));
    search.maybe_assets = maybe_assets;
    absl::StatusOr<PatternSearchResult> result =
        SearchHeadPatterns(in.problems, candidates, search);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("layer ", layer, ": ", result.status().message()));
    }
    std::vector<int> heads;
    std::vector<MethodConfig> chosen;
    for (const HeadSearchResult& h : result->heads) {
      heads.push_back(h.head);
      chosen.push_back(h.chosen.config);
    }
    std::vector<HeadEvaluation> held;
    if (in.holdout) {
      SPATTN_ASSIGN_OR_RETURN(
          held, EvaluateHeadConfigs(in.holdout->problem(), heads, chosen, o.search.sample_rows,
                                    o.search.seed, o.search.block_m, maybe_assets,
                                    o.search.sampled_lines_block_m));
    }

    // The table.
    const bool kinds = !in.kinds.empty();
    std::printf("%5s %4s  %-15s%-16s %-24s %7s %8s %s  %s\n", "layer", "head",
                kinds ? "workload kind" : "", "method", "params", "recall", "density",
                held.empty() ? "" : " held-out (recall, density)", "runner-up (recall, density)");
    std::set<int> saap_heads;
    for (size_t i = 0; i < result->heads.size(); ++i) {
      const HeadSearchResult& h = result->heads[i];
      std::printf("%5d %4d  %-15s%-16s %-24s %7.4f %8.4f %s  %s (%.4f, %.4f)\n", layer, h.head,
                  kinds ? HeadKindName(in.kinds[h.head]) : "", MethodName(h.chosen.config.method),
                  Params(h.chosen.config).c_str(), h.chosen.recall, h.chosen.density,
                  held.empty()
                      ? ""
                      : absl::StrFormat("%19.4f, %.4f", held[i].recall, held[i].density).c_str(),
                  h.has_runner_up ? ConfigLabel(h.runner_up.config).c_str() : "-",
                  h.runner_up.recall, h.runner_up.density);
      v1::HeadConfig c;
      c.set_layer(static_cast<uint32_t>(layer));
      c.set_head(static_cast<uint32_t>(h.head));
      MethodConfigToProto(h.chosen.config, c.mutable_method());
      c.set_search_score(static_cast<float>(h.chosen.recall));
      c.set_min_tokens(min_tokens);
      c.set_calibrated_tokens(calibrated_tokens);
      configs.push_back(c);
      ++method_count[MethodName(h.chosen.config.method)];
      density_sum += h.chosen.density;
      ++heads_total;
      if (h.chosen.config.method == Method::kSaap) saap_heads.insert(h.head);
    }
    if (!saap_heads.empty()) {
      std::vector<TensorUpload> t =
          SaapUploads(layer, assets, saap_heads, p0.group_size(), p0.head_dim);
      tensors.insert(tensors.end(), std::make_move_iterator(t.begin()),
                     std::make_move_iterator(t.end()));
    }
    std::printf("layer %d: searched %zu candidates in %.1f s (exact rows %.1f s, builds %.1f s)\n",
                layer, candidates.size(), result->total_seconds, result->exact_seconds, [&] {
                  double s = 0;
                  for (double b : result->build_seconds) s += b;
                  return s;
                }());
  }

  std::vector<std::string> mix;
  for (const auto& [method, count] : method_count) mix.push_back(absl::StrCat(method, " ", count));
  std::printf("chosen: %s; mean density %.4f over %d heads; target recall %.3f; %.1f s\n",
              absl::StrJoin(mix, ", ").c_str(), heads_total ? density_sum / heads_total : 0.0,
              heads_total, o.search.target_recall, SecondsSince(t_start));

  if (!o.out.empty()) {
    v1::GetHeadConfigsResponse file;
    for (const v1::HeadConfig& c : configs) *file.add_configs() = c;
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    print.always_print_primitive_fields = true;
    if (!google::protobuf::util::MessageToJsonString(file, &json, print).ok()) {
      return absl::InternalError("could not write the configs as JSON");
    }
    std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
    f << json;
    f.close();
    if (!f) return absl::PermissionDeniedError(absl::StrCat("--out: cannot write '", o.out, "'"));
    std::printf("wrote %zu head configs to %s\n", configs.size(), o.out.c_str());
    if (!tensors.empty()) {
      std::printf("note: %zu Saap tensors are not in %s; publish with --publish to upload them\n",
                  tensors.size(), o.out.c_str());
    }
  }
  if (publisher) {
    std::string description = o.description;
    if (description.empty()) {
      description = absl::StrFormat("spattnctl calibrate: %zu layer(s), target recall %.3f",
                                    o.layers.size(), o.search.target_recall);
    }
    SPATTN_ASSIGN_OR_RETURN(
        v1::PublishVersionResponse published,
        publisher->Publish(publisher->published(), expect, description, configs, tensors));
    std::printf("published version %llu of %s (previous %llu)\n",
                static_cast<unsigned long long>(published.published().version()), o.model.c_str(),
                static_cast<unsigned long long>(published.previous_version()));
  }
  return absl::OkStatus();
}

}  // namespace

int RunCalibrateCommand(int argc, char** argv) {
  absl::StatusOr<Flags> flags = Flags::Parse(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "spattnctl calibrate: %s\n(run 'spattnctl calibrate help' for usage)\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  absl::StatusOr<Options> options = ParseOptions(*flags);
  absl::Status s = options.ok() ? flags->CheckAllUsed() : options.status();
  if (!s.ok()) {
    std::fprintf(stderr, "spattnctl calibrate: %s\n(run 'spattnctl calibrate help' for usage)\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  s = Run(*options);
  if (!s.ok()) {
    std::fprintf(stderr, "spattnctl calibrate: %s: %s\n",
                 absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace spattn
