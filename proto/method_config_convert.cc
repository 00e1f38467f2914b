#include "proto/method_config_convert.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The proto oneof case that carries `method`'s parameters (dense has none).
v1::MethodConfig::ParamsCase ParamsCaseOf(Method m) {
  switch (m) {
    case Method::kDense:
      return v1::MethodConfig::PARAMS_NOT_SET;
    case Method::kAShape:
      return v1::MethodConfig::kAShape;
    case Method::kVerticalSlash:
      return v1::MethodConfig::kVerticalSlash;
    case Method::kBlockSparse:
      return v1::MethodConfig::kBlockSparse;
    case Method::kFlexPrefill:
      return v1::MethodConfig::kFlexPrefill;
    case Method::kSampleAttention:
      return v1::MethodConfig::kSampleAttention;
    case Method::kAnchor:
      return v1::MethodConfig::kAnchor;
    case Method::kSaap:
      return v1::MethodConfig::kSaap;
  }
  return v1::MethodConfig::PARAMS_NOT_SET;
}

const char* ParamsCaseName(v1::MethodConfig::ParamsCase c) {
  switch (c) {
    case v1::MethodConfig::kAShape:
      return "a_shape";
    case v1::MethodConfig::kVerticalSlash:
      return "vertical_slash";
    case v1::MethodConfig::kBlockSparse:
      return "block_sparse";
    case v1::MethodConfig::kFlexPrefill:
      return "flex_prefill";
    case v1::MethodConfig::kSampleAttention:
      return "sample_attention";
    case v1::MethodConfig::kAnchor:
      return "anchor";
    case v1::MethodConfig::kSaap:
      return "saap";
    case v1::MethodConfig::PARAMS_NOT_SET:
      break;
  }
  return "none";
}

// Proto parameters use 0 for "the paper's default"; anything else (negative too) is taken as given
// so that Validate() can name it.
template <typename T>
void Take(T proto_value, T* field) {
  if (proto_value != T{0}) *field = proto_value;
}

}  // namespace

absl::StatusOr<Method> MethodFromProto(int proto_method, absl::string_view field) {
  switch (proto_method) {
    case v1::METHOD_DENSE:
      return Method::kDense;
    case v1::METHOD_A_SHAPE:
      return Method::kAShape;
    case v1::METHOD_VERTICAL_SLASH:
      return Method::kVerticalSlash;
    case v1::METHOD_BLOCK_SPARSE:
      return Method::kBlockSparse;
    case v1::METHOD_FLEX_PREFILL:
      return Method::kFlexPrefill;
    case v1::METHOD_SAMPLE_ATTENTION:
      return Method::kSampleAttention;
    case v1::METHOD_ANCHOR:
      return Method::kAnchor;
    case v1::METHOD_SAAP:
      return Method::kSaap;
    case v1::METHOD_UNSPECIFIED:
      return Invalid(field, "unspecified");
  }
  return Invalid(field, absl::StrCat("unknown method value ", proto_method));
}

v1::Method MethodToProto(Method method) {
  switch (method) {
    case Method::kDense:
      return v1::METHOD_DENSE;
    case Method::kAShape:
      return v1::METHOD_A_SHAPE;
    case Method::kVerticalSlash:
      return v1::METHOD_VERTICAL_SLASH;
    case Method::kBlockSparse:
      return v1::METHOD_BLOCK_SPARSE;
    case Method::kFlexPrefill:
      return v1::METHOD_FLEX_PREFILL;
    case Method::kSampleAttention:
      return v1::METHOD_SAMPLE_ATTENTION;
    case Method::kAnchor:
      return v1::METHOD_ANCHOR;
    case Method::kSaap:
      return v1::METHOD_SAAP;
  }
  return v1::METHOD_UNSPECIFIED;
}

absl::StatusOr<MethodConfig> ParseMethodConfig(const v1::MethodConfig& proto,
                                               absl::string_view field) {
  MethodConfig c;
  SPATTN_ASSIGN_OR_RETURN(c.method,
                          MethodFromProto(proto.method(), absl::StrCat(field, ".method")));
  const v1::MethodConfig::ParamsCase given = proto.params_case();
  if (given != v1::MethodConfig::PARAMS_NOT_SET && given != ParamsCaseOf(c.method)) {
    return Invalid(absl::StrCat(field, ".", ParamsCaseName(given)),
                   absl::StrCat("parameters for ", ParamsCaseName(given), " but method is ",
                                MethodName(c.method)));
  }
  switch (c.method) {
    case Method::kDense:
      break;
    case Method::kAShape:
      Take(proto.a_shape().sink_tokens(), &c.a_shape.sink_tokens);
      Take(proto.a_shape().local_tokens(), &c.a_shape.local_tokens);
      break;
    case Method::kVerticalSlash: {
      const v1::VerticalSlashParams& p = proto.vertical_slash();
      Take(p.last_q(), &c.vertical_slash.last_q);
      Take(p.vertical_size(), &c.vertical_slash.vertical_size);
      Take(p.slash_size(), &c.vertical_slash.slash_size);
      Take(p.forced_columns(), &c.vertical_slash.forced_columns);
      Take(p.forced_diagonals(), &c.vertical_slash.forced_diagonals);
      break;
    }
    case Method::kBlockSparse:
      Take(proto.block_sparse().block_size(), &c.block_sparse.block_size);
      Take(proto.block_sparse().top_k(), &c.block_sparse.top_k);
      break;
    case Method::kFlexPrefill: {
      const v1::FlexPrefillParams& p = proto.flex_prefill();
      Take(p.gamma(), &c.flex_prefill.gamma);
      Take(p.tau(), &c.flex_prefill.tau);
      Take(p.min_budget(), &c.flex_prefill.min_budget);
      Take(p.max_budget(), &c.flex_prefill.max_budget);
      Take(p.block_size(), &c.flex_prefill.block_size);
      if (p.has_flatten()) c.flex_prefill.flatten = p.flatten();
      break;
    }
    case Method::kSampleAttention: {
      const v1::SampleAttentionParams& p = proto.sample_attention();
      Take(p.alpha_c(), &c.sample_attention.alpha_c);
      Take(p.alpha_s(), &c.sample_attention.alpha_s);
      Take(p.chunk_n(), &c.sample_attention.chunk_n);
      Take(p.block_size(), &c.sample_attention.block_size);
      Take(p.local_tokens(), &c.sample_attention.local_tokens);
      break;
    }
    case Method::kAnchor: {
      const v1::AnchorParams& p = proto.anchor();
      Take(p.theta(), &c.anchor.theta);
      Take(p.step(), &c.anchor.step);
      Take(p.block_size(), &c.anchor.block_size);
      Take(p.init_tokens(), &c.anchor.init_tokens);
      break;
    }
    case Method::kSaap: {
      const v1::SaapParams& p = proto.saap();
      Take(p.num_centroids(), &c.saap.num_centroids);
      Take(p.top_l(), &c.saap.top_l);
      Take(p.sink_tokens(), &c.saap.sink_tokens);
      Take(p.local_tokens(), &c.saap.local_tokens);
      break;
    }
  }
  const absl::Status s = c.Validate();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(field, ".", s.message()));
  }
  return c;
}

void MethodConfigToProto(const MethodConfig& c, v1::MethodConfig* proto) {
  proto->Clear();
  proto->set_method(MethodToProto(c.method));
  switch (c.method) {
    case Method::kDense:
      break;
    case Method::kAShape:
      proto->mutable_a_shape()->set_sink_tokens(c.a_shape.sink_tokens);
      proto->mutable_a_shape()->set_local_tokens(c.a_shape.local_tokens);
      break;
    case Method::kVerticalSlash: {
      v1::VerticalSlashParams* p = proto->mutable_vertical_slash();
      p->set_last_q(c.vertical_slash.last_q);
      p->set_vertical_size(c.vertical_slash.vertical_size);
      p->set_slash_size(c.vertical_slash.slash_size);
      p->set_forced_columns(c.vertical_slash.forced_columns);
      p->set_forced_diagonals(c.vertical_slash.forced_diagonals);
      break;
    }
    case Method::kBlockSparse:
      proto->mutable_block_sparse()->set_block_size(c.block_sparse.block_size);
      proto->mutable_block_sparse()->set_top_k(c.block_sparse.top_k);
      break;
    case Method::kFlexPrefill: {
      v1::FlexPrefillParams* p = proto->mutable_flex_prefill();
      p->set_gamma(c.flex_prefill.gamma);
      p->set_tau(c.flex_prefill.tau);
      p->set_min_budget(c.flex_prefill.min_budget);
      p->set_max_budget(c.flex_prefill.max_budget);
      p->set_block_size(c.flex_prefill.block_size);
      p->set_flatten(c.flex_prefill.flatten);
      break;
    }
    case Method::kSampleAttention: {
      v1::SampleAttentionParams* p = proto->mutable_sample_attention();
      p->set_alpha_c(c.sample_attention.alpha_c);
      p->set_alpha_s(c.sample_attention.alpha_s);
      p->set_chunk_n(c.sample_attention.chunk_n);
      p->set_block_size(c.sample_attention.block_size);
      p->set_local_tokens(c.sample_attention.local_tokens);
      break;
    }
    case Method::kAnchor: {
      v1::AnchorParams* p = proto->mutable_anchor();
      p->set_theta(c.anchor.theta);
      p->set_step(c.anchor.step);
      p->set_block_size(c.anchor.block_size);
      p->set_init_tokens(c.anchor.init_tokens);
      break;
    }
    case Method::kSaap: {
      v1::SaapParams* p = proto->mutable_saap();
      p->set_num_centroids(c.saap.num_centroids);
      p->set_top_l(c.saap.top_l);
      p->set_sink_tokens(c.saap.sink_tokens);
      p->set_local_tokens(c.saap.local_tokens);
      break;
    }
  }
}

}  // namespace spattn
