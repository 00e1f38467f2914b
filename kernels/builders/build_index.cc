#include "kernels/builders/build_index.h"

#include "absl/strings/str_cat.h"
#include "kernels/builders/anchor.h"
#include "kernels/builders/block_sparse.h"
#include "kernels/builders/flex_prefill.h"
#include "kernels/builders/saap.h"
#include "kernels/builders/sample_attention.h"
#include "kernels/builders/sampled_lines.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/builders/vertical_slash.h"

namespace spattn {

absl::Status BuildSparseIndex(const AttentionProblem& problem, const MethodConfig& config,
                              const std::vector<int>& heads, const BuildOptions& options,
                              SparseIndex* out) {
  absl::Status s = config.Validate();
  if (!s.ok()) return s;
  if (problem.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("CPU index builders need Q/K in host memory");
  }
  for (int h : heads) {
    if (h < 0 || h >= problem.num_q_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads: ", h, " is not a q head (num_q_heads = ", problem.num_q_heads, ")"));
    }
  }
  switch (config.method) {
    case Method::kDense:
      return BuildDenseIndex(problem, heads, options.block_m, out);
    case Method::kAShape:
      return BuildAShapeIndex(problem, config.a_shape, heads, options.block_m, out);
    case Method::kVerticalSlash:
      return BuildVerticalSlashIndex(problem, config.vertical_slash, heads, options.block_m, out);
    case Method::kBlockSparse:
      return BuildBlockSparseIndex(problem, config.block_sparse, heads, out);
    case Method::kFlexPrefill:
      return BuildFlexPrefillIndex(problem, config.flex_prefill, heads, out);
    case Method::kSampleAttention:
      return BuildSampleAttentionIndex(problem, config.sample_attention, heads, out);
    case Method::kAnchor:
      return BuildAnchorIndex(problem, config.anchor, heads, out);
    case Method::kSaap:
      return BuildSaapIndex(problem, config.saap, heads, options.maybe_assets, options.block_m,
                            out);
    case Method::kSampledLines:
      return BuildSampledLinesIndex(problem, config.sampled_lines, heads,
                                    options.BlockRowsFor(Method::kSampledLines), out,
                                    options.sampled_lines_gammas);
  }
  return absl::InvalidArgumentError("method: unknown value");
}

namespace {

// `c` with its per-head parameters at one value (their defaults).
MethodConfig WithoutHeadParams(const MethodConfig& c) {
  MethodConfig x = c;
  if (x.method == Method::kSampledLines) x.sampled_lines.gamma = SampledLinesParams().gamma;
  return x;
}

}  // namespace

bool SameBuildGroup(const MethodConfig& a, const MethodConfig& b) {
  return SameGroupConfig(WithoutHeadParams(a), WithoutHeadParams(b));
}

std::string BuildGroupKey(const MethodConfig& config) {
  return WithoutHeadParams(config).DebugString();
}

BuildOptions BuildOptionsForHeads(const BuildOptions& base,
                                  const std::vector<MethodConfig>& configs) {
  BuildOptions o = base;
  o.sampled_lines_gammas.clear();
  if (configs.empty() || configs[0].method != Method::kSampledLines) return o;
  bool differ = false;
  for (const MethodConfig& c : configs) {
    differ = differ || c.sampled_lines.gamma != configs[0].sampled_lines.gamma;
  }
  if (!differ) return o;
  o.sampled_lines_gammas.reserve(configs.size());
  for (const MethodConfig& c : configs) o.sampled_lines_gammas.push_back(c.sampled_lines.gamma);
  return o;
}

bool CpuBuilderAvailable(Method method) {
  // Probe with an empty problem: an unimplemented builder says so before reading anything.
  AttentionProblem probe;
  probe.cu_seqlens_q = {0, 0};
  probe.cu_seqlens_k = {0, 0};
  probe.num_q_heads = probe.num_kv_heads = 1;
  probe.head_dim = 64;
  probe.softmax_scale = 0.125f;
  SetContiguousStrides(&probe);
  MethodConfig config;
  config.method = method;
  SparseIndex index;
  LayerAssets no_assets;
  BuildOptions options;
  options.maybe_assets = &no_assets;
  const absl::Status s = BuildSparseIndex(probe, config, {}, options, &index);
  return s.code() != absl::StatusCode::kUnimplemented;
}

}  // namespace spattn
