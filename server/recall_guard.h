// The worker's online recall guard (issue 11): a head's published config was calibrated on other
// prompts, often of another length, so the worker checks what each sparse index captures on the
// prompt it serves and widens the head's budget (or falls back to dense) when it falls short.
//
// The estimate is the attention-mass recall of the head's index over `probe_rows` query rows
// stratified over the batch, exact over all allowed keys (kernels/fidelity.h, fixed seed): an
// unbiased estimate of the served mean recall whose error shrinks as 1/sqrt(probe_rows). A head
// whose estimate is below target + margin gets its config widened (WidenConfigBy: budgets x2,
// mass thresholds halfway to 1, or a finer step when the estimate says the shortfall is small:
// LadderStepFactor) and its index rebuilt, up to max_widen times, then dense.
//
// Cost: probe_rows x keys x head_dim multiply-adds per head and try, where the tensors are: on
// the host for the CPU backend (a few percent of the kernel), on the GPU for the CUDA backend
// (kernels/cuda/recall/mass_recall.h: Q, K and the index stay on the device).
#ifndef SPATTN_SERVER_RECALL_GUARD_H_
#define SPATTN_SERVER_RECALL_GUARD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

struct RecallGuardOptions {
  // Recall each guarded head must reach; <= 0 estimates only (no widening). Default: 0.95.
  double target = 0.95;
  // A head is widened while its estimate is below target + margin (the estimate's own sampling
  // error). Default: 0.01.
  double margin = 0.01;
  // Query rows per head of the estimate; 0 turns the guard off (no estimate). Default: 32.
  int probe_rows = 32;
  // Seed of the probe rows (fixed: repeated requests get the same estimate). Default: 0x9a4d.
  uint64_t seed = 0x9a4d;
  // Widening steps before dense; each step applies WidenConfigBy(LadderStepFactor) to the
  // current config, then WidenConfig `widen_per_step` - 1 times more. Defaults: 5 and 1 (an
  // A-shape window of 128 reaches 4096 with doublings).
  int max_widen = 5;
  int widen_per_step = 1;
  // A method whose budget follows the prompt (a cumulative-mass threshold: sampled_lines' or
  // FlexPrefill's gamma, raised per request by AdaptiveConfig), tried once besides the head's
  // own method widened step by step (until it reaches the target or costs as much as the best
  // try): of the tries that reach the target the one with the fewest computed pairs wins, else
  // dense. Method dense skips it. Default: flex_prefill, min budget 512 (DefaultAdaptive).
  // sampled_lines (gamma 0.95, its default rows and windows: per query block the fewest lines
  // reaching gamma of the block's sampled mass, tests/bench/README.md s16-switch) on request
  // (spattn-bench --guard_adaptive=sampled_lines).
  MethodConfig adaptive = DefaultAdaptive();
  // A second adaptive try made with the first (the same rules; a head keeps the cheaper of
  // those that reach the target). Default: dense = none (spattn-bench
  // --guard_adaptive=sampled_lines,flex_prefill sets it).
  MethodConfig adaptive_also;
  // "auto" (SetAdaptiveTries("auto"); the default of spattn-worker --recall_adaptive and of
  // spattn-bench --guard_adaptive): the adaptive tries follow each head's configured method
  // (GuardInput::configured, else its config's), instead of `adaptive` / `adaptive_also` for
  // every head: a head configured sampled_lines tries sampled_lines, then flex_prefill (the
  // tries of guarded_sl, which the calibration's sampled_lines-only search --candidates=auto
  // pairs with), any other head flex_prefill alone (DefaultAdaptive). AdaptiveTriesFor. As
  // always, a try of the method the head runs now is skipped (that method's ladder widens it):
  // a sampled_lines head that runs its own config tries flex_prefill alone, as with
  // flex_prefill; it tries sampled_lines too once the guard started it from a learned
  // flex_prefill config (GuardMemory). Default: false (`adaptive` / `adaptive_also`).
  bool adaptive_auto = false;
  // Finer ladder steps: a widening step multiplies the budgets by `fine_step` instead of 2
  // when the estimate says the shortfall is small (LadderStepFactor); <= 1 or >= 2: always x2.
  // Default: sqrt(2).
  double fine_step = 1.4142135623730951;
  // Exponent e of ScaleConfigToLength: a config calibrated on C keys serving a prompt of S keys
  // starts from its key-count budgets times (S / C)^e. Default: see kLengthExponent.
  double length_exponent = kLengthExponent;

  // SampleAttention (seed 004, Table 4): with each doubling of the length, the share of keys
  // needed for the same attention mass drops by ~20%, i.e. the count grows 1.6x per doubling:
  // e = log2(1.6) = 0.68. tests/bench/README.md (issue 11, s16-scale) measures it on llm_mix.
  static constexpr double kLengthExponent = 0.68;

  // FlexPrefill (min budget 512; gamma raised to the target by AdaptiveConfig). sampled_lines
  // reaches the target with fewer pairs on the CPU, but on the GPU its index build costs more
  // than the pairs it saves: H100, session 16's combined run (bench/results/gpu/
  // h100-2026-11-26-s16), guarded at 32K / 128K with flex_prefill 63.8 / 393.0 ms at density
  // 0.121 / 0.212, with sampled_lines 71.9 / 473.3 ms at 0.163 / 0.367 (sink/local heads whose
  // sampled_lines try fell short went dense). `--guard_adaptive=sampled_lines` selects it.
  static MethodConfig DefaultAdaptive() {
    MethodConfig c;
    c.method = Method::kFlexPrefill;
    c.flex_prefill.min_budget = 512;
    return c;
  }
};

// The adaptive try of a request guarded under `options`: options.adaptive with its mass
// threshold raised to what the target asks. FlexPrefill's gamma: at least the target (as
// before). sampled_lines' gamma: at least SampledLinesGammaFor(target, margin)
// (kernels/builders/sampled_lines.h, the one rule the calibration search asks with no margin):
// target + max(margin, (target - 0.95) / 3), at most 0.999 -- 0.95 / 0.96 / 0.99 at targets
// 0.90 / 0.95 / 0.98 with the default margin 0.01 (0.95: the adaptive's own gamma). gamma is the
// share of the *sampled* rows' mass that each block's lines keep, and the guard keeps the try
// only when the estimate on its own probe rows reaches target + margin, so a gamma at the target
// would land about half of its tries just short of the need (rows not sampled keep about gamma,
// tests/bench/README.md s16-select); the sum of both allowances (0.999 at 0.98) does not fit the
// worker's 8 GiB CUDA workspace at 128K keys. Other methods: as configured.
MethodConfig AdaptiveConfig(const RecallGuardOptions& options);
// The same for `adaptive` instead of options.adaptive (options.adaptive_also).
MethodConfig AdaptiveConfig(const MethodConfig& adaptive, const RecallGuardOptions& options);

// The adaptive try named `name` for flags: "flex_prefill" (the default, DefaultAdaptive: min
// budget 512, gamma from the target), "sampled_lines" (its defaults, gamma raised by
// AdaptiveConfig) or "none" (no adaptive try: method dense). Other names: INVALID_ARGUMENT.
absl::StatusOr<MethodConfig> AdaptiveByName(absl::string_view name);

// `spec` = "M" or "M1,M2" (AdaptiveByName each) into options->adaptive and
// options->adaptive_also (dense = none when one method is named), adaptive_auto false; or
// "auto": adaptive_auto true (adaptive = DefaultAdaptive, adaptive_also = none). For flags
// (spattn-worker --recall_adaptive, spattn-bench --guard_adaptive; both default to "auto").
// INVALID_ARGUMENT for more than two methods, an unknown one, or "auto" in a list; *options is
// unchanged then.
absl::Status SetAdaptiveTries(absl::string_view spec, RecallGuardOptions* options);
inline constexpr char kAdaptiveAuto[] = "auto";

// The adaptive tries (before AdaptiveConfig; method dense = none) of a head configured with
// `configured`: with options.adaptive_auto, {sampled_lines (its defaults), flex_prefill
// (DefaultAdaptive)} for sampled_lines and {flex_prefill, none} for any other method; else
// {options.adaptive, options.adaptive_also}.
std::pair<MethodConfig, MethodConfig> AdaptiveTriesFor(Method configured,
                                                       const RecallGuardOptions& options);

// `config`, calibrated on a prompt of `calibrated_tokens` keys, for a prompt of `served_tokens`
// keys: its budgets that count keys (a_shape local_tokens, vertical_slash vertical_size and
// slash_size, block_sparse top_k, flex_prefill min_budget and max_budget) times
// (served / calibrated)^exponent, rounded, at least 1. Left as they are: the budgets that are
// mass or score thresholds (flex_prefill gamma and tau, sample_attention alphas, anchor theta,
// sampled_lines gamma: they keep the same share of the attention or of the keys at any length
// by construction), Saap's top_l (a share of the C buckets, each of which grows with the keys),
// and the structural sizes (sinks, estimation rows last_q / chunk_n / rows_per_block, forced
// columns and diagonals, local windows of sample_attention, saap and sampled_lines, block
// sizes). Unchanged when either length is <= 0 or they are
// equal.
MethodConfig ScaleConfigToLength(const MethodConfig& config, int64_t calibrated_tokens,
                                 int64_t served_tokens, double exponent);

// `config` with a larger budget (a_shape local x2, vertical_slash vertical and slash x2,
// block_sparse top_k x2, flex_prefill gamma and sample_attention alphas halfway to 1 plus
// flex_prefill min_budget x2, anchor theta + 4, saap top_l x2, sampled_lines gamma halfway to
// 1). False for dense (nothing wider).
bool WidenConfig(const MethodConfig& config, MethodConfig* wider);

// The same with the budgets times `factor` (in (1, 2]; 2 is WidenConfig): key counts x factor
// (rounded up, at least +1), mass thresholds' gap to 1 x 1/factor, anchor theta + 4 log2(factor).
bool WidenConfigBy(const MethodConfig& config, double factor, MethodConfig* wider);

// The factor of a ladder step for a head whose estimate is `estimate`, short of `need`: the
// share of the missing mass still to capture, r = (need - estimate) / (1 - estimate), asks for
// about 1 / (1 - r) times the budget when the missing mass falls off as 1 / budget (a heavy,
// Zipf-like tail: what attention's sorted weights look like past the selected keys). Quantized
// to two steps so that heads of one planner group share their builds: options.fine_step when
// 1 / (1 - r) <= fine_step, else 2.
double LadderStepFactor(double estimate, double need, const RecallGuardOptions& options);

// Builds the index of `heads` under a config (the backend's builder).
using GuardBuildFn = std::function<absl::Status(const MethodConfig& config,
                                                const std::vector<int>& heads, SparseIndex* index)>;

// What the guard asks of the backend for the one head it guards; every index it passes was made
// by `build` for that head alone (slot 0) and keeps its address while the request runs.
struct GuardOps {
  GuardBuildFn build;
  // The recall estimate of slot 0 (probe_rows rows, the options' seed): on the device where
  // the index and Q/K are, else on the host.
  std::function<absl::StatusOr<double>(SparseIndex* index)> estimate;
  // Computed (query, key) pairs of slot 0 (the cost the guard minimizes).
  std::function<absl::StatusOr<int64_t>(const MethodConfig& config, SparseIndex* index)> pairs;
};

struct GuardedHead {
  int head = 0;
  MethodConfig config;    // what the head runs after the guard
  double estimate = 1.0;  // recall estimate of that config's index (1 for dense)
  int widened = 0;        // rebuilds tried (widenings, adaptive, dense)
  bool replaced = false;  // slot `slot` of `index` holds the head's new index, to run instead
  // Heap-held so that its address stays put (a device backend finds its kept copy by address).
  // Shared by the heads the guard widened together: every head of `index` is replaced by it
  // (attend it once), and `slot` is this head's slot in it (0 for GuardHead).
  std::shared_ptr<SparseIndex> index;
  int slot = 0;
};

// Head `head` runs `config` and its index's estimate is `estimate`. When `widen` and the
// estimate is short of the target, rebuilds the head through `ops` with wider configs (the
// head's method widened, options.adaptive; max_widen steps), then dense. A try that finds the
// device workspace full (RESOURCE_EXHAUSTED) ends the widening (the best try so far, else dense).
// A try the builder refuses for this problem (INVALID_ARGUMENT or UNIMPLEMENTED: a GPU builder
// past its limits, e.g. flex_prefill's key blocks at 1M keys) is skipped: the adaptive try is
// not made, a refused widening ends that head's ladder (best so far, else dense). Other errors
// of the estimate or the builder pass through.
absl::StatusOr<GuardedHead> GuardHead(int head, double estimate, const MethodConfig& config,
                                      bool widen, const GuardOps& ops,
                                      const RecallGuardOptions& options);

// The batched guard of one request: what GuardHead decides for each head, but the heads still
// short of the target are widened together, one ladder step for all of them at a time. Each
// step builds one index per distinct config the short heads try (heads of one planner group
// share their configs, so one build per group and step size: the adaptive try, then the
// widened configs; with GuardBatchOps::build_heads one per build group, whatever the heads'
// per-head parameters),
// and estimates and counts each such index once for all its heads. A head's decisions (the
// order of its tries, the cheapest that reaches target + margin, the early stop when a wider
// config costs as much as the best, dense last) are those of GuardHead for the same inputs.
// RESOURCE_EXHAUSTED from a build ends the widening of every head (best so far, else dense).
// The replacement indexes hold exactly the heads that run them: a try index that some of its
// heads did not keep is rebuilt for those that did (the estimate is per head and carries over).
struct GuardInput {
  int head = 0;
  double estimate = 1.0;  // of the head's index under `config`
  MethodConfig config;
  bool widen = true;  // false: estimate only (the request forced this head's config)
  // The head's configured method (its published config's) when `config` is another one (what
  // the guard learned for it, GuardMemory); unset: config.method. Picks the adaptive tries
  // under RecallGuardOptions::adaptive_auto.
  std::optional<Method> configured;
};

// Builds one index of `heads` where head heads[k] runs configs[k] (configs that share one build,
// SameBuildGroup of kernels/builders/build_index.h: the backend's builder with
// BuildOptionsForHeads).
using GuardHeadsBuildFn =
    std::function<absl::Status(const std::vector<MethodConfig>& configs,
                               const std::vector<int>& heads, SparseIndex* index)>;

struct GuardBatchOps {
  GuardBuildFn build;
  // When set, each round builds its tries per build group (BuildGroupKey) through it instead of
  // per distinct config through `build`: heads whose tries differ only in a per-head parameter
  // (sampled_lines' gamma: heads of different gammas widened halfway to 1 land on different
  // gammas) share one build, each head keeping its own config. Default: unset.
  GuardHeadsBuildFn build_heads;
  // Recall estimate of every slot (probe_rows rows, the options' seed), where the index is.
  std::function<absl::StatusOr<std::vector<double>>(SparseIndex* index)> estimate;
  // Computed (query, key) pairs of every slot.
  std::function<absl::StatusOr<std::vector<int64_t>>(const MethodConfig& config,
                                                     SparseIndex* index)>
      pairs;
};

// What GuardHeads did (for tests and benchmarks).
struct GuardBatchStats {
  std::vector<int> builds_per_step;  // ladder steps (adaptive and widened tries of one step)
  int dense_builds = 0;              // 0 or 1: the heads that nothing sparse kept
  int regroup_builds = 0;            // try indexes rebuilt for the subset of heads that kept them
};

absl::StatusOr<std::vector<GuardedHead>> GuardHeads(const std::vector<GuardInput>& heads,
                                                    const GuardBatchOps& ops,
                                                    const RecallGuardOptions& options,
                                                    GuardBatchStats* maybe_stats = nullptr);

// GuardOps over a host problem: AttentionMassRecall and ComputedPairs (kernels/fidelity.h).
GuardOps HostGuardOps(const AttentionProblem& host, GuardBuildFn build,
                      const RecallGuardOptions& options);

// GuardBatchOps over a host problem (every slot of an index).
GuardBatchOps HostGuardBatchOps(const AttentionProblem& host, GuardBuildFn build,
                                const RecallGuardOptions& options);

// On the host: estimates slot `slot` of `index` (built under `config` on `host`), then GuardHead
// with HostGuardOps.
absl::StatusOr<GuardedHead> GuardHead(const AttentionProblem& host, const SparseIndex& index,
                                      int slot, const MethodConfig& config, bool widen,
                                      const GuardBuildFn& build, const RecallGuardOptions& options);

// What the guard learned on earlier requests: per (model, version, layer, head, published
// config, length class = floor(log2(longest sequence))) the config it widened the head to. A
// later request of that class starts there, so that in steady state the guard only estimates
// (no rebuild ladder); it is widened further from there when still short. Thread-safe; at most
// `max_entries` entries (the oldest dropped first).
class GuardMemory {
 public:
  explicit GuardMemory(int max_entries = 65536) : max_entries_(max_entries) {}
  static std::string Key(const std::string& model_id, uint64_t version, int layer, int head,
                         const MethodConfig& published, int64_t max_k_len);
  // The remembered config of `key`, if any.
  bool Lookup(const std::string& key, MethodConfig* config) const;
  void Remember(const std::string& key, const MethodConfig& config);
  int size() const;

 private:
  const int max_entries_;
  mutable std::mutex mu_;
  std::map<std::string, MethodConfig> entries_;  // Guarded by mu_.
  std::deque<std::string> order_;                // Insertion order; guarded by mu_.
};

}  // namespace spattn

#endif  // SPATTN_SERVER_RECALL_GUARD_H_
