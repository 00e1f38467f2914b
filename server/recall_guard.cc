#include "server/recall_guard.h"

#include <algorithm>

#include "kernels/fidelity.h"

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
  // The ladder of configs to try, in order.
  MethodConfig current = config;
  int steps_on_method = 0;
  bool on_adaptive = config.method == options.adaptive.method;
  while (g.estimate < need) {
    MethodConfig next;
    if (steps_on_method < options.max_widen && WidenConfig(current, &next)) {
      ++steps_on_method;
    } else if (!on_adaptive && options.adaptive.method != Method::kDense) {
      next = options.adaptive;
      if (next.method == Method::kFlexPrefill) {
        next.flex_prefill.gamma = std::max(next.flex_prefill.gamma,
                                           static_cast<float>(1.0 - 0.5 * (1.0 - options.target)));
      }
      on_adaptive = true;
      steps_on_method = 0;
    } else {
      next = MethodConfig();  // dense
    }
    SparseIndex rebuilt;
    absl::Status s = build(next, {g.head}, &rebuilt);
    if (!s.ok()) return s;
    current = next;
    g.config = next;
    g.index = std::move(rebuilt);
    g.replaced = true;
    ++g.widened;
    if (next.method == Method::kDense) {
      g.estimate = 1.0;
      break;
    }
    est = AttentionMassRecall(host, g.index, 0, options.probe_rows, options.seed);
    if (!est.ok()) return est.status();
    g.estimate = *est;
  }
  return g;
}

}  // namespace spattn
