// Planning: which method runs on which head of one request. Heads are grouped by method config so
// that each index builder runs once per group; configs that differ only in a parameter the
// builder takes per head (sampled_lines' gamma, kernels/builders/build_index.h SameBuildGroup)
// share a group, each head keeping its own value. Precedence, highest first: the request's
// head_overrides, its method_override, the head's config in the model, the model's default
// method, the worker's default method. Sequences shorter than a threshold run dense (sparse
// methods gain nothing there), except for heads the request overrides explicitly.
#ifndef SPATTN_SERVER_PLANNER_H_
#define SPATTN_SERVER_PLANNER_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/builders/build_index.h"
#include "kernels/method_config.h"
#include "server/request.h"

namespace spattn {

struct PlanInput {
  int num_q_heads = 0;
  int layer = 0;
  const ModelConfig* maybe_model = nullptr;             // Null: no model config.
  const MethodConfig* maybe_method_override = nullptr;  // Null: none.
  const std::vector<std::pair<int, MethodConfig>>* maybe_head_overrides = nullptr;
  MethodConfig worker_default;  // Without model and override.
  // Every sequence has fewer keys than this: dense everywhere except explicit overrides.
  // 0 = never.
  int dense_below_tokens = 0;
  int max_k_len = 0;  // Longest sequence (keys) of the request.
  // A head config that records its calibration length (HeadConfig.calibrated_tokens) runs
  // ScaleConfigToLength(config, calibrated, max_k_len, length_exponent) (server/recall_guard.h).
  // Default: 0 (configs run as published).
  double length_exponent = 0;
  // When set: for a head that runs a published, model-default or worker-default config, a
  // config to run instead (what the recall guard learned for it, GuardMemory), or null. It is
  // passed the config as published (before length scaling). The returned config must outlive
  // the plan.
  std::function<const MethodConfig*(int head, const MethodConfig& config)> maybe_learned;
};

// Why a head got its method (for logs and tests).
enum class MethodSource {
  kHeadOverride,
  kRequestOverride,
  kHeadConfig,
  kModelDefault,
  kWorkerDefault,
  kShortSequence
};
const char* MethodSourceName(MethodSource source);

struct HeadGroup {
  MethodConfig config;     // heads[0]'s; the group's build runs it with BuildOptionsFor
  std::vector<int> heads;  // Ascending.
  // Per entry of `heads`: the head's own config (`config` but for the per-head parameters:
  // sampled_lines' gamma).
  std::vector<MethodConfig> head_configs;
  // `base` for this group's build: the heads' per-head parameters set (BuildOptionsForHeads).
  BuildOptions BuildOptionsFor(const BuildOptions& base) const {
    return BuildOptionsForHeads(base, head_configs);
  }
};

struct Plan {
  std::vector<HeadGroup> groups;     // Ordered by their first head.
  std::vector<int> group_of_head;    // [num_q_heads]
  std::vector<MethodSource> source;  // [num_q_heads]
  bool dense_fallback = false;       // The short-sequence rule applied.
};

// True when two configs would build the same index (same method, same parameters of it).
bool SameMethodConfig(const MethodConfig& a, const MethodConfig& b);
// True when heads of the two configs share one build (one planner group): SameBuildGroup.
bool SameHeadGroup(const MethodConfig& a, const MethodConfig& b);

// Makes the plan; `available(method)` says whether the executing device can run a method, and
// a head whose method it cannot run fails the plan with FAILED_PRECONDITION naming the head,
// the method and `device`.
absl::StatusOr<Plan> MakePlan(const PlanInput& input, const std::function<bool(Method)>& available,
                              const std::string& device);

}  // namespace spattn

#endif  // SPATTN_SERVER_PLANNER_H_
