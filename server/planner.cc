#include "server/planner.h"

#include "absl/strings/str_cat.h"

namespace spattn {

const char* MethodSourceName(MethodSource source) {
  switch (source) {
    case MethodSource::kHeadOverride:
      return "head_override";
    case MethodSource::kRequestOverride:
      return "method_override";
    case MethodSource::kHeadConfig:
      return "head_config";
    case MethodSource::kModelDefault:
      return "model_default";
    case MethodSource::kWorkerDefault:
      return "worker_default";
    case MethodSource::kShortSequence:
      return "short_sequence";
  }
  return "unknown";
}

bool SameMethodConfig(const MethodConfig& a, const MethodConfig& b) {
  if (a.method != b.method) return false;
  switch (a.method) {
    case Method::kDense:
      return true;
    case Method::kAShape:
      return a.a_shape.sink_tokens == b.a_shape.sink_tokens &&
             a.a_shape.local_tokens == b.a_shape.local_tokens;
    case Method::kVerticalSlash: {
      const VerticalSlashParams &x = a.vertical_slash, &y = b.vertical_slash;
      return x.last_q == y.last_q && x.vertical_size == y.vertical_size &&
             x.slash_size == y.slash_size && x.forced_columns == y.forced_columns &&
             x.forced_diagonals == y.forced_diagonals;
    }
    case Method::kBlockSparse:
      return a.block_sparse.block_size == b.block_sparse.block_size &&
             a.block_sparse.top_k == b.block_sparse.top_k;
    case Method::kFlexPrefill: {
      const FlexPrefillParams &x = a.flex_prefill, &y = b.flex_prefill;
      return x.gamma == y.gamma && x.tau == y.tau && x.min_budget == y.min_budget &&
             x.max_budget == y.max_budget && x.block_size == y.block_size && x.flatten == y.flatten;
    }
    case Method::kSampleAttention: {
      const SampleAttentionParams &x = a.sample_attention, &y = b.sample_attention;
      return x.alpha_c == y.alpha_c && x.alpha_s == y.alpha_s && x.chunk_n == y.chunk_n &&
             x.block_size == y.block_size && x.local_tokens == y.local_tokens;
    }
    case Method::kAnchor: {
      const AnchorParams &x = a.anchor, &y = b.anchor;
      return x.theta == y.theta && x.step == y.step && x.block_size == y.block_size &&
             x.init_tokens == y.init_tokens;
    }
    case Method::kSaap: {
      const SaapParams &x = a.saap, &y = b.saap;
      return x.num_centroids == y.num_centroids && x.top_l == y.top_l &&
             x.sink_tokens == y.sink_tokens && x.local_tokens == y.local_tokens;
    }
  }
  return false;
}

absl::StatusOr<Plan> MakePlan(const PlanInput& in, const std::function<bool(Method)>& available,
                              const std::string& device) {
  Plan plan;
  const int n = in.num_q_heads;
  std::vector<const MethodConfig*> per_head(n, nullptr);
  plan.source.assign(n, MethodSource::kWorkerDefault);
  const bool short_request = in.dense_below_tokens > 0 && in.max_k_len < in.dense_below_tokens;
  static const MethodConfig* const kDense = new MethodConfig();  // method = kDense
  for (int h = 0; h < n; ++h) {
    if (in.maybe_method_override != nullptr) {
      per_head[h] = in.maybe_method_override;
      plan.source[h] = MethodSource::kRequestOverride;
    } else if (short_request) {
      per_head[h] = kDense;
      plan.source[h] = MethodSource::kShortSequence;
    } else if (in.maybe_model != nullptr) {
      const ModelConfig& m = *in.maybe_model;
      const bool own = in.layer < static_cast<int>(m.heads.size()) &&
                       h < static_cast<int>(m.heads[in.layer].size()) &&
                       m.heads[in.layer][h].has_value();
      per_head[h] = &m.For(in.layer, h);
      plan.source[h] = own ? MethodSource::kHeadConfig : MethodSource::kModelDefault;
    } else {
      per_head[h] = &in.worker_default;
      plan.source[h] = MethodSource::kWorkerDefault;
    }
  }
  if (in.maybe_head_overrides != nullptr) {
    for (const auto& o : *in.maybe_head_overrides) {
      if (o.first < 0 || o.first >= n) {
        return absl::InvalidArgumentError(absl::StrCat("head_overrides: head ", o.first,
                                                       " is not a q head (num_q_heads = ", n, ")"));
      }
      per_head[o.first] = &o.second;
      plan.source[o.first] = MethodSource::kHeadOverride;
    }
  }
  for (int h = 0; h < n; ++h) {
    plan.dense_fallback |= plan.source[h] == MethodSource::kShortSequence;
  }
  plan.group_of_head.assign(n, -1);
  for (int h = 0; h < n; ++h) {
    const MethodConfig& c = *per_head[h];
    if (!available(c.method)) {
      return absl::FailedPreconditionError(
          absl::StrCat("head ", h, ": method ", MethodName(c.method), " (from ",
                       MethodSourceName(plan.source[h]), ") is not available on device ", device));
    }
    int g = 0;
    while (g < static_cast<int>(plan.groups.size()) &&
           !SameMethodConfig(plan.groups[g].config, c)) {
      ++g;
    }
    if (g == static_cast<int>(plan.groups.size())) plan.groups.push_back(HeadGroup{c, {}});
    plan.groups[g].heads.push_back(h);
    plan.group_of_head[h] = g;
  }
  return plan;
}

}  // namespace spattn
