#include "server/recall_guard.h"

#include <algorithm>
#include <vector>

#include "kernels/fidelity.h"
#include "kernels/sparse_index.h"

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

absl::StatusOr<GuardedHead> GuardHead(const AttentionProblem& host, const SparseIndex& index,
                                      int slot, const MethodConfig& config, bool widen,
                                      const GuardBuildFn& build,
                                      const RecallGuardOptions& options) {
  GuardedHead g;
  g.head = index.heads[slot];
  g.config = config;
  if (config.method == Method::kDense || options.probe_rows <= 0) return g;
  absl::StatusOr<double> est =
      AttentionMassRecall(host, index, slot, options.probe_rows, options.seed);
  if (!est.ok()) return est.status();
  g.estimate = *est;
  if (!widen || options.target <= 0) return g;
  const double need = std::min(1.0, options.target + options.margin);
  // Each step tries the current config widened and (once) the adaptive method, keeps the
  // cheapest (fewest computed pairs) that reaches `need`, else continues from the best estimate.
  struct Try {
    MethodConfig config;
    SparseIndex index;
    double estimate = 0;
    int64_t pairs = 0;
  };
  if (g.estimate >= need) return g;
  MethodConfig current = config;
  bool adaptive_tried =
      config.method == options.adaptive.method || options.adaptive.method == Method::kDense;
  bool have_best = false;
  Try best;  // the cheapest try so far that reaches `need`
  auto consider = [&](Try&& t) {
    if (t.estimate >= need && (!have_best || t.pairs < best.pairs)) {
      best = std::move(t);
      have_best = true;
    }
  };
  auto attempt = [&](const MethodConfig& c, Try* t) -> absl::Status {
    t->config = c;
    absl::Status s = build(c, {g.head}, &t->index);
    if (!s.ok()) return s;
    ++g.widened;
    absl::StatusOr<double> e =
        AttentionMassRecall(host, t->index, 0, options.probe_rows, options.seed);
    if (!e.ok()) return e.status();
    t->estimate = *e;
    t->pairs = ComputedPairs(host, t->index, 0);
    return absl::OkStatus();
  };
  for (int step = 0; step < options.max_widen; ++step) {
    if (!adaptive_tried) {
      MethodConfig a = options.adaptive;
      if (a.method == Method::kFlexPrefill) {
        a.flex_prefill.gamma = std::max(a.flex_prefill.gamma, static_cast<float>(options.target));
      }
      Try t;
      absl::Status s = attempt(a, &t);
      if (!s.ok()) return s;
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
    absl::Status s = attempt(next, &t);
    if (!s.ok()) return s;
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
  SparseIndex rebuilt;
  absl::Status s = build(dense, {g.head}, &rebuilt);
  if (!s.ok()) return s;
  ++g.widened;
  g.config = dense;
  g.index = std::move(rebuilt);
  g.replaced = true;
  g.estimate = 1.0;
  return g;
}

}  // namespace spattn
