#include "proto/method_config_convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

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
    case Method::kSampledLines:
      return v1::MethodConfig::kSampledLines;
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
    case v1::MethodConfig::kSampledLines:
      return "sampled_lines";
    case v1::MethodConfig::PARAMS_NOT_SET:
      break;
  }
  return "none";
}

// The field of `param` in `params` (v1.<Method>Params), found by name; nullptr if the proto has
// none (a table row without its proto field; method_config_convert_test catches that).
const google::protobuf::FieldDescriptor* ProtoField(const google::protobuf::Message& params,
                                                    const MethodParam& param) {
  return params.GetDescriptor()->FindFieldByName(param.name);
}

// The v1.<Method>Params message field of v1.MethodConfig for `m` (nullptr for dense).
const google::protobuf::FieldDescriptor* ParamsField(Method m) {
  if (m == Method::kDense) return nullptr;
  return v1::MethodConfig::descriptor()->FindFieldByName(MethodName(m));
}

// Proto parameters use 0 for "the paper's default" (a field with presence: unset); anything
// else (negative too) is taken as given so that Validate() can name it.
void TakeFromProto(const google::protobuf::Message& params, const MethodParam& param,
                   MethodConfig* c) {
  const google::protobuf::FieldDescriptor* f = ProtoField(params, param);
  if (f == nullptr) return;
  const google::protobuf::Reflection* r = params.GetReflection();
  if (f->has_presence() && !r->HasField(params, f)) return;
  double value = 0;
  switch (f->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      value = r->GetInt32(params, f);
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT:
      value = r->GetFloat(params, f);
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      value = r->GetBool(params, f) ? 1 : 0;
      break;
    default:
      return;
  }
  if (value != 0 || f->has_presence()) param.Set(value, c);
}

void PutToProto(const MethodConfig& c, const MethodParam& param,
                google::protobuf::Message* params) {
  const google::protobuf::FieldDescriptor* f = ProtoField(*params, param);
  if (f == nullptr) return;
  const google::protobuf::Reflection* r = params->GetReflection();
  const double value = param.Get(c);
  switch (f->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      r->SetInt32(params, f, static_cast<int32_t>(value));
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(params, f, static_cast<float>(value));
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(params, f, value != 0);
      break;
    default:
      break;
  }
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
    case v1::METHOD_SAMPLED_LINES:
      return Method::kSampledLines;
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
    case Method::kSampledLines:
      return v1::METHOD_SAMPLED_LINES;
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
  if (const google::protobuf::FieldDescriptor* field = ParamsField(c.method)) {
    const google::protobuf::Message& params = proto.GetReflection()->GetMessage(proto, field);
    for (const MethodParam* p : ParamsOf(c.method)) TakeFromProto(params, *p, &c);
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
  if (const google::protobuf::FieldDescriptor* field = ParamsField(c.method)) {
    google::protobuf::Message* params = proto->GetReflection()->MutableMessage(proto, field);
    for (const MethodParam* p : ParamsOf(c.method)) PutToProto(c, *p, params);
  }
}

}  // namespace spattn
