#include "server/recall_guard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/sampled_lines.h"
#include "kernels/fidelity.h"
#include "kernels/sparse_index.h"
#include "kernels/status_macros.h"

namespace spattn {

MethodConfig ScaleConfigToLength(const MethodConfig& config, int64_t calibrated_tokens,
                                 int64_t served_tokens, double exponent) {
  MethodConfig c = config;
  if (calibrated_tokens <= 0 || served_tokens <= 0 || calibrated_tokens == served_tokens) {
    return c;
  }
  const double f = std::pow(
      static_cast<double>(served_tokens) / static_cast<double>(calibrated_tokens), exponent);
  auto scale = [f](int* v) {
    if (*v <= 0) return;  // 0 = none (flex_prefill budgets)
    const double x = std::round(*v * f);
    *v = static_cast<int>(std::clamp(x, 1.0, double{1 << 30}));
  };
  switch (config.method) {
    case Method::kAShape:
      scale(&c.a_shape.local_tokens);
      break;
    case Method::kVerticalSlash:
      scale(&c.vertical_slash.vertical_size);
      scale(&c.vertical_slash.slash_size);
      break;
    case Method::kBlockSparse:
      scale(&c.block_sparse.top_k);
      break;
    case Method::kFlexPrefill:
      scale(&c.flex_prefill.min_budget);
      if (c.flex_prefill.max_budget > 0) scale(&c.flex_prefill.max_budget);
      break;
    case Method::kDense:
    case Method::kSampleAttention:
    case Method::kAnchor:
    case Method::kSaap:
    case Method::kSampledLines:  // mass thresholds and fixed sink/local windows: nothing scales
      break;
  }
  return c;
}

bool WidenConfig(const MethodConfig& config, MethodConfig* wider) {
  return WidenConfigBy(config, 2.0, wider);
}

bool WidenConfigBy(const MethodConfig& config, double factor, MethodConfig* wider) {
  *wider = config;
  factor = std::clamp(factor, 1.0, 2.0);
  // Key counts: x factor, at least one more.
  auto more = [factor](int floor, int v) {
    const int x = std::max(floor, v);
    return std::max(x + 1, static_cast<int>(std::ceil(x * factor - 1e-9)));
  };
  // Mass thresholds: the gap to 1 shrinks by the factor (2: halfway).
  auto closer = [factor](float x) { return 1.0f - (1.0f - x) / static_cast<float>(factor); };
  switch (config.method) {
    case Method::kDense:
      return false;
    case Method::kAShape:
      wider->a_shape.local_tokens = more(64, config.a_shape.local_tokens);
      return true;
    case Method::kVerticalSlash:
      wider->vertical_slash.vertical_size = more(32, config.vertical_slash.vertical_size);
      wider->vertical_slash.slash_size = more(32, config.vertical_slash.slash_size);
      return true;
    case Method::kBlockSparse:
      wider->block_sparse.top_k = more(1, config.block_sparse.top_k);
      return true;
    case Method::kFlexPrefill:
      wider->flex_prefill.gamma = closer(config.flex_prefill.gamma);
      wider->flex_prefill.min_budget = more(64, config.flex_prefill.min_budget);
      if (wider->flex_prefill.max_budget > 0) {
        wider->flex_prefill.max_budget = more(1, config.flex_prefill.max_budget);
      }
      return true;
    case Method::kSampleAttention:
      wider->sample_attention.alpha_c = closer(config.sample_attention.alpha_c);
      wider->sample_attention.alpha_s = closer(config.sample_attention.alpha_s);
      return true;
    case Method::kAnchor:
      wider->anchor.theta = config.anchor.theta + static_cast<float>(4.0 * std::log2(factor));
      return true;
    case Method::kSaap:
      wider->saap.top_l = more(1, config.saap.top_l);
      return true;
    case Method::kSampledLines:
      wider->sampled_lines.gamma = closer(config.sampled_lines.gamma);
      return true;
  }
  return false;
}

double LadderStepFactor(double estimate, double need, const RecallGuardOptions& options) {
  if (options.fine_step <= 1.0 || options.fine_step >= 2.0) return 2.0;
  const double missing = 1.0 - estimate;
  if (missing <= 0 || estimate >= need) return options.fine_step;
  const double r = (need - estimate) / missing;
  if (r >= 1.0) return 2.0;
  return 1.0 / (1.0 - r) <= options.fine_step ? options.fine_step : 2.0;
}

MethodConfig AdaptiveConfig(const RecallGuardOptions& options) {
  return AdaptiveConfig(options.adaptive, options);
}

MethodConfig AdaptiveConfig(const MethodConfig& adaptive, const RecallGuardOptions& options) {
  MethodConfig a = adaptive;
  if (a.method == Method::kFlexPrefill) {
    a.flex_prefill.gamma = std::max(a.flex_prefill.gamma, static_cast<float>(options.target));
  } else if (a.method == Method::kSampledLines) {
    // The one rule of sampled_lines' gamma (kernels/builders/sampled_lines.h), asked with the
    // guard's margin (the calibration search asks it with none): at least target + margin, the
    // estimate this try must show. At least the adaptive's own gamma.
    a.sampled_lines.gamma =
        std::max(a.sampled_lines.gamma,
                 static_cast<float>(SampledLinesGammaFor(options.target, options.margin)));
  }
  return a;
}

absl::StatusOr<MethodConfig> AdaptiveByName(absl::string_view name) {
  MethodConfig c;  // dense: no adaptive try
  if (name == "flex_prefill") return RecallGuardOptions::DefaultAdaptive();
  if (name == "sampled_lines") {
    c.method = Method::kSampledLines;  // its defaults (gamma 0.95, raised by AdaptiveConfig)
    return c;
  }
  if (name == "none") return c;
  return absl::InvalidArgumentError(absl::StrCat("recall guard: adaptive method '", name,
                                                 "' is not sampled_lines, flex_prefill or none"));
}

absl::Status SetAdaptiveTries(absl::string_view spec, RecallGuardOptions* options) {
  if (spec == kAdaptiveAuto) {
    options->adaptive = RecallGuardOptions::DefaultAdaptive();
    options->adaptive_also = MethodConfig();
    options->adaptive_auto = true;
    return absl::OkStatus();
  }
  const std::vector<std::string> names = absl::StrSplit(spec, ',');
  for (const std::string& name : names) {
    if (name == kAdaptiveAuto) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recall guard: 'auto' picks the adaptive tries per head and takes no other method, got '",
          spec, "'"));
    }
  }
  if (names.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("recall guard: at most two adaptive methods, got '", spec, "'"));
  }
  SPATTN_ASSIGN_OR_RETURN(MethodConfig first, AdaptiveByName(names[0]));
  MethodConfig second;  // dense: none
  if (names.size() == 2) {
    SPATTN_ASSIGN_OR_RETURN(second, AdaptiveByName(names[1]));
  }
  options->adaptive = first;
  options->adaptive_also = second;
  options->adaptive_auto = false;
  return absl::OkStatus();
}

std::pair<MethodConfig, MethodConfig> AdaptiveTriesFor(Method configured,
                                                       const RecallGuardOptions& options) {
  if (!options.adaptive_auto) return {options.adaptive, options.adaptive_also};
  if (configured == Method::kSampledLines) {
    MethodConfig sl;
    sl.method = Method::kSampledLines;  // its defaults (gamma raised by AdaptiveConfig)
    return {sl, RecallGuardOptions::DefaultAdaptive()};
  }
  return {RecallGuardOptions::DefaultAdaptive(), MethodConfig()};
}

absl::StatusOr<std::vector<GuardedHead>> GuardHeads(const std::vector<GuardInput>& heads,
                                                    const GuardBatchOps& ops,
                                                    const RecallGuardOptions& options,
                                                    GuardBatchStats* maybe_stats) {
  GuardBatchStats local_stats;
  GuardBatchStats& stats = maybe_stats != nullptr ? *maybe_stats : local_stats;
  stats = GuardBatchStats();
  const int n = static_cast<int>(heads.size());
  std::vector<GuardedHead> out(n);
  const double need = std::min(1.0, options.target + options.margin);
  // Per head: where its ladder is. A try lives in a Batch (one index for the heads that tried
  // the same config in the same round); the best try is a (batch, slot) reference.
  struct Batch {
    MethodConfig config;                // who[0]'s (the build's, with `configs` per head)
    std::vector<MethodConfig> configs;  // per slot: that head's config
    std::vector<int> who;               // inputs, in slot order
    std::shared_ptr<SparseIndex> index;
    std::vector<double> estimate;
    std::vector<int64_t> pairs;
  };
  struct State {
    MethodConfig current;
    double estimate = 1.0;  // of `current`
    bool active = false;
    bool adaptive_tried = false;
    std::shared_ptr<Batch> best;  // null: no try reached `need` yet
    int best_slot = 0;
  };
  std::vector<State> st(n);
  for (int i = 0; i < n; ++i) {
    const GuardInput& in = heads[i];
    out[i].head = in.head;
    out[i].config = in.config;
    if (in.config.method == Method::kDense || options.probe_rows <= 0) continue;
    out[i].estimate = in.estimate;
    st[i].current = in.config;
    st[i].estimate = in.estimate;
    st[i].active = in.widen && options.target > 0 && in.estimate < need;
  }
  // Per head: its adaptive tries, raised to the target (AdaptiveConfig; dense = none).
  std::vector<std::array<MethodConfig, 2>> adaptive_try(n);
  for (int i = 0; i < n; ++i) {
    const auto [first, second] =
        AdaptiveTriesFor(heads[i].configured.value_or(heads[i].config.method), options);
    adaptive_try[i][0] = first.method == Method::kDense ? first : AdaptiveConfig(first, options);
    adaptive_try[i][1] = second.method == Method::kDense ? second : AdaptiveConfig(second, options);
  }
  bool full = false;  // the device workspace is full: no more tries for anyone
  // Builds, estimates and counts one index per distinct config of `wants` (input, config).
  // A try the backend's builder refuses for this problem (INVALID_ARGUMENT or UNIMPLEMENTED: a
  // GPU builder past its documented limits, e.g. a key-block count its shared memory cannot
  // hold at 1M keys) is skipped: its inputs land in `refused`.
  auto round = [&](const std::vector<std::pair<int, MethodConfig>>& wants,
                   std::vector<std::shared_ptr<Batch>>* batches, int* builds,
                   std::vector<int>* refused) -> absl::Status {
    std::map<std::string, std::shared_ptr<Batch>> by_config;
    for (const auto& [i, c] : wants) {
      std::shared_ptr<Batch>& b = by_config[ops.build_heads ? BuildGroupKey(c) : c.DebugString()];
      if (b == nullptr) {
        b = std::make_shared<Batch>();
        b->config = c;
      }
      b->who.push_back(i);
      b->configs.push_back(c);
    }
    for (auto& [key, b] : by_config) {
      std::vector<int> hs;
      for (int i : b->who) hs.push_back(heads[i].head);
      b->index = std::make_shared<SparseIndex>();
      const absl::Status s = ops.build_heads ? ops.build_heads(b->configs, hs, b->index.get())
                                             : ops.build(b->config, hs, b->index.get());
      if (s.code() == absl::StatusCode::kResourceExhausted) {
        full = true;
        return absl::OkStatus();
      }
      if (s.code() == absl::StatusCode::kInvalidArgument ||
          s.code() == absl::StatusCode::kUnimplemented) {
        refused->insert(refused->end(), b->who.begin(), b->who.end());
        continue;
      }
      if (!s.ok()) return s;
      ++*builds;
      for (int i : b->who) ++out[i].widened;
      SPATTN_ASSIGN_OR_RETURN(b->estimate, ops.estimate(b->index.get()));
      SPATTN_ASSIGN_OR_RETURN(b->pairs, ops.pairs(b->config, b->index.get()));
      if (b->estimate.size() != b->who.size() || b->pairs.size() != b->who.size()) {
        return absl::InternalError("recall guard: estimate or pairs per slot do not match heads");
      }
      batches->push_back(b);
    }
    return absl::OkStatus();
  };
  // Keeps slot `slot` of `b` as input i's best when it reaches `need` and costs less.
  auto consider = [&](int i, const std::shared_ptr<Batch>& b, int slot) {
    State& s = st[i];
    if (b->estimate[slot] >= need &&
        (s.best == nullptr || b->pairs[slot] < s.best->pairs[s.best_slot])) {
      s.best = b;
      s.best_slot = slot;
    }
  };
  for (int step = 0; step < options.max_widen && !full; ++step) {
    int builds = 0;
    // The adaptive methods, once per head, before its first widening (not the head's own
    // method: its widening is that method's ladder).
    // Each head's tries (AdaptiveTriesFor its configured method), first tries of all heads
    // before second ones.
    std::vector<std::pair<int, MethodConfig>> wants;
    for (int k = 0; k < 2; ++k) {
      for (int i = 0; i < n; ++i) {
        if (!st[i].active || st[i].adaptive_tried) continue;
        const MethodConfig& a = adaptive_try[i][k];
        if (a.method == Method::kDense) continue;
        if (k == 1 && a.DebugString() == adaptive_try[i][0].DebugString()) {
          continue;  // the same try twice
        }
        if (heads[i].config.method != a.method) wants.emplace_back(i, a);
      }
    }
    std::vector<std::shared_ptr<Batch>> batches;
    std::vector<int> refused;
    if (!wants.empty()) {
      SPATTN_RETURN_IF_ERROR(round(wants, &batches, &builds, &refused));
      for (const auto& b : batches) {
        for (size_t slot = 0; slot < b->who.size(); ++slot) {
          consider(b->who[slot], b, static_cast<int>(slot));
        }
      }
      // Tried, or refused by the builder: not again.
      if (!full) {
        for (const auto& w : wants) st[w.first].adaptive_tried = true;
      }
    }
    if (full) {
      stats.builds_per_step.push_back(builds);
      break;
    }
    // The head's own config, widened.
    wants.clear();
    for (int i = 0; i < n; ++i) {
      if (!st[i].active) continue;
      MethodConfig next;
      if (!WidenConfigBy(st[i].current, LadderStepFactor(st[i].estimate, need, options), &next)) {
        st[i].active = false;
        continue;
      }
      for (int k = 1; k < options.widen_per_step; ++k) {
        MethodConfig more;
        if (WidenConfig(next, &more)) next = more;
      }
      wants.emplace_back(i, next);
    }
    batches.clear();
    refused.clear();
    if (!wants.empty()) SPATTN_RETURN_IF_ERROR(round(wants, &batches, &builds, &refused));
    stats.builds_per_step.push_back(builds);
    if (full) break;
    for (int i : refused) st[i].active = false;  // no wider config of its method here
    for (const auto& b : batches) {
      for (size_t slot = 0; slot < b->who.size(); ++slot) {
        const int i = b->who[slot];
        State& s = st[i];
        const bool reached = b->estimate[slot] >= need;
        // Wider configs of this method only cost more than one that already costs as much as
        // the best so far.
        const bool no_better = s.best != nullptr && b->pairs[slot] >= s.best->pairs[s.best_slot];
        consider(i, b, static_cast<int>(slot));
        if (reached || no_better) {
          s.active = false;
        } else {
          s.current = b->configs[slot];
          s.estimate = b->estimate[slot];
        }
      }
    }
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || st[i].active;
    if (!any) break;
  }
  // Heads that kept a try: a batch whose heads all kept it is their index as is; the others are
  // rebuilt for the heads that kept it, per batch (with build_heads: per build group, the heads
  // of every such batch of one group in one build, each with its own config). Heads whose
  // widening started and that kept no try: dense, one build for all.
  std::map<Batch*, std::vector<int>> kept;
  std::vector<int> dense;
  for (int i = 0; i < n; ++i) {
    if (st[i].best != nullptr) {
      kept[st[i].best.get()].push_back(i);
    } else if (out[i].config.method != Method::kDense && options.probe_rows > 0 && heads[i].widen &&
               options.target > 0 && heads[i].estimate < need) {
      dense.push_back(i);
    }
  }
  auto keep = [&](int i, const std::shared_ptr<SparseIndex>& index, int slot) {
    const Batch& b = *st[i].best;
    out[i].config = b.configs[st[i].best_slot];
    out[i].estimate = b.estimate[st[i].best_slot];
    out[i].index = index;
    out[i].slot = slot;
    out[i].replaced = true;
  };
  std::map<std::string, std::vector<int>> rebuild;  // build key -> inputs, in input order
  int partial = 0;
  for (auto& [batch, who] : kept) {
    if (who.size() == batch->who.size()) {
      for (int i : who) keep(i, batch->index, st[i].best_slot);
      continue;
    }
    const std::string key =
        ops.build_heads ? BuildGroupKey(batch->config) : absl::StrCat(partial++);
    std::vector<int>& r = rebuild[key];
    r.insert(r.end(), who.begin(), who.end());
  }
  for (auto& [key, who] : rebuild) {
    std::sort(who.begin(), who.end());
    std::vector<int> hs;
    std::vector<MethodConfig> cs;
    for (int i : who) {
      hs.push_back(heads[i].head);
      cs.push_back(st[i].best->configs[st[i].best_slot]);
    }
    auto index = std::make_shared<SparseIndex>();
    SPATTN_RETURN_IF_ERROR(ops.build_heads ? ops.build_heads(cs, hs, index.get())
                                           : ops.build(cs[0], hs, index.get()));
    ++stats.regroup_builds;
    for (size_t k = 0; k < who.size(); ++k) keep(who[k], index, static_cast<int>(k));
  }
  for (int i = 0; i < n; ++i) st[i].best.reset();  // frees the tries nobody kept
  if (!dense.empty()) {
    std::vector<int> hs;
    for (int i : dense) hs.push_back(heads[i].head);
    auto index = std::make_shared<SparseIndex>();
    SPATTN_RETURN_IF_ERROR(ops.build(MethodConfig(), hs, index.get()));
    ++stats.dense_builds;
    for (size_t k = 0; k < dense.size(); ++k) {
      GuardedHead& g = out[dense[k]];
      ++g.widened;
      g.config = MethodConfig();
      g.index = index;
      g.slot = static_cast<int>(k);
      g.replaced = true;
      g.estimate = 1.0;
    }
  }
  return out;
}

absl::StatusOr<GuardedHead> GuardHead(int head, double estimate, const MethodConfig& config,
                                      bool widen, const GuardOps& ops,
                                      const RecallGuardOptions& options) {
  GuardBatchOps batch;
  batch.build = ops.build;
  batch.estimate = [&](SparseIndex* index) -> absl::StatusOr<std::vector<double>> {
    SPATTN_ASSIGN_OR_RETURN(double e, ops.estimate(index));
    return std::vector<double>{e};
  };
  batch.pairs = [&](const MethodConfig& c,
                    SparseIndex* index) -> absl::StatusOr<std::vector<int64_t>> {
    SPATTN_ASSIGN_OR_RETURN(int64_t n, ops.pairs(c, index));
    return std::vector<int64_t>{n};
  };
  GuardInput in;
  in.head = head;
  in.estimate = estimate;
  in.config = config;
  in.widen = widen;
  SPATTN_ASSIGN_OR_RETURN(std::vector<GuardedHead> g, GuardHeads({in}, batch, options));
  return std::move(g[0]);
}

GuardOps HostGuardOps(const AttentionProblem& host, GuardBuildFn build,
                      const RecallGuardOptions& options) {
  GuardOps ops;
  ops.build = std::move(build);
  const AttentionProblem* p = &host;
  const int rows = options.probe_rows;
  const uint64_t seed = options.seed;
  ops.estimate = [p, rows, seed](SparseIndex* index) {
    return AttentionMassRecall(*p, *index, 0, rows, seed);
  };
  ops.pairs = [p](const MethodConfig&, SparseIndex* index) -> absl::StatusOr<int64_t> {
    return ComputedPairs(*p, *index, 0);
  };
  return ops;
}

GuardBatchOps HostGuardBatchOps(const AttentionProblem& host, GuardBuildFn build,
                                const RecallGuardOptions& options) {
  GuardBatchOps ops;
  ops.build = std::move(build);
  const AttentionProblem* p = &host;
  const int rows = options.probe_rows;
  const uint64_t seed = options.seed;
  ops.estimate = [p, rows, seed](SparseIndex* index) -> absl::StatusOr<std::vector<double>> {
    std::vector<double> r(index->num_heads());
    for (int s = 0; s < index->num_heads(); ++s) {
      SPATTN_ASSIGN_OR_RETURN(r[s], AttentionMassRecall(*p, *index, s, rows, seed));
    }
    return r;
  };
  ops.pairs = [p](const MethodConfig&, SparseIndex* index) -> absl::StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> n(index->num_heads());
    for (int s = 0; s < index->num_heads(); ++s) n[s] = ComputedPairs(*p, *index, s);
    return n;
  };
  return ops;
}

absl::StatusOr<GuardedHead> GuardHead(const AttentionProblem& host, const SparseIndex& index,
                                      int slot, const MethodConfig& config, bool widen,
                                      const GuardBuildFn& build,
                                      const RecallGuardOptions& options) {
  if (config.method == Method::kDense || options.probe_rows <= 0) {
    GuardedHead g;
    g.head = index.heads[slot];
    g.config = config;
    return g;
  }
  SPATTN_ASSIGN_OR_RETURN(double est,
                          AttentionMassRecall(host, index, slot, options.probe_rows, options.seed));
  return GuardHead(index.heads[slot], est, config, widen, HostGuardOps(host, build, options),
                   options);
}

std::string GuardMemory::Key(const std::string& model_id, uint64_t version, int layer, int head,
                             const MethodConfig& published, int64_t max_k_len) {
  int length_class = 0;
  while (length_class < 62 && (int64_t{2} << length_class) <= max_k_len) ++length_class;
  return absl::StrCat(model_id, "/", version, "/", layer, "/", head, "/", length_class, "/",
                      published.DebugString());
}

bool GuardMemory::Lookup(const std::string& key, MethodConfig* config) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  *config = it->second;
  return true;
}

void GuardMemory::Remember(const std::string& key, const MethodConfig& config) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.insert_or_assign(key, config);
  if (!inserted) return;
  order_.push_back(key);
  while (static_cast<int>(order_.size()) > max_entries_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

int GuardMemory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace spattn
