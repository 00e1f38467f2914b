#include "kernels/method_config.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spattn {
namespace {

MethodParam Int(Method m, const char* name, ParamRange range, int* (*field)(MethodConfig*)) {
  return MethodParam{m,     name,    ParamType::kInt, range, /*splits_groups=*/true,
                     field, nullptr, nullptr};
}

MethodParam Float(Method m, const char* name, ParamRange range, float* (*field)(MethodConfig*)) {
  return MethodParam{m,     name,   ParamType::kFloat, range, /*splits_groups=*/true, nullptr,
                     field, nullptr};
}

MethodParam Bool(Method m, const char* name, bool* (*field)(MethodConfig*)) {
  return MethodParam{
      m, name, ParamType::kBool, ParamRange::kAny, /*splits_groups=*/true, nullptr, nullptr, field};
}

// The table. One row per parameter; the struct initializers are the defaults.
std::vector<MethodParam> MakeMethodParams() {
  using M = Method;
  using R = ParamRange;
  return {
      Int(M::kAShape, "sink_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->a_shape.sink_tokens; }),
      Int(M::kAShape, "local_tokens", R::kPositive,
          [](MethodConfig* c) { return &c->a_shape.local_tokens; }),

      Int(M::kVerticalSlash, "last_q", R::kPositive,
          [](MethodConfig* c) { return &c->vertical_slash.last_q; }),
      Int(M::kVerticalSlash, "vertical_size", R::kNonNegative,
          [](MethodConfig* c) { return &c->vertical_slash.vertical_size; }),
      Int(M::kVerticalSlash, "slash_size", R::kNonNegative,
          [](MethodConfig* c) { return &c->vertical_slash.slash_size; }),
      Int(M::kVerticalSlash, "forced_columns", R::kNonNegative,
          [](MethodConfig* c) { return &c->vertical_slash.forced_columns; }),
      Int(M::kVerticalSlash, "forced_diagonals", R::kPositive,
          [](MethodConfig* c) { return &c->vertical_slash.forced_diagonals; }),

      Int(M::kBlockSparse, "block_size", R::kBlockSize,
          [](MethodConfig* c) { return &c->block_sparse.block_size; }),
      Int(M::kBlockSparse, "top_k", R::kPositive,
          [](MethodConfig* c) { return &c->block_sparse.top_k; }),

      Float(M::kFlexPrefill, "gamma", R::kUnitInterval,
            [](MethodConfig* c) { return &c->flex_prefill.gamma; }),
      Float(M::kFlexPrefill, "tau", R::kNonNegative,
            [](MethodConfig* c) { return &c->flex_prefill.tau; }),
      Int(M::kFlexPrefill, "min_budget", R::kNonNegative,
          [](MethodConfig* c) { return &c->flex_prefill.min_budget; }),
      Int(M::kFlexPrefill, "max_budget", R::kNonNegative,
          [](MethodConfig* c) { return &c->flex_prefill.max_budget; }),
      Int(M::kFlexPrefill, "block_size", R::kBlockSize,
          [](MethodConfig* c) { return &c->flex_prefill.block_size; }),
      Bool(M::kFlexPrefill, "flatten", [](MethodConfig* c) { return &c->flex_prefill.flatten; }),

      Float(M::kSampleAttention, "alpha_c", R::kUnitInterval,
            [](MethodConfig* c) { return &c->sample_attention.alpha_c; }),
      Float(M::kSampleAttention, "alpha_s", R::kUnitInterval,
            [](MethodConfig* c) { return &c->sample_attention.alpha_s; }),
      Int(M::kSampleAttention, "chunk_n", R::kPositive,
          [](MethodConfig* c) { return &c->sample_attention.chunk_n; }),
      Int(M::kSampleAttention, "block_size", R::kBlockSize,
          [](MethodConfig* c) { return &c->sample_attention.block_size; }),
      Int(M::kSampleAttention, "local_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->sample_attention.local_tokens; }),

      Float(M::kAnchor, "theta", R::kPositive, [](MethodConfig* c) { return &c->anchor.theta; }),
      Int(M::kAnchor, "step", R::kPositive, [](MethodConfig* c) { return &c->anchor.step; }),
      Int(M::kAnchor, "block_size", R::kBlockSize,
          [](MethodConfig* c) { return &c->anchor.block_size; }),
      Int(M::kAnchor, "init_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->anchor.init_tokens; }),

      Int(M::kSaap, "num_centroids", R::kPositive,
          [](MethodConfig* c) { return &c->saap.num_centroids; }),
      Int(M::kSaap, "top_l", R::kPositive, [](MethodConfig* c) { return &c->saap.top_l; }),
      Int(M::kSaap, "sink_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->saap.sink_tokens; }),
      Int(M::kSaap, "local_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->saap.local_tokens; }),
      Int(M::kSaap, "classify_rows", R::kPositive,
          [](MethodConfig* c) { return &c->saap.classify_rows; }),

      Float(M::kSampledLines, "gamma", R::kUnitInterval,
            [](MethodConfig* c) { return &c->sampled_lines.gamma; }),
      Int(M::kSampledLines, "rows_per_block", R::kPositive,
          [](MethodConfig* c) { return &c->sampled_lines.rows_per_block; }),
      Int(M::kSampledLines, "last_q", R::kPositive,
          [](MethodConfig* c) { return &c->sampled_lines.last_q; }),
      Int(M::kSampledLines, "sink_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->sampled_lines.sink_tokens; }),
      Int(M::kSampledLines, "local_tokens", R::kNonNegative,
          [](MethodConfig* c) { return &c->sampled_lines.local_tokens; }),
      Float(M::kSampledLines, "diagonal_floor", R::kPositive,
            [](MethodConfig* c) { return &c->sampled_lines.diagonal_floor; }),
      Bool(M::kSampledLines, "edge_rows",
           [](MethodConfig* c) { return &c->sampled_lines.edge_rows; }),
      Float(M::kSampledLines, "diagonal_cost", R::kNonNegative,
            [](MethodConfig* c) { return &c->sampled_lines.diagonal_cost; }),
      Bool(M::kSampledLines, "clip_diagonals",
           [](MethodConfig* c) { return &c->sampled_lines.clip_diagonals; }),
      Float(M::kSampledLines, "short_floor", R::kNonNegative,
            [](MethodConfig* c) { return &c->sampled_lines.short_floor; }),
  };
}

// Checks across parameters that the table's per-parameter ranges cannot express.
absl::Status CrossCheck(const MethodConfig& c) {
  if (c.method == Method::kFlexPrefill) {
    const FlexPrefillParams& p = c.flex_prefill;
    if (p.max_budget != 0 && p.max_budget < p.min_budget) {
      return absl::InvalidArgumentError(
          absl::StrCat("flex_prefill.max_budget must be 0 (no limit) or >= "
                       "flex_prefill.min_budget (",
                       p.min_budget, "), got ", p.max_budget));
    }
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
    case Method::kSampledLines:
      return "sampled_lines";
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
                   "sample_attention, anchor, saap or sampled_lines)"));
}

double MethodParam::Get(const MethodConfig& c) const {
  MethodConfig& m = const_cast<MethodConfig&>(c);  // the accessors only take addresses
  switch (type) {
    case ParamType::kInt:
      return *int_field(&m);
    case ParamType::kFloat:
      return *float_field(&m);
    case ParamType::kBool:
      return *bool_field(&m) ? 1 : 0;
  }
  return 0;
}

void MethodParam::Set(double value, MethodConfig* c) const {
  switch (type) {
    case ParamType::kInt:
      *int_field(c) = static_cast<int>(value);
      break;
    case ParamType::kFloat:
      *float_field(c) = static_cast<float>(value);
      break;
    case ParamType::kBool:
      *bool_field(c) = value != 0;
      break;
  }
}

std::string MethodParam::Format(const MethodConfig& c) const {
  MethodConfig& m = const_cast<MethodConfig&>(c);
  switch (type) {
    case ParamType::kInt:
      return absl::StrCat(*int_field(&m));
    case ParamType::kFloat:
      return absl::StrCat(*float_field(&m));
    case ParamType::kBool:
      return *bool_field(&m) ? "true" : "false";
  }
  return "";
}

absl::Status MethodParam::Parse(absl::string_view text, MethodConfig* c) const {
  const std::string dotted = absl::StrCat(MethodName(method), ".", name);
  switch (type) {
    case ParamType::kInt:
      if (!absl::SimpleAtoi(text, int_field(c))) {
        return absl::InvalidArgumentError(absl::StrCat(dotted, ": not an integer: '", text, "'"));
      }
      return absl::OkStatus();
    case ParamType::kFloat:
      if (!absl::SimpleAtof(text, float_field(c))) {
        return absl::InvalidArgumentError(absl::StrCat(dotted, ": not a number: '", text, "'"));
      }
      return absl::OkStatus();
    case ParamType::kBool:
      if (text != "true" && text != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat(dotted, ": expected true or false, got '", text, "'"));
      }
      *bool_field(c) = text == "true";
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status MethodParam::Check(const MethodConfig& c) const {
  const double v = Get(c);
  const char* m = MethodName(method);
  switch (range) {
    case ParamRange::kAny:
      return absl::OkStatus();
    case ParamRange::kPositive:
      if (v > 0 && std::isfinite(v)) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(m, ".", name, " must be > 0, got ", v));
    case ParamRange::kNonNegative:
      if (v >= 0 && std::isfinite(v)) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(m, ".", name, " must be >= 0, got ", v));
    case ParamRange::kUnitInterval:
      if (v > 0 && v <= 1) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(m, ".", name, " must be in (0, 1], got ", v));
    case ParamRange::kBlockSize:
      if (v == 16 || v == 32 || v == 64 || v == 128) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(m, ".", name, " must be 16, 32, 64 or 128, got ", v));
  }
  return absl::OkStatus();
}

const std::vector<MethodParam>& MethodParams() {
  static const auto* const kParams = new std::vector<MethodParam>(MakeMethodParams());
  return *kParams;
}

std::vector<const MethodParam*> ParamsOf(Method m) {
  std::vector<const MethodParam*> out;
  for (const MethodParam& p : MethodParams()) {
    if (p.method == m) out.push_back(&p);
  }
  return out;
}

const MethodParam* FindParam(Method m, absl::string_view name) {
  for (const MethodParam& p : MethodParams()) {
    if (p.method == m && name == p.name) return &p;
  }
  return nullptr;
}

bool SameGroupConfig(const MethodConfig& a, const MethodConfig& b) {
  if (a.method != b.method) return false;
  for (const MethodParam* p : ParamsOf(a.method)) {
    if (p->splits_groups && p->Get(a) != p->Get(b)) return false;
  }
  return true;
}

absl::Status SetMethodParam(absl::string_view dotted, absl::string_view value, MethodConfig* c) {
  const size_t dot = dotted.find('.');
  if (dot == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("param '", dotted, "': expected METHOD.PARAM=VALUE"));
  }
  absl::StatusOr<Method> method = ParseMethod(dotted.substr(0, dot));
  if (!method.ok()) return method.status();
  const absl::string_view name = dotted.substr(dot + 1);
  if (const MethodParam* p = FindParam(*method, name)) return p->Parse(value, c);
  std::vector<std::string> known;
  for (const MethodParam* p : ParamsOf(*method)) known.push_back(p->name);
  return absl::InvalidArgumentError(
      absl::StrCat(dotted, ": unknown parameter of ", MethodName(*method),
                   " (known: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
}

absl::Status MethodConfig::Validate() const {
  if (!ParseMethod(MethodName(method)).ok())
    return absl::InvalidArgumentError("method: unknown value");
  for (const MethodParam* p : ParamsOf(method)) {
    if (absl::Status s = p->Check(*this); !s.ok()) return s;
  }
  return CrossCheck(*this);
}

std::string MethodConfig::DebugString() const {
  const std::vector<const MethodParam*> params = ParamsOf(method);
  if (params.empty()) return MethodName(method);
  std::string out = absl::StrCat(MethodName(method), "(");
  for (size_t i = 0; i < params.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", params[i]->name, "=", params[i]->Format(*this));
  }
  return out + ")";
}

}  // namespace spattn
