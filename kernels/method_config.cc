#include "kernels/method_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

absl::Status Positive(absl::string_view method, absl::string_view param, double value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(method, ".", param, " must be > 0, got ", value));
}

absl::Status NonNegative(absl::string_view method, absl::string_view param, double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(method, ".", param, " must be >= 0, got ", value));
}

absl::Status InUnitInterval(absl::string_view method, absl::string_view param, double value) {
  if (value > 0 && value <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(method, ".", param, " must be in (0, 1], got ", value));
}

absl::Status BlockSize(absl::string_view method, int value) {
  if (value == 16 || value == 32 || value == 64 || value == 128) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(method, ".block_size must be 16, 32, 64 or 128, got ", value));
}

// Runs the checks in order and returns the first failure.
absl::Status First(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

const char* MethodName(Method m) {
  switch (m) {
    case Method::kDense:
      return "dense";
    case Method::kAShape:
      return "a_shape";
    case Method::kVerticalSlash:
      return "vertical_slash";
    case Method::kBlockSparse:
      return "block_sparse";
    case Method::kFlexPrefill:
      return "flex_prefill";
    case Method::kSampleAttention:
      return "sample_attention";
    case Method::kAnchor:
      return "anchor";
    case Method::kSaap:
      return "saap";
  }
  return "unknown";
}

absl::StatusOr<Method> ParseMethod(absl::string_view name) {
  for (Method m : kAllMethods) {
    if (name == MethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("method: unknown '", name,
                   "' (expected dense, a_shape, vertical_slash, block_sparse, flex_prefill, "
                   "sample_attention, anchor or saap)"));
}

absl::Status MethodConfig::Validate() const {
  switch (method) {
    case Method::kDense:
      return absl::OkStatus();
    case Method::kAShape:
      return First({NonNegative("a_shape", "sink_tokens", a_shape.sink_tokens),
                    Positive("a_shape", "local_tokens", a_shape.local_tokens)});
    case Method::kVerticalSlash: {
      const VerticalSlashParams& p = vertical_slash;
      return First({Positive("vertical_slash", "last_q", p.last_q),
                    NonNegative("vertical_slash", "vertical_size", p.vertical_size),
                    NonNegative("vertical_slash", "slash_size", p.slash_size),
                    NonNegative("vertical_slash", "forced_columns", p.forced_columns),
                    Positive("vertical_slash", "forced_diagonals", p.forced_diagonals)});
    }
    case Method::kBlockSparse:
      return First({BlockSize("block_sparse", block_sparse.block_size),
                    Positive("block_sparse", "top_k", block_sparse.top_k)});
    case Method::kFlexPrefill: {
      const FlexPrefillParams& p = flex_prefill;
      return First({InUnitInterval("flex_prefill", "gamma", p.gamma),
                    NonNegative("flex_prefill", "tau", p.tau),
                    NonNegative("flex_prefill", "min_budget", p.min_budget),
                    NonNegative("flex_prefill", "max_budget", p.max_budget),
                    BlockSize("flex_prefill", p.block_size),
                    p.max_budget == 0 || p.max_budget >= p.min_budget
                        ? absl::OkStatus()
                        : absl::InvalidArgumentError(
                              absl::StrCat("flex_prefill.max_budget must be 0 (no limit) or >= "
                                           "flex_prefill.min_budget (",
                                           p.min_budget, "), got ", p.max_budget))});
    }
    case Method::kSampleAttention: {
      const SampleAttentionParams& p = sample_attention;
      return First({InUnitInterval("sample_attention", "alpha_c", p.alpha_c),
                    InUnitInterval("sample_attention", "alpha_s", p.alpha_s),
                    Positive("sample_attention", "chunk_n", p.chunk_n),
                    BlockSize("sample_attention", p.block_size),
                    NonNegative("sample_attention", "local_tokens", p.local_tokens)});
    }
    case Method::kAnchor:
      return First({Positive("anchor", "theta", anchor.theta),
                    Positive("anchor", "step", anchor.step), BlockSize("anchor", anchor.block_size),
                    NonNegative("anchor", "init_tokens", anchor.init_tokens)});
    case Method::kSaap:
      return First({Positive("saap", "num_centroids", saap.num_centroids),
                    Positive("saap", "top_l", saap.top_l),
                    NonNegative("saap", "sink_tokens", saap.sink_tokens),
                    NonNegative("saap", "local_tokens", saap.local_tokens)});
  }
  return absl::InvalidArgumentError("method: unknown value");
}

std::string MethodConfig::DebugString() const {
  switch (method) {
    case Method::kDense:
      return "dense";
    case Method::kAShape:
      return absl::StrCat("a_shape(sink_tokens=", a_shape.sink_tokens,
                          ", local_tokens=", a_shape.local_tokens, ")");
    case Method::kVerticalSlash: {
      const VerticalSlashParams& p = vertical_slash;
      return absl::StrCat("vertical_slash(last_q=", p.last_q, ", vertical_size=", p.vertical_size,
                          ", slash_size=", p.slash_size, ", forced_columns=", p.forced_columns,
                          ", forced_diagonals=", p.forced_diagonals, ")");
    }
    case Method::kBlockSparse:
      return absl::StrCat("block_sparse(block_size=", block_sparse.block_size,
                          ", top_k=", block_sparse.top_k, ")");
    case Method::kFlexPrefill: {
      const FlexPrefillParams& p = flex_prefill;
      return absl::StrCat("flex_prefill(gamma=", p.gamma, ", tau=", p.tau,
                          ", min_budget=", p.min_budget, ", max_budget=", p.max_budget,
                          ", block_size=", p.block_size, ", flatten=", p.flatten ? "true" : "false",
                          ")");
    }
    case Method::kSampleAttention: {
      const SampleAttentionParams& p = sample_attention;
      return absl::StrCat("sample_attention(alpha_c=", p.alpha_c, ", alpha_s=", p.alpha_s,
                          ", chunk_n=", p.chunk_n, ", block_size=", p.block_size,
                          ", local_tokens=", p.local_tokens, ")");
    }
    case Method::kAnchor:
      return absl::StrCat("anchor(theta=", anchor.theta, ", step=", anchor.step,
                          ", block_size=", anchor.block_size, ", init_tokens=", anchor.init_tokens,
                          ")");
    case Method::kSaap:
      return absl::StrCat("saap(num_centroids=", saap.num_centroids, ", top_l=", saap.top_l,
                          ", sink_tokens=", saap.sink_tokens, ", local_tokens=", saap.local_tokens,
                          ")");
  }
  return "unknown";
}

}  // namespace spattn
