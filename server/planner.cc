#include "server/planner.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "server/recall_guard.h"

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
  return SameGroupConfig(a, b);  // the parameter table's splits_groups column
}

bool SameHeadGroup(const MethodConfig& a, const MethodConfig& b) { return SameBuildGroup(a, b); }

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
      const bool own =
          (in.layer < static_cast<int>(m.heads.size()) &&
           h < static_cast<int>(m.heads[in.layer].size()) && m.heads[in.layer][h].has_value()) ||
          &m.For(in.layer, h, in.max_k_len) != &m.For(in.layer, h);
      per_head[h] = &m.For(in.layer, h, in.max_k_len);
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
  std::deque<MethodConfig> scaled;  // length-scaled head configs (per_head points here)
  for (int h = 0; h < n; ++h) {
    plan.dense_fallback |= plan.source[h] == MethodSource::kShortSequence;
    const MethodSource src = plan.source[h];
    const MethodConfig* published = per_head[h];
    if (src == MethodSource::kHeadConfig && in.length_exponent != 0) {
      const int64_t calibrated = in.maybe_model->CalibratedTokens(in.layer, h, in.max_k_len);
      if (calibrated > 0 && calibrated != in.max_k_len) {
        scaled.push_back(
            ScaleConfigToLength(*published, calibrated, in.max_k_len, in.length_exponent));
        per_head[h] = &scaled.back();
      }
    }
    if (in.maybe_learned &&
        (src == MethodSource::kHeadConfig || src == MethodSource::kModelDefault ||
         src == MethodSource::kWorkerDefault)) {
      if (const MethodConfig* learned = in.maybe_learned(h, *published)) per_head[h] = learned;
    }
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
    while (g < static_cast<int>(plan.groups.size()) && !SameHeadGroup(plan.groups[g].config, c)) {
      ++g;
    }
    if (g == static_cast<int>(plan.groups.size())) plan.groups.push_back(HeadGroup{c, {}, {}});
    plan.groups[g].heads.push_back(h);
    plan.groups[g].head_configs.push_back(c);
    plan.group_of_head[h] = g;
  }
  return plan;
}

}  // namespace spattn
