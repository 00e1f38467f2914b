#include "tests/bench/bench_lib.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/flags.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/calibration/saap_calibration.h"
#include "kernels/fidelity.h"
#include "kernels/io/tensor_io.h"
#include "kernels/parallel.h"
#include "kernels/status_macros.h"
#include "kernels/workload/tensor_problem.h"
#include "kernels/workload/workload.h"
#include "server/recall_guard.h"
#include "tests/bench/backend.h"
#include "tests/bench/promise_lines.h"
#include "tests/bench/stats_lines.h"

namespace spattn {
namespace {

// ---- Small JSON writer for the output lines.
class JsonLine {
 public:
  JsonLine& Str(const std::string& key, const std::string& value) {
    Key(key);
    Quote(value);
    return *this;
  }
  JsonLine& Num(const std::string& key, double value) {
    Key(key);
    if (!std::isfinite(value)) {
      s_ += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.6g", value);
      s_ += buf;
    }
    return *this;
  }
  JsonLine& Int(const std::string& key, int64_t value) {
    Key(key);
    s_ += std::to_string(value);
    return *this;
  }
  JsonLine& Ints(const std::string& key, const std::vector<int>& values) {
    Key(key);
    s_ += "[" + absl::StrJoin(values, ",") + "]";
    return *this;
  }
  std::string Done() const { return s_ + "}"; }

 private:
  void Key(const std::string& key) {
    s_ += s_.size() > 1 ? "," : "";
    Quote(key);
    s_ += ":";
  }
  void Quote(const std::string& v) {
    s_ += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') {
        s_ += '\\';
        s_ += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        s_ += buf;
      } else {
        s_ += c;
      }
    }
    s_ += '"';
  }
  std::string s_ = "{";
};

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A head group: a name (head kind or "all") and its q heads.
struct Group {
  std::string name;
  std::vector<int> heads;
};

// What one (method, group) measured.
struct Result {
  std::string method, params, group, error;
  std::string choices;  // searched: "method:count,..." over the group's heads
  std::string block_rows;  // the query block rows of its indexes, e.g. "64" or "64,128"
  std::vector<int> heads;
  double build_ms = 0, kernel_ms = 0, density = 0, density_min = 0, density_max = 0;
  double pairs_ms = 0;  // the worker path's pairs count after each build (timed apart)
  double recall = 0, recall_min = 0, rel_l2 = 0;
  int64_t pairs = 0;
  int64_t ranges = 0, cols = 0;  // index entries (what a build writes and keeps)
  std::vector<SlotFidelity> slots;
};

}  // namespace

// The method parameters for --help, one line per method, from the parameter table.
static std::string ParamList() {
  std::string out;
  for (Method m : kAllMethods) {
    std::vector<std::string> names;
    for (const MethodParam* p : ParamsOf(m)) names.push_back(p->name);
    if (names.empty()) continue;
    absl::StrAppend(&out, "                         ", MethodName(m), ": ",
                    absl::StrJoin(names, " "), "\n");
  }
  return out;
}

std::string BenchUsage() {
  return R"(spattn-bench: index build + sparse kernel time and fidelity of every sparse attention method.

Prints one JSON line per (method, head group): method, params, workload, group, heads, seq_len,
q_len, batch, num_heads, kv_heads, head_dim, dtype, device, threads, index_build_ms, kernel_ms,
total_ms (medians over --repeat runs), density, density_min, density_max, recall, recall_min
(attention-mass recall on sampled rows), rel_l2_error (output vs exact dense attention on the
sampled rows), pairs (computed query-key pairs), index_ranges and index_cols (the index's
entries) and tflops (4 * pairs * head_dim / kernel time:
the per-pair rate); lines after the dense method's in the same run also carry dense_tflops (its
rate, same group) and vs_dense (tflops / dense_tflops). With --device=cuda, index_build_ms is the
worker's index build (BackendCall::BuildIndex) and pairs_count_ms, timed apart, the computed-pairs
count the worker takes for its stats after the kernel (not part of the build).
A method that fails (e.g. a builder not implemented yet) gets a line with "error" instead.
With several groups an extra line with group "all" sums the times over the groups.

Workload (synthetic, kernels/workload/README.md):
  --workload=NAME        llm_mix (default) or one head kind: sink_local, vertical, slash,
                         vertical_slash, topic_blocks, retrieval, diffuse
  --seq_len=N            keys per sequence (default 4096)
  --q_len=N              queries per sequence, <= seq_len: chunked prefill (default seq_len)
  --batch=N              sequences of seq_len each (default 1)
  --heads=N              q heads (default 8)
  --kv_heads=N           kv heads, divides --heads (default 2)
  --head_dim=N           multiple of 8 in [32, 256] (default 128)
  --dtype=T              bf16 (default), fp16 or fp32
  --causal=BOOL          causal mask (default true)
  --rope_theta=X         RoPE base (default 500000)
  --concentration=X      how peaked attention is; multiplies planted logits (default 1)
  --seed=N               workload and sampling seed (default 0)
  --dump=PATH            also write the workload's q/k/v to PATH (.safetensors, THD/BHSD)
Workload (tensor files, taken as the kernel sees them: after RoPE):
  --q=SPEC --k=SPEC --v=SPEC
                         SPEC is file.npy, file.safetensors (one tensor) or file.safetensors:NAME;
                         fp32/fp16/bf16 (kernels/io/README.md); converted to --dtype if given
  --layout=L             auto (default: rank 3 = thd, rank 4 = bhsd), thd, hsd or bhsd
Methods:
  --methods=LIST         comma-separated, or all (default): dense, a_shape, vertical_slash,
                         block_sparse, flex_prefill, sample_attention, anchor, saap; and
                         searched (only when named): every head runs the config the pattern
                         search (kernels/calibration) chose for it, as the product serves them;
                         oracle (only when named): per group the least density any index reaches
                         --search_target_recall with, per row, per 64-row query block (key
                         columns) and per 64x64 block, on recall_rows/16 sampled query blocks;
                         guarded (only when named): the searched configs after the worker's
                         recall guard (server/recall_guard.h) widened the heads whose estimate
                         on this prompt is short of --search_target_recall (with
                         --device=cuda: the worker's guard on the GPU, its recall stage timed
                         as guard_recall_ms);
                         promise (only when named): for targets 0.90/0.95/0.98, configs searched
                         on a --search_len prompt, served through the recall guard on held-out
                         prompts of 0.25x..8x that length; recall on other rows, "kept" per
                         length and target (tests/bench/promise_lines.h);
                         topk_recall (only when named): share of each row's mass in its top
                         seq_len/32 keys on this prompt and with another prompt's top keys
                         (MInference Fig. 2b/2c: 96.8 % and 83.7 % at 128K)
  --search_len=N         searched: the search runs on another prompt of the same synthetic model
                         (seed + 1000) of N tokens; its configs are applied at the full length
                         (default 0 = min(seq_len, 16384))
  --search_target_recall=X
                         searched: recall each head's config must reach (default 0.95)
  --search_sampled_lines_margin=M
                         searched, guarded, promise, with --search_candidates=all or a list:
                         search sampled_lines at gamma >= SampledLinesGammaFor(target, M) (the
                         guard's margin is 0.01), not below (default 0: the candidates' own
                         gammas)
  --promise_min_len=N    promise: skip held-out prompts shorter than N (default 0: none)
  --promise_max_len=N    promise: skip held-out prompts longer than N (default 0: none)
  --promise_search_rows=N
                         promise: exact rows of the search and of the served recall (default 128)
  --promise_targets=L    promise: recall targets (default 0.90,0.95,0.98)
  --guard_probe_rows=N   guarded: probe rows per head (default -1: the worker's, 32 on the host
                         and 64 on CUDA)
  --guard_length_exponent=E
                         guarded, promise: start from the searched configs' key-count budgets
                         x (served / search length)^E (default -1: the worker's 0.68; 0: as
                         searched)
  --guard_fine_step=F    guarded, promise (host guard): the ladder's fine step (default -1: the
                         worker's sqrt(2); 0: doublings only)
  --guard_adaptive=A     guarded, promise (host and device guard): the adaptive tries, auto
                         (default, the worker's: per head by its searched method,
                         sampled_lines heads sampled_lines then flex_prefill, others
                         flex_prefill), or M[,M2] of flex_prefill, sampled_lines, none for
                         every head; two methods: both tried, the cheaper that reaches the
                         target kept
  --search_candidates=L  searched, guarded, promise: auto (default): by the served length
                         (searched, guarded: --seq_len; promise: each held-out prompt's),
                         sampled_lines alone at sampled_lines_margin 0.01 up to
                         --search_auto_max_len tokens, all above (kernels/calibration
                         AutoCandidatesForLength; not with --search_sampled_lines_margin);
                         all: the search's default candidates (the default before session
                         27); or a method list, e.g. a_shape,vertical_slash. With auto and
                         all, saap's candidates join in searched when --calibrate is given
  --search_auto_max_len=N
                         with --search_candidates=auto: the longest served length searched
                         with sampled_lines alone (default 131072)
  --METHOD.PARAM=V       a method parameter, e.g. --vertical_slash.last_q=64
  --param METHOD.PARAM=V the same, repeatable
)" + ParamList() +
         R"(  --block_m=N            query rows per index block for dense, a_shape, vertical_slash, saap,
                         and the oracle's query block rows and tile width (default 64)
  --sampled_lines_block_m=N
                         query rows per sampled_lines index block, wherever it is built
                         (its own line, searched, guarded, promise): the worker's
                         --sampled_lines_block_m (default 128; 0 = --block_m)
  --calibrate            saap: calibrate its assets (k-means, query classifier) on the first
                         --calibrate_len queries of sequence 0 (default 4096), training the
                         classifier (--calibrate_hidden wide, default 1024) for
                         --calibrate_steps steps (default 100); without it saap has no assets
                         (searched: the same on its calibration prompt)
Run:
  --device=D             cpu (default); cuda (the worker's GPU path); cuda-host-index (the
                         worker's path before plan/run: index copied to the host and back)
  --gpu_workspace_bytes=N
                         cuda: the worker's CUDA workspace (default 0: 8 GiB on a device of
                         32 GiB or more, else 1 GiB; a 1M-key chunk needs more)
  --warmup=N             untimed runs per method and group (default -1 = auto)
  --repeat=N             timed runs; medians are reported (default 0 = auto)
                         auto: warmup 1, repeat 3; warmup 0, repeat 1 when one dense pass
                         exceeds 5e10 flop (e.g. 16K tokens, 8 heads, d 128) on the CPU
  --recall_rows=N        query rows sampled (over the batch) for recall and error (default 256;
                         0 = every row, which costs O(S^2) memory)
  --threads=N            CPU threads (default 0 = all cores)
  --group_by=G           auto (default: kind for synthetic workloads, all for files), kind, all
  --table                print a markdown table (method | group | density | recall | ...) instead
  --help                 this text
)";
}

// --guard_adaptive: "M" or "M1,M2" into go's adaptive / adaptive_also (SetAdaptiveTries).
static absl::Status SetGuardAdaptive(absl::string_view flag, RecallGuardOptions* go) {
  if (absl::Status s = SetAdaptiveTries(flag, go); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--guard_adaptive: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchFlags> ParseBenchFlags(const std::vector<std::string>& args) {
  BenchFlags f;
  CommandLine::Options options;
  options.boolean = {"causal", "table", "calibrate"};
  options.positional = false;
  SPATTN_ASSIGN_OR_RETURN(CommandLine line, CommandLine::Parse(args, options));
  f.workload = line.Get("workload", f.workload);
  f.q_file = line.Get("q");
  f.k_file = line.Get("k");
  f.v_file = line.Get("v");
  f.layout = line.Get("layout", f.layout);
  f.dtype = line.Get("dtype", f.dtype);
  f.device = line.Get("device", f.device);
  f.group_by = line.Get("group_by", f.group_by);
  f.search_candidates = line.Get("search_candidates", f.search_candidates);
  f.dump = line.Get("dump");
  f.guard_adaptive = line.Get("guard_adaptive", f.guard_adaptive);
  if (f.guard_adaptive.empty()) f.guard_adaptive = kAdaptiveAuto;  // the worker's default
  if (!f.guard_adaptive.empty()) {
    RecallGuardOptions go;
    SPATTN_RETURN_IF_ERROR(SetGuardAdaptive(f.guard_adaptive, &go));
  }
  for (auto [name, field] : std::initializer_list<std::pair<const char*, int*>>{
           {"seq_len", &f.seq_len},
           {"q_len", &f.q_len},
           {"batch", &f.batch},
           {"heads", &f.heads},
           {"kv_heads", &f.kv_heads},
           {"head_dim", &f.head_dim},
           {"warmup", &f.warmup},
           {"repeat", &f.repeat},
           {"recall_rows", &f.recall_rows},
           {"threads", &f.threads},
           {"block_m", &f.block_m},
           {"sampled_lines_block_m", &f.sampled_lines_block_m},
           {"calibrate_len", &f.calibrate_len},
           {"calibrate_steps", &f.calibrate_steps},
           {"calibrate_hidden", &f.calibrate_hidden},
           {"search_len", &f.search_len},
       }) {
    SPATTN_RETURN_IF_ERROR(line.Read(name, field));
  }
  SPATTN_RETURN_IF_ERROR(line.Read("rope_theta", &f.rope_theta));
  SPATTN_RETURN_IF_ERROR(line.Read("concentration", &f.concentration));
  SPATTN_RETURN_IF_ERROR(line.Read("search_target_recall", &f.search_target_recall));
  SPATTN_RETURN_IF_ERROR(line.Read("guard_probe_rows", &f.guard_probe_rows));
  SPATTN_RETURN_IF_ERROR(line.Read("guard_length_exponent", &f.guard_length_exponent));
  SPATTN_RETURN_IF_ERROR(line.Read("guard_fine_step", &f.guard_fine_step));
  SPATTN_RETURN_IF_ERROR(
      line.Read("search_sampled_lines_margin", &f.search_sampled_lines_margin));
  SPATTN_RETURN_IF_ERROR(line.Read("promise_min_len", &f.promise_min_len));
  SPATTN_RETURN_IF_ERROR(line.Read("search_auto_max_len", &f.search_auto_max_len));
  if (line.Has("search_auto_max_len") && !IsAutoCandidates(f.search_candidates)) {
    return absl::InvalidArgumentError("--search_auto_max_len: only with --search_candidates=auto");
  }
  if (line.Has("search_sampled_lines_margin") && IsAutoCandidates(f.search_candidates)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--search_sampled_lines_margin: not with --search_candidates=auto (the default), which "
        "sets it per served length (",
        kAutoSampledLinesMargin,
        " up to --search_auto_max_len tokens, 0 above); give --search_candidates=all or a list "
        "with it"));
  }
  SPATTN_RETURN_IF_ERROR(line.Read("promise_max_len", &f.promise_max_len));
  SPATTN_RETURN_IF_ERROR(line.Read("promise_search_rows", &f.promise_search_rows));
  if (line.Has("promise_targets")) {
    for (absl::string_view w : absl::StrSplit(line.Get("promise_targets", ""), ',')) {
      double t = 0;
      if (!absl::SimpleAtod(w, &t) || !(t > 0 && t <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--promise_targets: '", w, "' is not a recall in (0, 1]"));
      }
      f.promise_targets.push_back(t);
    }
  }
  SPATTN_RETURN_IF_ERROR(line.Read("seed", &f.seed));
  SPATTN_RETURN_IF_ERROR(line.Read("gpu_workspace_bytes", &f.gpu_workspace_bytes));
  if (f.gpu_workspace_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu_workspace_bytes: ", f.gpu_workspace_bytes,
                                                   " is negative (0 = the default size)"));
  }
  SPATTN_RETURN_IF_ERROR(line.Read("causal", &f.causal));
  SPATTN_RETURN_IF_ERROR(line.Read("table", &f.table));
  SPATTN_RETURN_IF_ERROR(line.Read("calibrate", &f.calibrate));
  SPATTN_RETURN_IF_ERROR(line.Read("help", &f.help));
  if (line.Has("methods")) f.methods = absl::StrSplit(line.Get("methods"), ',', absl::SkipEmpty());
  // Method parameters: --param METHOD.PARAM=V (repeatable) and --METHOD.PARAM=V, in order given.
  for (const std::string& name : line.names()) {
    if (name == "param") {
      for (const std::string& value : line.GetAll(name)) {
        const size_t peq = value.find('=');
        if (peq == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("--param: expected METHOD.PARAM=VALUE, got '", value, "'"));
        }
        f.params.emplace_back(value.substr(0, peq), value.substr(peq + 1));
      }
    } else if (name.find('.') != std::string::npos) {
      for (const std::string& value : line.GetAll(name)) f.params.emplace_back(name, value);
    }
  }
  if (absl::Status s = line.CheckAllUsed(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), " (see --help)"));
  }
  if (f.methods.empty() || (f.methods.size() == 1 && f.methods[0] == "all")) {
    f.methods.clear();
    for (Method m : kAllMethods) f.methods.push_back(MethodName(m));
  }
  for (const std::string& m : f.methods) {
    if (m == kSearchedMethod || m == kGuardedMethod || m == kPromiseMethod || IsStatsMethod(m)) {
      continue;
    }
    auto parsed = ParseMethod(m);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--methods: ", parsed.status().message()));
  }
  if (f.warmup < -1) return absl::InvalidArgumentError("--warmup must be >= 0 (-1: auto)");
  if (f.repeat < 0) return absl::InvalidArgumentError("--repeat must be > 0 (0: auto)");
  if (f.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (f.recall_rows < 0) return absl::InvalidArgumentError("--recall_rows must be >= 0");
  if (f.block_m <= 0) return absl::InvalidArgumentError("--block_m must be > 0");
  if (f.sampled_lines_block_m < 0) {
    return absl::InvalidArgumentError("--sampled_lines_block_m must be >= 0 (0: --block_m)");
  }
  if (f.calibrate_len <= 0) return absl::InvalidArgumentError("--calibrate_len must be > 0");
  if (f.calibrate_steps <= 0) return absl::InvalidArgumentError("--calibrate_steps must be > 0");
  if (f.calibrate_hidden <= 0) {
    return absl::InvalidArgumentError("--calibrate_hidden must be > 0");
  }
  if (f.search_len < 0) return absl::InvalidArgumentError("--search_len must be >= 0 (0: auto)");
  if (!(f.search_target_recall > 0 && f.search_target_recall <= 1)) {
    return absl::InvalidArgumentError("--search_target_recall must be in (0, 1]");
  }
  if (!(f.search_sampled_lines_margin >= 0) || std::isinf(f.search_sampled_lines_margin)) {
    return absl::InvalidArgumentError("--search_sampled_lines_margin must be finite and >= 0");
  }
  if (f.promise_min_len < 0) {
    return absl::InvalidArgumentError("--promise_min_len must be >= 0 (0: no limit)");
  }
  if (f.search_auto_max_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--search_auto_max_len must be >= 1, got ",
                                                   f.search_auto_max_len));
  }
  if (!IsAutoCandidates(f.search_candidates)) {
    if (auto c = ParseCandidateMethods(f.search_candidates); !c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--search_candidates: ", c.status().message()));
    }
  }
  if (f.batch <= 0) return absl::InvalidArgumentError("--batch must be > 0");
  if (f.seq_len <= 0) return absl::InvalidArgumentError("--seq_len must be > 0");
  if (f.q_len < 0 || f.q_len > f.seq_len) {
    return absl::InvalidArgumentError("--q_len must be in [0, seq_len] (0: seq_len)");
  }
  if (f.group_by != "auto" && f.group_by != "kind" && f.group_by != "all") {
    return absl::InvalidArgumentError("--group_by must be auto, kind or all");
  }
  const bool any_file = !f.q_file.empty() || !f.k_file.empty() || !f.v_file.empty();
  if (any_file && (f.q_file.empty() || f.k_file.empty() || f.v_file.empty())) {
    return absl::InvalidArgumentError("--q, --k and --v must be given together");
  }
  if (any_file && f.group_by == "kind") {
    return absl::InvalidArgumentError("--group_by=kind needs a synthetic workload");
  }
  return f;
}

std::vector<ConfigGroup> GroupHeadsByConfig(const std::vector<int>& heads,
                                            const std::vector<MethodConfig>& config_of_head) {
  std::vector<int> sorted = heads;
  std::sort(sorted.begin(), sorted.end());
  std::vector<ConfigGroup> groups;
  for (int h : sorted) {
    const MethodConfig& c = config_of_head[h];
    size_t g = 0;
    while (g < groups.size() && !SameBuildGroup(groups[g].config, c)) ++g;
    if (g == groups.size()) groups.push_back({c, {}, {}});
    groups[g].heads.push_back(h);
    groups[g].head_configs.push_back(c);
  }
  return groups;
}

absl::StatusOr<GroupRun> RunConfigGroups(AttentionBackend* backend, const AttentionProblem& problem,
                                         const std::vector<ConfigGroup>& groups,
                                         const BuildOptions& options, bool validate, bool fetch) {
  GroupRun run;
  run.indexes.resize(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    SparseIndex& index = run.indexes[i];
    // Build and run group by group: the CUDA backend runs a GPU-built index right after its build.
    const BuildOptions group_options = groups[i].head_configs.empty()
                                           ? options
                                           : BuildOptionsForHeads(options, groups[i].head_configs);
    SPATTN_ASSIGN_OR_RETURN(
        const double build_ms,
        backend->BuildIndex(groups[i].config, groups[i].heads, group_options, &index));
    if (validate) {
      absl::Status v = ValidateSparseIndex(problem, index);
      if (!v.ok()) {
        return absl::InternalError(
            absl::StrCat("invalid index: ", groups[i].config.DebugString(), ": ", v.message()));
      }
    }
    SPATTN_ASSIGN_OR_RETURN(const double kernel_ms, backend->RunKernel(index));
    // A device backend copies back the heads of its last kernel only: fetch after each group.
    if (fetch) SPATTN_RETURN_IF_ERROR(backend->FetchOutput());
    run.build_ms += build_ms;
    run.pairs_ms += backend->last_pairs_ms();
    run.kernel_ms += kernel_ms;
  }
  return run;
}

int RunBench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto flags_or = ParseBenchFlags(args);
  if (!flags_or.ok()) {
    err << "spattn-bench: " << flags_or.status().message() << "\n";
    return 2;
  }
  BenchFlags& f = *flags_or;
  if (f.help) {
    out << BenchUsage();
    return 0;
  }
  // Method configs with the parameters applied.
  std::map<Method, MethodConfig> configs;
  for (Method m : kAllMethods) configs[m].method = m;
  for (const auto& [dotted, value] : f.params) {
    const size_t dot = dotted.find('.');
    auto m = ParseMethod(dotted.substr(0, dot));
    absl::Status s = m.ok() ? SetMethodParam(dotted, value, &configs[*m]) : m.status();
    if (!s.ok()) {
      err << "spattn-bench: " << s.message() << "\n";
      return 2;
    }
  }
  auto dtype = ParseDType(f.dtype);
  if (!dtype.ok()) {
    err << "spattn-bench: --" << dtype.status().message() << "\n";
    return 2;
  }
  SetCpuThreads(f.threads);

  // The problem: synthetic or from files.
  std::unique_ptr<Workload> workload;
  std::unique_ptr<HostProblem> file_problem;
  std::string workload_name;
  const bool from_files = !f.q_file.empty();
  const auto setup_start = std::chrono::steady_clock::now();
  if (from_files) {
    auto layout = ParseTensorLayout(f.layout);
    if (!layout.ok()) {
      err << "spattn-bench: --" << layout.status().message() << "\n";
      return 2;
    }
    auto q = ReadTensorSpec(f.q_file);
    auto k = q.ok() ? ReadTensorSpec(f.k_file) : q;
    auto v = k.ok() ? ReadTensorSpec(f.v_file) : k;
    if (!v.ok()) {
      err << "spattn-bench: " << v.status().message() << "\n";
      return 1;
    }
    TensorProblemOptions opt;
    opt.layout = *layout;
    opt.dtype = *dtype;
    opt.causal = f.causal;
    auto p = ProblemFromTensors(*q, *k, *v, opt);
    if (!p.ok()) {
      err << "spattn-bench: " << p.status().message() << "\n";
      return 1;
    }
    file_problem = std::move(*p);
    workload_name = "files";
  } else {
    WorkloadOptions o;
    o.workload = f.workload;
    o.shape.q_lens.assign(f.batch, f.q_len > 0 ? f.q_len : f.seq_len);
    o.shape.k_lens.assign(f.batch, f.seq_len);
    o.shape.num_q_heads = f.heads;
    o.shape.num_kv_heads = f.kv_heads;
    o.shape.head_dim = f.head_dim;
    o.shape.dtype = *dtype;
    o.shape.causal = f.causal;
    o.seed = f.seed;
    o.rope_theta = f.rope_theta;
    o.concentration = f.concentration;
    auto w = GenerateWorkload(o);
    if (!w.ok()) {
      err << "spattn-bench: " << w.status().message() << "\n";
      return 2;
    }
    workload = std::make_unique<Workload>(std::move(*w));
    workload_name = f.workload;
  }
  AttentionProblem& problem = workload ? workload->problem() : file_problem->problem();
  const double setup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup_start)
          .count();
  if (!f.dump.empty()) {
    const bool equal = [&] {
      for (int b = 1; b < problem.batch(); ++b) {
        if (problem.q_len(b) != problem.q_len(0) || problem.k_len(b) != problem.k_len(0)) {
          return false;
        }
      }
      return true;
    }();
    auto tensors = equal ? ProblemToTensors(problem, problem.batch() == 1 ? TensorLayout::kTHD
                                                                          : TensorLayout::kBHSD)
                         : absl::StatusOr<NamedTensors>(absl::InvalidArgumentError("ragged"));
    absl::Status s = tensors.ok() ? WriteSafetensors(f.dump, *tensors) : tensors.status();
    if (!s.ok()) {
      err << "spattn-bench: --dump: " << s.message() << "\n";
      return 1;
    }
  }
  auto backend = MakeBackend(f.device, f.gpu_workspace_bytes);
  if (!backend.ok()) {
    err << "spattn-bench: " << backend.status().message() << "\n";
    return 1;
  }
  absl::Status prep = (*backend)->Prepare(&problem);
  if (!prep.ok()) {
    err << "spattn-bench: " << prep.message() << "\n";
    return 1;
  }

  // Head groups.
  std::vector<Group> groups;
  std::vector<int> all_heads(problem.num_q_heads);
  for (int h = 0; h < problem.num_q_heads; ++h) all_heads[h] = h;
  if (workload && f.group_by != "all") {
    for (const auto& [kind, heads] : workload->HeadsByKind()) {
      groups.push_back({HeadKindName(kind), heads});
    }
  } else {
    groups.push_back({"all", all_heads});
  }

  // Exact dense attention on the sampled rows, once for every method.
  const auto exact_start = std::chrono::steady_clock::now();
  ExactRowSample::Options so;
  so.sample_rows = f.recall_rows;
  so.seed = f.seed;
  auto exact = ExactRowSample::Compute(problem, all_heads, so);
  if (!exact.ok()) {
    err << "spattn-bench: " << exact.status().message() << "\n";
    return 1;
  }
  const double exact_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - exact_start)
          .count();
  err << "spattn-bench: workload " << workload_name << ", batch " << problem.batch() << ", seq_len "
      << problem.k_len(0) << ", q_len " << problem.q_len(0) << ", heads " << problem.num_q_heads
      << "/" << problem.num_kv_heads << ", d " << problem.head_dim << ", "
      << DTypeName(problem.dtype) << ", " << CpuThreads() << " threads; setup "
      << static_cast<int64_t>(setup_ms) << " ms, exact sample of " << (*exact)->rows().size()
      << " rows " << static_cast<int64_t>(exact_ms) << " ms\n";

  // Auto repetitions: keep a 16K CPU run within minutes.
  const double dense_flop =
      4.0 * static_cast<double>(AllowedPairs(problem)) * problem.num_q_heads * problem.head_dim;
  const bool big = f.device == "cpu" && dense_flop > 5e10;
  if (f.warmup < 0) f.warmup = big ? 0 : 1;
  if (f.repeat == 0) f.repeat = big ? 1 : 3;

  // Saap's assets, calibrated on a prefix of sequence 0 (queries [0, n) and the keys they see).
  auto calibrate_saap = [&](const AttentionProblem& p, const char* what,
                            LayerAssets* assets) -> bool {
    const auto calib_start = std::chrono::steady_clock::now();
    AttentionProblem prefix = p;
    const int nq = std::min(f.calibrate_len, p.q_len(0));
    prefix.cu_seqlens_q = {0, nq};
    prefix.cu_seqlens_k = {0, p.k_len(0) - p.q_len(0) + nq};
    assets->rope_theta = f.rope_theta;
    const SaapParams& sp = configs[Method::kSaap].saap;
    SaapCalibrationOptions co;
    co.kmeans.num_centroids = sp.num_centroids;
    co.classifier.hidden = f.calibrate_hidden;
    co.classifier.steps = f.calibrate_steps;
    co.sink_tokens = sp.sink_tokens;
    co.local_tokens = sp.local_tokens;
    co.max_queries = 4096;
    co.seed = f.seed + 1;
    absl::Status cs = CalibrateSaap(prefix, co, assets, nullptr);
    const double calib_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - calib_start)
            .count();
    if (!cs.ok()) {
      err << "spattn-bench: saap calibration" << what << " failed: " << cs.message() << "\n";
      return false;
    }
    err << "spattn-bench: saap assets" << what << " calibrated on " << nq << " queries in "
        << static_cast<int64_t>(calib_ms) << " ms\n";
    return true;
  };
  LayerAssets assets;
  const bool wants_saap =
      std::find(f.methods.begin(), f.methods.end(), MethodName(Method::kSaap)) != f.methods.end();
  const bool calibrated = f.calibrate && wants_saap && calibrate_saap(problem, "", &assets);
  BuildOptions bo;
  bo.block_m = f.block_m;
  bo.sampled_lines_block_m = f.sampled_lines_block_m;
  bo.maybe_assets = calibrated ? &assets : nullptr;

  // searched: the pattern search on another prompt of the same model, before any timed run.
  const bool wants_guarded =
      std::find(f.methods.begin(), f.methods.end(), kGuardedMethod) != f.methods.end();
  const bool wants_searched = wants_guarded || std::find(f.methods.begin(), f.methods.end(),
                                                         kSearchedMethod) != f.methods.end();
  absl::Status search_status;
  std::string search_params = kSearchedMethod;
  int searched_at = 0;  // the search prompt's length (the configs' calibration length)
  std::vector<MethodConfig> config_of_head;  // [num_q_heads] the search's choice
  LayerAssets search_assets;
  BuildOptions search_bo = bo;
  search_bo.maybe_assets = nullptr;
  if (wants_searched) {
    search_status = [&]() -> absl::Status {
      if (!workload) {
        return absl::FailedPreconditionError(
            "searched: needs a synthetic workload (the search runs on another prompt of the same "
            "model); run spattnctl calibrate on captured prompts instead");
      }
      const int search_len = f.search_len > 0 ? f.search_len : std::min(f.seq_len, 16384);
      searched_at = search_len;
      // The candidates; "auto" by the served length (the search runs on a shorter prompt).
      SPATTN_ASSIGN_OR_RETURN(CandidateChoice choice,
                              ResolveCandidates(f.search_candidates, f.seq_len,
                                                f.search_sampled_lines_margin,
                                                f.search_auto_max_len));
      search_params = absl::StrCat("searched(target=", f.search_target_recall,
                                   ", search_len=", search_len);
      if (choice.sampled_lines_margin > 0) {
        absl::StrAppend(&search_params, ", sampled_lines_margin=", choice.sampled_lines_margin);
      }
      if (choice.automatic) {
        absl::StrAppend(&search_params, ", candidates=auto:",
                        choice.all ? "all" : CandidateChoiceLabel(CandidateChoice{choice.methods}));
      }
      absl::StrAppend(&search_params, ")");
      const auto search_start = std::chrono::steady_clock::now();
      WorkloadOptions co = workload->options;
      co.shape.q_lens = {search_len};
      co.shape.k_lens = {search_len};
      co.seed = f.seed + 1000;
      co.model_seed = f.seed;  // the benchmark's model (its model_seed defaults to its seed)
      SPATTN_ASSIGN_OR_RETURN(Workload calib, GenerateWorkload(co));
      std::vector<Method> methods = choice.methods;
      // Saap joins "all" and "auto" (whatever auto picked) where the layer has assets
      // (--calibrate; issue 11 item 6), as spattnctl calibrate's with published assets.
      const bool listed_saap =
          std::find(methods.begin(), methods.end(), Method::kSaap) != methods.end();
      const bool saap_joins = choice.all || choice.automatic;
      if (f.calibrate && (saap_joins || listed_saap) &&
          calibrate_saap(calib.problem(), " (search prompt)", &search_assets)) {
        search_bo.maybe_assets = &search_assets;
        if (saap_joins && !listed_saap) methods.push_back(Method::kSaap);
      }
      SPATTN_ASSIGN_OR_RETURN(std::vector<MethodConfig> candidates,
                              CandidatesForMethods(methods, search_bo.maybe_assets));
      PatternSearchOptions so;
      so.target_recall = f.search_target_recall;
      so.sample_rows = f.recall_rows > 0 ? f.recall_rows : 256;
      so.seed = f.seed;
      so.block_m = f.block_m;
      so.sampled_lines_block_m = f.sampled_lines_block_m;
      so.sampled_lines_margin = choice.sampled_lines_margin;
      so.maybe_assets = search_bo.maybe_assets;
      SPATTN_ASSIGN_OR_RETURN(PatternSearchResult result,
                              SearchHeadPatterns({&calib.problem()}, candidates, so));
      const double search_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - search_start)
              .count();
      err << "spattn-bench: searched " << candidates.size() << " candidates on a " << search_len
          << "-token prompt (seed " << co.seed << ", model seed " << f.seed << ") in "
          << static_cast<int64_t>(search_ms) << " ms (search "
          << static_cast<int64_t>(result.total_seconds * 1e3) << " ms)";
      if (search_len != problem.k_len(0)) {
        err << "; configs found at " << search_len << " tokens are applied at " << problem.k_len(0);
      }
      err << "\n";
      config_of_head.assign(problem.num_q_heads, MethodConfig());
      for (const HeadSearchResult& h : result.heads) {
        config_of_head[h.head] = h.chosen.config;
        char buf[64];
        std::snprintf(buf, sizeof(buf), "recall %.4f density %.3f", h.chosen.recall,
                      h.chosen.density);
        err << "spattn-bench: searched head " << h.head << " ("
            << HeadKindName(workload->heads[h.head].kind) << "): " << ConfigLabel(h.chosen.config)
            << ", calibration " << buf << "\n";
      }
      return absl::OkStatus();
    }();
    if (!search_status.ok()) {
      err << "spattn-bench: searched: " << search_status.message() << "\n";
    }
  }
  // guarded: the searched configs through the worker's recall guard (server/recall_guard.h) on
  // this prompt, on the host (its estimate and rebuilds are not timed; the lines time the
  // resulting per-head configs).
  std::vector<MethodConfig> guarded_config_of_head;
  absl::Status guard_status = search_status;
  std::string guard_params = "guarded";
  double guard_recall_ms = -1;  // the recall stage on the device (worker path), else -1
  double guard_warm_ms = -1;    // the same after it learned (GuardMemory)
  if (wants_guarded && search_status.ok()) {
    const auto guard_start = std::chrono::steady_clock::now();
    RecallGuardOptions go;
    go.target = f.search_target_recall;
    if (f.guard_fine_step >= 0) go.fine_step = f.guard_fine_step;
    if (!f.guard_adaptive.empty()) {
      SetGuardAdaptive(f.guard_adaptive, &go).IgnoreError();  // checked by ParseBenchFlags
      (*backend)->SetGuardAdaptive(go.adaptive, go.adaptive_also, go.adaptive_auto);
    }
    if (f.guard_probe_rows >= 0) go.probe_rows = f.guard_probe_rows;
    // As the worker: each head starts from its config scaled to this length
    // (HeadConfig.calibrated_tokens = the search length).
    const double length_exponent = f.guard_length_exponent >= 0
                                       ? f.guard_length_exponent
                                       : RecallGuardOptions::kLengthExponent;
    int64_t served_len = 0;
    for (int b = 0; b < problem.batch(); ++b) {
      served_len = std::max<int64_t>(served_len, problem.k_len(b));
    }
    std::vector<MethodConfig> start_of_head = config_of_head;
    for (MethodConfig& c : start_of_head) {
      c = ScaleConfigToLength(c, searched_at, served_len, length_exponent);
    }
    guarded_config_of_head = start_of_head;
    std::vector<int> widened(problem.num_q_heads, 0);
    // On a device with the worker's path: the worker's own guard there (estimates on the GPU),
    // timed; else on the host (not timed).
    auto device_guard = (*backend)->GuardOnDevice(
        start_of_head, go.target, f.guard_probe_rows >= 0 ? f.guard_probe_rows : 64, search_bo);
    // (the host path keeps go.probe_rows: --guard_probe_rows or the CPU worker's 32)
    if (device_guard.ok()) {
      go.probe_rows = f.guard_probe_rows >= 0 ? f.guard_probe_rows : 64;
      guarded_config_of_head = device_guard->configs;
      widened = device_guard->widened;
      guard_recall_ms = device_guard->recall_ms;
      guard_warm_ms = device_guard->warm_recall_ms;
      err << "spattn-bench: guarded on " << (*backend)->name() << ": recall stage "
          << device_guard->recall_ms << " ms (first index builds " << device_guard->build_ms
          << " ms); again from what it learned: " << device_guard->warm_recall_ms << " ms";
    } else if (device_guard.status().code() != absl::StatusCode::kUnimplemented) {
      guard_status = device_guard.status();
    } else {
      std::vector<absl::Status> errors(problem.num_q_heads);
      auto build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
        return BuildSparseIndex(problem, c, hs, search_bo, out);
      };
      for (int h = 0; h < problem.num_q_heads; ++h) {
        SparseIndex index;
        absl::Status s = build(start_of_head[h], {h}, &index);
        if (s.ok()) {
          auto g = GuardHead(problem, index, 0, start_of_head[h], /*widen=*/true, build, go);
          if (g.ok()) {
            guarded_config_of_head[h] = g->config;
            widened[h] = g->widened;
          } else {
            s = g.status();
          }
        }
        if (!s.ok() && guard_status.ok()) guard_status = s;
      }
      err << "spattn-bench: guarded: "
          << static_cast<int64_t>(std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - guard_start)
                                      .count())
          << " ms on the host";
    }
    guard_params = absl::StrCat("guarded(", search_params, ", probe_rows=", go.probe_rows,
                                ", margin=", go.margin, ", length_exponent=", length_exponent, ")");
    for (int h = 0; h < problem.num_q_heads; ++h) {
      if (widened[h] > 0) {
        err << "; head " << h << " " << ConfigLabel(config_of_head[h]) << " -> "
            << ConfigLabel(guarded_config_of_head[h]);
      }
    }
    err << "\n";
  }
  // "method:count,..." of the search's choices on `heads`, in method order.
  auto choice_summary = [&](const std::vector<int>& heads, const std::vector<MethodConfig>& cfg) {
    std::vector<std::string> parts;
    for (Method m : kAllMethods) {
      int n = 0;
      for (int h : heads) n += cfg[h].method == m;
      if (n > 0) parts.push_back(absl::StrCat(MethodName(m), ":", n));
    }
    return absl::StrJoin(parts, ",");
  };
  std::vector<Result> table_rows;
  // The dense method's TFLOP/s per group of this run (the per-pair reference of the others).
  std::map<std::string, double> dense_tflops;
  auto emit = [&](const Result& r) {
    if (f.table) {
      table_rows.push_back(r);
      return;
    }
    JsonLine j;
    j.Str("method", r.method).Str("params", r.params).Str("workload", workload_name);
    if (!r.choices.empty()) j.Str("choices", r.choices);
    j.Str("group", r.group).Ints("heads", r.heads);
    j.Int("seq_len", problem.k_len(0)).Int("q_len", problem.q_len(0)).Int("batch", problem.batch());
    j.Int("num_heads", problem.num_q_heads).Int("kv_heads", problem.num_kv_heads);
    j.Int("head_dim", problem.head_dim).Str("dtype", DTypeName(problem.dtype));
    j.Str("device", (*backend)->name()).Int("threads", CpuThreads());
    if (!r.error.empty()) {
      j.Str("error", r.error);
    } else {
      j.Int("warmup", f.warmup).Int("repeat", f.repeat);
      j.Num("index_build_ms", r.build_ms).Num("kernel_ms", r.kernel_ms);
      j.Num("total_ms", r.build_ms + r.kernel_ms);
      // The worker path's computed-pairs count after each build (its output stats, after the
      // kernel; not in index_build_ms since session 24).
      if (r.pairs_ms > 0) j.Num("pairs_count_ms", r.pairs_ms);
      j.Num("density", r.density).Num("density_min", r.density_min);
      j.Num("density_max", r.density_max);
      j.Num("recall", r.recall).Num("recall_min", r.recall_min);
      if (!r.block_rows.empty()) j.Str("block_m", r.block_rows);
      if (!r.slots.empty()) {  // per head: the item-3 rule reads every head's mean recall
        double head_min = 1.0;
        std::string heads;
        for (const SlotFidelity& sf : r.slots) {
          head_min = std::min(head_min, sf.recall_mean);
          char one[32];
          std::snprintf(one, sizeof(one), "%s%d:%.4f", heads.empty() ? "" : ",", sf.head,
                        sf.recall_mean);
          heads += one;
        }
        j.Num("recall_head_min", head_min).Str("recall_heads", heads);
      }
      j.Num("rel_l2_error", r.rel_l2)
          .Int("recall_rows", static_cast<int64_t>((*exact)->rows().size()));
      j.Int("pairs", r.pairs);
      j.Int("index_ranges", r.ranges).Int("index_cols", r.cols);
      if (r.method == kGuardedMethod && guard_recall_ms >= 0) {
        j.Num("guard_recall_ms", guard_recall_ms).Num("guard_recall_warm_ms", guard_warm_ms);
      }
      const double tflops = r.kernel_ms > 0
                                ? 4.0 * r.pairs * problem.head_dim / (r.kernel_ms * 1e-3) / 1e12
                                : std::nan("");
      j.Num("tflops", tflops);
      if (r.method == "dense" && r.kernel_ms > 0) dense_tflops[r.group] = tflops;
      auto dense = dense_tflops.find(r.group);
      if (r.method != "dense" && dense != dense_tflops.end() && dense->second > 0) {
        j.Num("dense_tflops", dense->second).Num("vs_dense", tflops / dense->second);
      }
    }
    out << j.Done() << "\n";
    out.flush();
  };

  for (const std::string& method_name : f.methods) {
    if (method_name == kPromiseMethod) {
      PromiseOptions po;
      po.calib_len = f.search_len > 0 ? f.search_len : std::min(problem.k_len(0), 16384);
      po.probe_rows = f.guard_probe_rows;
      if (f.guard_length_exponent >= 0) po.length_exponent = f.guard_length_exponent;
      if (f.guard_fine_step >= 0) po.fine_step = f.guard_fine_step;
      if (!f.guard_adaptive.empty()) {
        RecallGuardOptions go;
        SetGuardAdaptive(f.guard_adaptive, &go).IgnoreError();  // checked by ParseBenchFlags
        po.adaptive = go.adaptive;
        po.adaptive_also = go.adaptive_also;
        po.adaptive_auto = go.adaptive_auto;
        (*backend)->SetGuardAdaptive(go.adaptive, go.adaptive_also, go.adaptive_auto);
      }
      po.build = search_bo;
      po.build.maybe_assets = nullptr;
      po.auto_candidates = IsAutoCandidates(f.search_candidates);
      po.auto_max_len = f.search_auto_max_len;
      if (f.search_candidates != "all" && !po.auto_candidates) {
        auto methods = ParseCandidateMethods(f.search_candidates);  // checked by ParseBenchFlags
        auto candidates = methods.ok() ? CandidatesForMethods(*methods, nullptr) : methods.status();
        if (!candidates.ok()) {
          out << "{\"method\":\"promise\",\"error\":\"" << candidates.status().message()
              << "\"}\n";
          continue;
        }
        po.candidates = *candidates;
      }
      po.min_len = f.promise_min_len;
      po.max_len = f.promise_max_len > 0 ? f.promise_max_len : (1 << 20);
      po.sampled_lines_margin = f.search_sampled_lines_margin;
      if (f.promise_search_rows > 0) po.search_rows = po.recall_rows = f.promise_search_rows;
      if (!f.promise_targets.empty()) po.targets = f.promise_targets;
      absl::Status s = workload == nullptr
                           ? absl::FailedPreconditionError("promise needs a synthetic --workload")
                           : EmitPromiseLines(workload->options, backend->get(), po, out, err);
      if (!s.ok()) {
        out << "{\"method\":\"promise\",\"error\":\"" << s.message() << "\"}\n";
      }
      continue;
    }
    if (IsStatsMethod(method_name)) {
      std::vector<std::pair<std::string, std::vector<int>>> stat_groups;
      for (const Group& g : groups) stat_groups.push_back({g.name, g.heads});
      StatsLineOptions so;
      so.target = f.search_target_recall;
      so.sample_blocks = std::max(4, f.recall_rows / 16);
      so.block = f.block_m;  // The oracle at the granularity the methods of this run index at.
      so.sample_rows = f.recall_rows > 0 ? f.recall_rows : 64;
      so.seed = f.seed;
      so.table = f.table;
      const std::string prefix =
          absl::StrCat("\"workload\":\"", workload_name, "\",\"seq_len\":", problem.k_len(0),
                       ",\"q_len\":", problem.q_len(0), ",\"num_heads\":", problem.num_q_heads,
                       ",\"kv_heads\":", problem.num_kv_heads, ",\"head_dim\":", problem.head_dim);
      absl::Status s =
          EmitStatsLines(method_name, problem, workload.get(), stat_groups, so, prefix, out);
      if (!s.ok()) {
        out << "{\"method\":\"" << method_name << "\",\"error\":\"" << s.message() << "\"}\n";
      }
      continue;
    }
    const bool guarded = method_name == kGuardedMethod;
    const bool searched = guarded || method_name == kSearchedMethod;
    const std::vector<MethodConfig>& per_head = guarded ? guarded_config_of_head : config_of_head;
    const MethodConfig& config = configs[searched ? Method::kDense : *ParseMethod(method_name)];
    const std::string params =
        guarded ? guard_params : (searched ? search_params : config.DebugString());
    const BuildOptions& options = searched ? search_bo : bo;
    std::vector<Result> done;
    bool all_ok = true;
    for (const Group& g : groups) {
      Result r;
      r.method = method_name;
      r.params = params;
      r.group = g.name;
      r.heads = g.heads;
      absl::Status s = guarded ? guard_status : (searched ? search_status : config.Validate());
      std::vector<ConfigGroup> config_groups;
      if (searched && s.ok()) {
        config_groups = GroupHeadsByConfig(g.heads, per_head);
        r.choices = choice_summary(g.heads, per_head);
      } else {
        config_groups.push_back({config, g.heads});
      }
      std::vector<double> build_ms, kernel_ms, pairs_ms;
      GroupRun run;
      const int runs = f.warmup + f.repeat;
      for (int it = 0; s.ok() && it < runs; ++it) {
        // Builders from other components are trusted by the kernel: check before the first run.
        auto gr = RunConfigGroups(backend->get(), problem, config_groups, options,
                                  /*validate=*/it == 0, /*fetch=*/it == runs - 1);
        if (!gr.ok()) {
          s = gr.status();
          break;
        }
        if (it >= f.warmup) {
          build_ms.push_back(gr->build_ms);
          kernel_ms.push_back(gr->kernel_ms);
          pairs_ms.push_back(gr->pairs_ms);
        }
        if (it == runs - 1) run = std::move(*gr);
      }
      if (s.ok()) {
        r.build_ms = Median(build_ms);
        r.kernel_ms = Median(kernel_ms);
        r.pairs_ms = Median(pairs_ms);
        std::vector<int> rows;
        for (const SparseIndex& index : run.indexes) {
          if (std::find(rows.begin(), rows.end(), index.block_m) == rows.end()) {
            rows.push_back(index.block_m);
          }
        }
        std::sort(rows.begin(), rows.end());
        r.block_rows = absl::StrJoin(rows, ",");
        for (const SparseIndex& index : run.indexes) {
          r.ranges += static_cast<int64_t>(index.range_start.size());
          r.cols += static_cast<int64_t>(index.col_idx.size());
          for (int slot = 0; slot < index.num_heads() && s.ok(); ++slot) {
            auto sf = (*exact)->Score(problem, index, slot);
            if (!sf.ok()) {
              s = sf.status();
            } else {
              r.slots.push_back(*sf);
            }
            r.pairs += ComputedPairs(problem, index, slot);
          }
        }
      }
      if (s.ok()) {
        // The groups together wrote every head of g: compare the full output.
        auto e = (*exact)->OutputError(problem, g.heads);
        if (!e.ok()) s = e.status();
        if (s.ok()) r.rel_l2 = *e;
      }
      if (!s.ok()) {
        r.error = absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
        all_ok = false;
        emit(r);
        continue;
      }
      const FidelitySummary sum = Aggregate(r.slots);
      r.density = sum.density_mean;
      r.density_min = sum.density_min;
      r.density_max = sum.density_max;
      r.recall = sum.recall_mean;
      r.recall_min = sum.recall_min;
      emit(r);
      done.push_back(std::move(r));
    }
    if (groups.size() > 1 && all_ok) {
      Result all;
      all.method = method_name;
      all.params = params;
      all.group = "all";
      all.heads = all_heads;
      if (searched) all.choices = choice_summary(all_heads, per_head);
      for (const Result& r : done) {
        all.build_ms += r.build_ms;
        all.kernel_ms += r.kernel_ms;
        all.pairs += r.pairs;
        all.slots.insert(all.slots.end(), r.slots.begin(), r.slots.end());
      }
      const FidelitySummary sum = Aggregate(all.slots);
      all.density = sum.density_mean;
      all.density_min = sum.density_min;
      all.density_max = sum.density_max;
      all.recall = sum.recall_mean;
      all.recall_min = sum.recall_min;
      auto e = (*exact)->OutputError(problem, all_heads);
      all.rel_l2 = e.ok() ? *e : std::nan("");
      emit(all);
    }
  }

  if (f.table) {
    char buf[512];
    out << "| method | group | density | recall (mean / min) | rel L2 error | index ms | "
           "kernel ms | total ms |\n|---|---|---|---|---|---|---|---|\n";
    for (const Result& r : table_rows) {
      if (!r.error.empty()) {
        out << "| " << r.method << " | " << r.group << " | error: " << r.error << " | | | | | |\n";
        continue;
      }
      std::snprintf(buf, sizeof(buf),
                    "| %s | %s | %.3f | %.3f / %.3f | %.2e | %.1f | %.1f | %.1f |\n",
                    r.method.c_str(), r.group.c_str(), r.density, r.recall, r.recall_min, r.rel_l2,
                    r.build_ms, r.kernel_ms, r.build_ms + r.kernel_ms);
      out << buf;
    }
  }
  return 0;
}

}  // namespace spattn
