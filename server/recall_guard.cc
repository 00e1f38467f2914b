#include "server/recall_guard.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/fidelity.h"
#include "kernels/sparse_index.h"
#include "kernels/status_macros.h"

namespace spattn {

bool WidenConfig(const MethodConfig& config, MethodConfig* wider) {
  *wider = config;
  auto halfway = [](float x) { return 1.0f - 0.5f * (1.0f - x); };
  switch (config.method) {
    case Method::kDense:
      return false;
    case Method::kAShape:
      wider->a_shape.local_tokens = 2 * std::max(64, config.a_shape.local_tokens);
      return true;
    case Method::kVerticalSlash:
      wider->vertical_slash.vertical_size = 2 * std::max(32, config.vertical_slash.vertical_size);
      wider->vertical_slash.slash_size = 2 * std::max(32, config.vertical_slash.slash_size);
      return true;
    case Method::kBlockSparse:
      wider->block_sparse.top_k = 2 * std::max(1, config.block_sparse.top_k);
      return true;
    case Method::kFlexPrefill:
      wider->flex_prefill.gamma = halfway(config.flex_prefill.gamma);
      wider->flex_prefill.min_budget = 2 * std::max(64, config.flex_prefill.min_budget);
      if (wider->flex_prefill.max_budget > 0) wider->flex_prefill.max_budget *= 2;
      return true;
    case Method::kSampleAttention:
      wider->sample_attention.alpha_c = halfway(config.sample_attention.alpha_c);
      wider->sample_attention.alpha_s = halfway(config.sample_attention.alpha_s);
      return true;
    case Method::kAnchor:
      wider->anchor.theta = config.anchor.theta + 4.0f;
      return true;
    case Method::kSaap:
      wider->saap.top_l = 2 * std::max(1, config.saap.top_l);
      return true;
  }
  return false;
}

absl::StatusOr<GuardedHead> GuardHead(int head, double estimate, const MethodConfig& config,
                                      bool widen, const GuardOps& ops,
                                      const RecallGuardOptions& options) {
  GuardedHead g;
  g.head = head;
  g.config = config;
  if (config.method == Method::kDense || options.probe_rows <= 0) return g;
  g.estimate = estimate;
  if (!widen || options.target <= 0) return g;
  const double need = std::min(1.0, options.target + options.margin);
  // Each step tries the current config widened and (once) the adaptive method, keeps the
  // cheapest (fewest computed pairs) that reaches `need`, else continues from the best estimate.
  struct Try {
    MethodConfig config;
    std::unique_ptr<SparseIndex> index;
    double estimate = 0;
    int64_t pairs = 0;
  };
  if (g.estimate >= need) return g;
  MethodConfig current = config;
  bool adaptive_tried =
      config.method == options.adaptive.method || options.adaptive.method == Method::kDense;
  bool have_best = false;
  bool full = false;  // the device workspace is full: no more tries
  Try best;           // the cheapest try so far that reaches `need`
  auto consider = [&](Try&& t) {
    if (t.estimate >= need && (!have_best || t.pairs < best.pairs)) {
      best = std::move(t);
      have_best = true;
    }
  };
  auto attempt = [&](const MethodConfig& c, Try* t) -> absl::Status {
    t->config = c;
    t->index = std::make_unique<SparseIndex>();
    absl::Status s = ops.build(c, {g.head}, t->index.get());
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      full = true;
      return absl::OkStatus();
    }
    if (!s.ok()) return s;
    ++g.widened;
    absl::StatusOr<double> e = ops.estimate(t->index.get());
    if (!e.ok()) return e.status();
    t->estimate = *e;
    absl::StatusOr<int64_t> pairs = ops.pairs(c, t->index.get());
    if (!pairs.ok()) return pairs.status();
    t->pairs = *pairs;
    return absl::OkStatus();
  };
  for (int step = 0; step < options.max_widen && !full; ++step) {
    if (!adaptive_tried) {
      MethodConfig a = options.adaptive;
      if (a.method == Method::kFlexPrefill) {
        a.flex_prefill.gamma = std::max(a.flex_prefill.gamma, static_cast<float>(options.target));
      }
      Try t;
      SPATTN_RETURN_IF_ERROR(attempt(a, &t));
      if (full) break;
      consider(std::move(t));
      adaptive_tried = true;
    }
    MethodConfig next;
    if (!WidenConfig(current, &next)) break;
    for (int i = 1; i < options.widen_per_step; ++i) {
      MethodConfig more;
      if (WidenConfig(next, &more)) next = more;
    }
    Try t;
    SPATTN_RETURN_IF_ERROR(attempt(next, &t));
    if (full) break;
    const bool reached = t.estimate >= need;
    // Wider configs of this method only cost more than one that already costs as much as the
    // best so far.
    const bool no_better = have_best && t.pairs >= best.pairs;
    consider(std::move(t));
    if (reached || no_better) break;
    current = next;
  }
  if (have_best) {
    g.config = best.config;
    g.estimate = best.estimate;
    g.index = std::move(best.index);
    g.replaced = true;
    return g;
  }
  // Nothing sparse reached the target: dense.
  MethodConfig dense;
  auto rebuilt = std::make_unique<SparseIndex>();
  SPATTN_RETURN_IF_ERROR(ops.build(dense, {g.head}, rebuilt.get()));
  ++g.widened;
  g.config = dense;
  g.index = std::move(rebuilt);
  g.replaced = true;
  g.estimate = 1.0;
  return g;
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
