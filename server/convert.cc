#include "server/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
// Byte spans beyond this are rejected before any arithmetic can overflow.
constexpr __int128 kMaxSpanBytes = __int128{1} << 62;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

const char* ProtoDTypeName(int t) {
  switch (t) {
    case v1::DATA_TYPE_FP32:
      return "FP32";
    case v1::DATA_TYPE_FP16:
      return "FP16";
    case v1::DATA_TYPE_BF16:
      return "BF16";
    case v1::DATA_TYPE_INT32:
      return "INT32";
    default:
      return "UNSPECIFIED";
  }
}

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckCuSeqlens(const google::protobuf::RepeatedField<int64_t>& cu,
                            absl::string_view field, std::vector<int32_t>* out) {
  if (cu.size() < 2) {
    return Invalid(field, absl::StrCat("need at least 2 entries (batch + 1), got ", cu.size()));
  }
  if (cu[0] != 0)
    return Invalid(absl::StrCat(field, "[0]"), absl::StrCat("must be 0, got ", cu[0]));
  out->assign(1, 0);
  for (int i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat(cu[i], " is smaller than the entry before (", cu[i - 1],
                                  "); offsets must be non-decreasing"));
    }
    if (cu[i] > kMaxInt32) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat(cu[i], " exceeds the largest token count 2^31-1"));
    }
    out->push_back(static_cast<int32_t>(cu[i]));
  }
  return absl::OkStatus();
}

absl::Status CheckHeads(uint32_t value, absl::string_view field, const ConvertLimits& limits) {
  if (value == 0) return Invalid(field, "must be > 0");
  if (value > static_cast<uint32_t>(limits.max_heads)) {
    return Invalid(field, absl::StrCat(value, " exceeds the worker's limit of ", limits.max_heads));
  }
  return absl::OkStatus();
}

// Expected extent of one tensor: which request fields its dimensions come from.
struct Expected {
  int64_t tokens;
  const char* tokens_name;   // "total_q" / "total_k"
  const char* seqlens_name;  // "cu_seqlens_q" / "cu_seqlens_k"
  int64_t heads;
  const char* heads_name;  // "num_q_heads" / "num_kv_heads"
  int64_t head_dim;
};

// Checks desc against `want` and fills shape, strides and byte span of `spec`.
absl::Status CheckDesc(const v1::TensorDesc& desc, const std::string& field, const Expected& want,
                       TensorSpec* spec) {
  SPATTN_ASSIGN_OR_RETURN(spec->dtype, DTypeFromProto(desc.dtype(), field + ".desc.dtype"));
  const std::string shape_field = field + ".desc.shape";
  if (desc.shape_size() != 3) {
    return Invalid(shape_field, absl::StrCat("expected 3 dims [", want.tokens_name, ", ",
                                             want.heads_name, ", head_dim], got ",
                                             desc.shape_size(), " ", ShapeString(desc.shape())));
  }
  for (int i = 0; i < 3; ++i) {
    if (desc.shape(i) < 0) {
      return Invalid(absl::StrCat(shape_field, "[", i, "]"),
                     absl::StrCat("must be >= 0, got ", desc.shape(i)));
    }
  }
  if (desc.shape(0) != want.tokens) {
    return Invalid(
        absl::StrCat(shape_field, "[0]"),
        absl::StrCat(desc.shape(0), " does not match ", want.tokens_name, " = ", want.tokens, " (",
                     want.seqlens_name, " ends at ", want.tokens, ")"));
  }
  if (desc.shape(1) != want.heads) {
    return Invalid(
        absl::StrCat(shape_field, "[1]"),
        absl::StrCat(desc.shape(1), " does not match ", want.heads_name, " = ", want.heads));
  }
  if (desc.shape(2) != want.head_dim) {
    return Invalid(absl::StrCat(shape_field, "[2]"),
                   absl::StrCat(desc.shape(2), " does not match head_dim = ", want.head_dim));
  }
  spec->tokens = want.tokens;
  spec->heads = want.heads;
  spec->head_dim = want.head_dim;
  const std::string strides_field = field + ".desc.strides";
  if (desc.strides_size() == 0) {
    spec->head_stride = want.head_dim;
    spec->token_stride = want.heads * want.head_dim;
  } else {
    if (desc.strides_size() != 3) {
      return Invalid(strides_field, absl::StrCat("expected 3 strides (or none for row-major), got ",
                                                 desc.strides_size()));
    }
    if (desc.strides(2) != 1) {
      return Invalid(
          absl::StrCat(strides_field, "[2]"),
          absl::StrCat("the head_dim axis must be contiguous (stride 1), got ", desc.strides(2)));
    }
    for (int i = 0; i < 2; ++i) {
      if (desc.strides(i) < 0 || desc.strides(i) > (int64_t{1} << 40)) {
        return Invalid(absl::StrCat(strides_field, "[", i, "]"),
                       absl::StrCat("must be in [0, 2^40], got ", desc.strides(i)));
      }
    }
    spec->token_stride = desc.strides(0);
    spec->head_stride = desc.strides(1);
    if (want.heads > 1 && spec->head_stride < want.head_dim) {
      return Invalid(
          absl::StrCat(strides_field, "[1]"),
          absl::StrCat(spec->head_stride, " makes heads overlap (head_dim = ", want.head_dim, ")"));
    }
    if (want.tokens > 1 &&
        spec->token_stride < (want.heads - 1) * spec->head_stride + want.head_dim) {
      return Invalid(
          absl::StrCat(strides_field, "[0]"),
          absl::StrCat(spec->token_stride, " makes tokens overlap (one token spans ",
                       (want.heads - 1) * spec->head_stride + want.head_dim, " elements)"));
    }
  }
  __int128 span = 0;
  if (want.tokens > 0 && want.heads > 0 && want.head_dim > 0) {
    span = (__int128{want.tokens} - 1) * spec->token_stride +
           (__int128{want.heads} - 1) * spec->head_stride + want.head_dim;
    span *= DTypeSize(spec->dtype);
  }
  if (span > kMaxSpanBytes) {
    return Invalid(field, "the tensor's byte span exceeds 2^62 bytes");
  }
  spec->bytes = static_cast<int64_t>(span);
  return absl::OkStatus();
}

// Checks where the bytes are (inline, region, CUDA IPC) against the span computed by CheckDesc.
absl::Status CheckLocation(const v1::TensorRef& ref, const std::string& field,
                           const ConvertLimits& limits, TensorSpec* spec) {
  const int64_t es = DTypeSize(spec->dtype);
  const std::string need = absl::StrCat(
      spec->bytes, " bytes (", spec->tokens, " x ", spec->heads, " x ", spec->head_dim, " ",
      DTypeName(spec->dtype),
      spec->bytes == spec->tokens * spec->heads * spec->head_dim * es ? ")" : ", strided)");
  switch (ref.location_case()) {
    case v1::TensorRef::kInlineData: {
      const std::string& data = ref.inline_data().data();
      spec->kind = HandleKind::kInline;
      if (static_cast<int64_t>(data.size()) > limits.max_inline_bytes) {
        return Invalid(field + ".inline_data",
                       absl::StrCat(data.size(), " bytes exceed the worker's max_inline_bytes ",
                                    limits.max_inline_bytes, "; use a shared-memory region"));
      }
      if (static_cast<int64_t>(data.size()) != spec->bytes) {
        return Invalid(field + ".inline_data",
                       absl::StrCat("has ", data.size(), " bytes, but the shape needs ", need));
      }
      spec->inline_bytes = &data;
      return absl::OkStatus();
    }
    case v1::TensorRef::kRegion: {
      const v1::RegionRef& r = ref.region();
      spec->kind = HandleKind::kSystemRegion;  // Or kCudaRegion: the region manager knows.
      if (r.region_name().empty()) return Invalid(field + ".region.region_name", "empty");
      if (r.byte_size() != static_cast<uint64_t>(spec->bytes)) {
        return Invalid(field + ".region.byte_size",
                       absl::StrCat(r.byte_size(), " does not match the shape's ", need));
      }
      if (r.offset() % es != 0) {
        return Invalid(field + ".region.offset",
                       absl::StrCat(r.offset(), " is not a multiple of the element size ", es));
      }
      spec->region_name = r.region_name();
      spec->offset = r.offset();
      return absl::OkStatus();
    }
    case v1::TensorRef::kCudaIpc: {
      const v1::CudaIpcRef& c = ref.cuda_ipc();
      spec->kind = HandleKind::kCudaIpc;
      if (c.ipc_handle().size() != 64) {
        return Invalid(
            field + ".cuda_ipc.ipc_handle",
            absl::StrCat("expected 64 bytes (cudaIpcMemHandle_t), got ", c.ipc_handle().size()));
      }
      if (c.byte_size() != static_cast<uint64_t>(spec->bytes)) {
        return Invalid(field + ".cuda_ipc.byte_size",
                       absl::StrCat(c.byte_size(), " does not match the shape's ", need));
      }
      if (c.offset() % es != 0) {
        return Invalid(field + ".cuda_ipc.offset",
                       absl::StrCat(c.offset(), " is not a multiple of the element size ", es));
      }
      if (c.device_id() < 0) {
        return Invalid(field + ".cuda_ipc.device_id",
                       absl::StrCat("must be >= 0, got ", c.device_id()));
      }
      spec->ipc_handle = c.ipc_handle();
      spec->device_uuid = c.device_uuid();
      spec->device_id = c.device_id();
      spec->offset = c.offset();
      return absl::OkStatus();
    }
    case v1::TensorRef::LOCATION_NOT_SET:
      break;
  }
  return Invalid(field, "no data: set inline_data, region or cuda_ipc");
}

absl::StatusOr<TensorSpec> ParseInput(const v1::AttentionRequest& req, const v1::TensorRef& ref,
                                      bool present, const std::string& field, const Expected& want,
                                      const ConvertLimits& limits) {
  if (!present) return Invalid(field, "missing");
  TensorSpec spec;
  spec.field = field;
  SPATTN_RETURN_IF_ERROR(CheckDesc(ref.desc(), field, want, &spec));
  SPATTN_RETURN_IF_ERROR(CheckLocation(ref, field, limits, &spec));
  return spec;
}

// Reads a float32 tensor's bytes (little-endian, as the index service stores them).
std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace

absl::StatusOr<DType> DTypeFromProto(int proto_dtype, absl::string_view field) {
  switch (proto_dtype) {
    case v1::DATA_TYPE_FP32:
      return DType::kF32;
    case v1::DATA_TYPE_FP16:
      return DType::kF16;
    case v1::DATA_TYPE_BF16:
      return DType::kBF16;
    case v1::DATA_TYPE_UNSPECIFIED:
      return Invalid(field, "unspecified (expected BF16, FP16 or FP32)");
    case v1::DATA_TYPE_INT32:
      return Invalid(field, "INT32 is not an attention dtype (expected BF16, FP16 or FP32)");
  }
  return Invalid(field,
                 absl::StrCat("unknown value ", proto_dtype, " (expected BF16, FP16 or FP32)"));
}

v1::DataType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v1::DATA_TYPE_FP32;
    case DType::kF16:
      return v1::DATA_TYPE_FP16;
    case DType::kBF16:
      return v1::DATA_TYPE_BF16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

absl::StatusOr<ParsedRequest> ParseAttentionRequest(const v1::AttentionRequest& req,
                                                    const ConvertLimits& limits) {
  ParsedRequest out;
  if (req.request_id().size() > 256) {
    return Invalid("request_id",
                   absl::StrCat("is ", req.request_id().size(), " bytes; at most 256"));
  }
  out.request_id = req.request_id();
  if (req.model_id().size() > 128) {
    return Invalid("model_id", absl::StrCat("is ", req.model_id().size(), " bytes; at most 128"));
  }
  for (char ch : req.model_id()) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return Invalid("model_id", "may only hold [A-Za-z0-9._-]");
  }
  out.model_id = req.model_id();
  out.config_version = req.config_version();
  if (req.layer() > static_cast<uint32_t>(kMaxInt32)) {
    return Invalid("layer", absl::StrCat(req.layer(), " is too large"));
  }
  out.layer = static_cast<int>(req.layer());

  // Sizes.
  SPATTN_RETURN_IF_ERROR(CheckHeads(req.num_q_heads(), "num_q_heads", limits));
  SPATTN_RETURN_IF_ERROR(CheckHeads(req.num_kv_heads(), "num_kv_heads", limits));
  if (req.num_q_heads() % req.num_kv_heads() != 0) {
    return Invalid(
        "num_q_heads",
        absl::StrCat(req.num_q_heads(), " is not a multiple of num_kv_heads ", req.num_kv_heads()));
  }
  if (req.head_dim() == 0 || req.head_dim() > 256 || req.head_dim() % 8 != 0) {
    return Invalid("head_dim",
                   absl::StrCat("must be a multiple of 8 in [8, 256], got ", req.head_dim()));
  }
  AttentionProblem& p = out.problem;
  p.num_q_heads = static_cast<int>(req.num_q_heads());
  p.num_kv_heads = static_cast<int>(req.num_kv_heads());
  p.head_dim = static_cast<int>(req.head_dim());
  const float scale = req.softmax_scale();
  if (scale == 0.f) {
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(p.head_dim));
  } else if (std::isfinite(scale) && scale > 0.f) {
    p.softmax_scale = scale;
  } else {
    return Invalid("softmax_scale",
                   absl::StrCat("must be finite and > 0 (0 = 1/sqrt(head_dim)), got ", scale));
  }
  p.causal = req.causal();

  // Sequences.
  SPATTN_RETURN_IF_ERROR(CheckCuSeqlens(req.cu_seqlens_q(), "cu_seqlens_q", &p.cu_seqlens_q));
  if (req.cu_seqlens_k().empty()) {
    p.cu_seqlens_k = p.cu_seqlens_q;
  } else {
    if (req.cu_seqlens_k_size() != req.cu_seqlens_q_size()) {
      return Invalid("cu_seqlens_k",
                     absl::StrCat(req.cu_seqlens_k_size(), " entries, but cu_seqlens_q has ",
                                  req.cu_seqlens_q_size(), " (one per sequence + 1)"));
    }
    SPATTN_RETURN_IF_ERROR(CheckCuSeqlens(req.cu_seqlens_k(), "cu_seqlens_k", &p.cu_seqlens_k));
  }
  for (int b = 0; b < p.batch(); ++b) {
    if (p.q_len(b) > p.k_len(b)) {
      return Invalid("cu_seqlens_q", absl::StrCat("sequence ", b, " has ", p.q_len(b),
                                                  " queries but only ", p.k_len(b),
                                                  " keys in cu_seqlens_k (queries are a suffix of "
                                                  "the keys)"));
    }
  }

  // Tensors.
  const Expected qshape{p.total_q(),   "total_q",     "cu_seqlens_q",
                        p.num_q_heads, "num_q_heads", p.head_dim};
  const Expected kshape{
      p.total_k(),    "total_k",      req.cu_seqlens_k().empty() ? "cu_seqlens_q" : "cu_seqlens_k",
      p.num_kv_heads, "num_kv_heads", p.head_dim};
  SPATTN_ASSIGN_OR_RETURN(out.q, ParseInput(req, req.q(), req.has_q(), "q", qshape, limits));
  SPATTN_ASSIGN_OR_RETURN(out.k, ParseInput(req, req.k(), req.has_k(), "k", kshape, limits));
  SPATTN_ASSIGN_OR_RETURN(out.v, ParseInput(req, req.v(), req.has_v(), "v", kshape, limits));
  for (const TensorSpec* t : {&out.k, &out.v}) {
    if (t->dtype != out.q.dtype) {
      return Invalid(t->field + ".desc.dtype",
                     absl::StrCat(ProtoDTypeName(DTypeToProto(t->dtype)), " differs from q's ",
                                  ProtoDTypeName(DTypeToProto(out.q.dtype)),
                                  " (q, k, v and the output share one dtype)"));
    }
  }
  p.dtype = out.q.dtype;
  p.q.token_stride = out.q.token_stride;
  p.q.head_stride = out.q.head_stride;
  p.k.token_stride = out.k.token_stride;
  p.k.head_stride = out.k.head_stride;
  p.v.token_stride = out.v.token_stride;
  p.v.head_stride = out.v.head_stride;

  // Output: a caller-given destination, or inline in the response.
  const int64_t inline_out_bytes =
      int64_t{p.total_q()} * p.num_q_heads * p.head_dim * DTypeSize(p.dtype);
  const bool output_is_destination =
      req.has_output() && (req.output().location_case() == v1::TensorRef::kRegion ||
                           req.output().location_case() == v1::TensorRef::kCudaIpc);
  if (req.has_output() && req.output().location_case() == v1::TensorRef::kInlineData) {
    return Invalid("output.inline_data",
                   "inline bytes cannot be a destination; leave output unset (or without a "
                   "location) to get the result inline");
  }
  if (output_is_destination) {
    v1::TensorDesc desc = req.output().desc();
    if (desc.dtype() == v1::DATA_TYPE_UNSPECIFIED) desc.set_dtype(DTypeToProto(p.dtype));
    if (desc.shape_size() == 0) {
      desc.add_shape(p.total_q());
      desc.add_shape(p.num_q_heads);
      desc.add_shape(p.head_dim);
    }
    TensorSpec o;
    o.field = "output";
    SPATTN_RETURN_IF_ERROR(CheckDesc(desc, "output", qshape, &o));
    if (o.dtype != p.dtype) {
      return Invalid(
          "output.desc.dtype",
          absl::StrCat(ProtoDTypeName(desc.dtype()), " differs from q's ",
                       ProtoDTypeName(DTypeToProto(p.dtype)), " (the output has q's dtype)"));
    }
    SPATTN_RETURN_IF_ERROR(CheckLocation(req.output(), "output", limits, &o));
    p.o_token_stride = o.token_stride;
    p.o_head_stride = o.head_stride;
    out.output = std::move(o);
  } else {
    if (req.has_output()) {
      // A desc without a location: it may restate Q's dtype and shape, nothing else.
      const v1::TensorDesc& d = req.output().desc();
      if (d.dtype() != v1::DATA_TYPE_UNSPECIFIED && d.dtype() != DTypeToProto(p.dtype)) {
        return Invalid("output.desc.dtype",
                       absl::StrCat(ProtoDTypeName(d.dtype()), " differs from q's ",
                                    ProtoDTypeName(DTypeToProto(p.dtype))));
      }
      if (d.shape_size() != 0) {
        TensorSpec o;
        v1::TensorDesc dd = d;
        dd.set_dtype(DTypeToProto(p.dtype));
        SPATTN_RETURN_IF_ERROR(CheckDesc(dd, "output", qshape, &o));
      }
      if (d.strides_size() != 0) {
        return Invalid("output.desc.strides", "inline outputs are row-major; give no strides");
      }
    }
    if (inline_out_bytes > limits.max_inline_bytes) {
      return Invalid("output", absl::StrCat("unset, so the output returns inline, but its ",
                                            inline_out_bytes, " bytes exceed max_inline_bytes ",
                                            limits.max_inline_bytes, "; name an output region"));
    }
    p.o_head_stride = p.head_dim;
    p.o_token_stride = int64_t{p.num_q_heads} * p.head_dim;
  }
  out.return_lse = req.return_lse();
  if (out.return_lse) {
    const int64_t lse_bytes = int64_t{p.num_q_heads} * p.total_q() * 4;
    if (lse_bytes > limits.max_inline_bytes) {
      return Invalid("return_lse",
                     absl::StrCat("the LSE's ", lse_bytes, " bytes exceed max_inline_bytes ",
                                  limits.max_inline_bytes));
    }
  }

  // Methods.
  if (req.has_method_override()) {
    SPATTN_ASSIGN_OR_RETURN(out.method_override,
                            ParseMethodConfig(req.method_override(), "method_override"));
  }
  std::set<int> seen;
  for (int i = 0; i < req.head_overrides_size(); ++i) {
    const v1::HeadMethodOverride& o = req.head_overrides(i);
    const std::string field = absl::StrCat("head_overrides[", i, "]");
    if (o.head() >= static_cast<uint32_t>(p.num_q_heads)) {
      return Invalid(
          field + ".head",
          absl::StrCat(o.head(), " is not a q head (num_q_heads = ", p.num_q_heads, ")"));
    }
    if (!seen.insert(static_cast<int>(o.head())).second) {
      return Invalid(field + ".head", absl::StrCat("head ", o.head(), " is overridden twice"));
    }
    if (!o.has_method()) return Invalid(field + ".method", "missing");
    SPATTN_ASSIGN_OR_RETURN(MethodConfig c, ParseMethodConfig(o.method(), field + ".method"));
    out.head_overrides.emplace_back(static_cast<int>(o.head()), c);
  }
  out.return_stats = req.return_stats();
  out.estimate_recall = req.estimate_recall();
  return out;
}

absl::StatusOr<ModelConfig> ModelConfigFromProto(
    const v1::Model& model, uint64_t version,
    const google::protobuf::RepeatedPtrField<v1::HeadConfig>& configs) {
  const std::string where = absl::StrCat("model ", model.model_id(), " version ", version);
  auto bad = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": ", what));
  };
  ModelConfig m;
  m.model_id = model.model_id();
  m.version = version;
  if (model.num_layers() == 0 || model.num_layers() > 4096) {
    return bad(absl::StrCat("num_layers ", model.num_layers(), " is not in [1, 4096]"));
  }
  if (model.num_q_heads() == 0 || model.num_q_heads() > 4096 || model.num_kv_heads() == 0 ||
      model.num_q_heads() % model.num_kv_heads() != 0) {
    return bad(absl::StrCat("head counts ", model.num_q_heads(), "/", model.num_kv_heads(),
                            " are inconsistent"));
  }
  m.num_layers = static_cast<int>(model.num_layers());
  m.num_q_heads = static_cast<int>(model.num_q_heads());
  m.num_kv_heads = static_cast<int>(model.num_kv_heads());
  m.head_dim = static_cast<int>(model.head_dim());
  if (model.rope_theta() > 0) m.rope_theta = model.rope_theta();
  // A model without a default method runs dense on heads without their own config.
  if (model.has_default_method() && model.default_method().method() != v1::METHOD_UNSPECIFIED) {
    auto def = ParseMethodConfig(model.default_method(), "default_method");
    if (!def.ok()) return bad(def.status().message());
    m.default_method = *def;
  }
  m.heads.assign(m.num_layers, std::vector<std::optional<MethodConfig>>(m.num_q_heads));
  for (int i = 0; i < configs.size(); ++i) {
    const v1::HeadConfig& hc = configs[i];
    if (hc.layer() >= model.num_layers() || hc.head() >= model.num_q_heads()) {
      return bad(absl::StrCat("head_configs[", i, "] names layer ", hc.layer(), " head ", hc.head(),
                              " outside the model (", m.num_layers, " layers, ", m.num_q_heads,
                              " q heads)"));
    }
    auto c = ParseMethodConfig(hc.method(), absl::StrCat("head_configs[", i, "].method"));
    if (!c.ok()) return bad(c.status().message());
    if (hc.min_tokens() == 0) {
      m.heads[hc.layer()][hc.head()] = *c;
      if (hc.calibrated_tokens() > 0 || !m.calibrated_tokens.empty()) {
        if (m.calibrated_tokens.empty()) {
          m.calibrated_tokens.assign(m.num_layers, std::vector<int64_t>(m.num_q_heads, 0));
        }
        m.calibrated_tokens[hc.layer()][hc.head()] = hc.calibrated_tokens();
      }
      continue;
    }
    // A length bucket (a later config of the same bucket replaces an earlier one).
    if (m.buckets.empty()) {
      m.buckets.assign(m.num_layers, std::vector<std::vector<ModelConfig::Bucket>>(m.num_q_heads));
    }
    std::vector<ModelConfig::Bucket>& b = m.buckets[hc.layer()][hc.head()];
    auto at =
        std::lower_bound(b.begin(), b.end(), int64_t{hc.min_tokens()},
                         [](const ModelConfig::Bucket& x, int64_t t) { return x.min_tokens < t; });
    if (at != b.end() && at->min_tokens == hc.min_tokens()) {
      at->config = *c;
      at->calibrated_tokens = hc.calibrated_tokens();
    } else {
      b.insert(at, ModelConfig::Bucket{hc.min_tokens(), *c, hc.calibrated_tokens()});
    }
  }
  return m;
}

absl::Status AddTensorToAssets(const v1::TensorHeader& header, const std::string& bytes,
                               const ModelConfig& model, LayerAssets* assets) {
  const v1::TensorKey& key = header.key();
  const std::string where =
      absl::StrCat("model ", model.model_id, " version ", model.version, " tensor (layer ",
                   key.layer(), ", head ", key.head(), ", name '", key.name(), "')");
  auto bad = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": ", what));
  };
  if (header.desc().dtype() != v1::DATA_TYPE_FP32) return bad("dtype must be FP32");
  int64_t elems = 1;
  for (int64_t d : header.desc().shape()) {
    if (d <= 0 || d > (int64_t{1} << 31)) return bad("bad shape");
    elems *= d;
    if (elems > (int64_t{1} << 34)) return bad("too large");
  }
  if (static_cast<int64_t>(bytes.size()) != elems * 4) {
    return bad(absl::StrCat(bytes.size(), " bytes do not match the shape"));
  }
  assets->rope_theta = model.rope_theta;
  const auto& shape = header.desc().shape();
  switch (key.kind()) {
    case v1::TENSOR_KIND_CENTROIDS: {
      if (key.head() >= static_cast<uint32_t>(model.num_kv_heads)) return bad("not a kv head");
      if (shape.size() != 2 || shape[1] != model.head_dim) {
        return bad("centroids must be [num_centroids, head_dim]");
      }
      if (assets->num_centroids != 0 && assets->num_centroids != shape[0]) {
        return bad("kv heads disagree on num_centroids");
      }
      assets->num_centroids = static_cast<int>(shape[0]);
      assets->centroids.resize(model.num_kv_heads);
      assets->centroids[key.head()] = Floats(bytes);
      return absl::OkStatus();
    }
    case v1::TENSOR_KIND_CLASSIFIER: {
      if (key.head() >= static_cast<uint32_t>(model.num_q_heads)) return bad("not a q head");
      const std::string& name = key.name();
      if (name.size() < 2 || (name[0] != 'w' && name[0] != 'b')) {
        return bad("classifier parameters are named w<i> or b<i>");
      }
      int layer = 0;
      for (size_t i = 1; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9' || layer > 64) return bad("bad parameter index");
        layer = layer * 10 + (name[i] - '0');
      }
      if (layer >= 64) return bad("more than 64 classifier layers");
      assets->classifiers.resize(model.num_q_heads);
      std::vector<DenseLayerWeights>& mlp = assets->classifiers[key.head()];
      if (static_cast<int>(mlp.size()) <= layer) mlp.resize(layer + 1);
      DenseLayerWeights& l = mlp[layer];
      if (name[0] == 'w') {
        if (shape.size() != 2) return bad("weights must be [in, out]");
        l.in = static_cast<int>(shape[0]);
        l.out = static_cast<int>(shape[1]);
        l.weight = Floats(bytes);
      } else {
        if (shape.size() != 1) return bad("biases must be [out]");
        l.bias = Floats(bytes);
      }
      return absl::OkStatus();
    }
    default:
      return bad("unknown tensor kind");
  }
}

absl::Status FinishAssets(const ModelConfig& model, LayerAssets* assets) {
  for (size_t h = 0; h < assets->centroids.size(); ++h) {
    if (!assets->centroids[h].empty() &&
        assets->centroids[h].size() !=
            static_cast<size_t>(assets->num_centroids) * model.head_dim) {
      return absl::FailedPreconditionError(
          absl::StrCat("model ", model.model_id, ": centroids of kv head ", h, " are incomplete"));
    }
  }
  for (size_t h = 0; h < assets->classifiers.size(); ++h) {
    std::vector<DenseLayerWeights>& mlp = assets->classifiers[h];
    int in = model.head_dim;
    for (size_t i = 0; i < mlp.size(); ++i) {
      DenseLayerWeights& l = mlp[i];
      const std::string where =
          absl::StrCat("model ", model.model_id, ": classifier of q head ", h, " layer ", i);
      if (l.weight.empty())
        return absl::FailedPreconditionError(where + ": missing w" + std::to_string(i));
      if (l.in != in) {
        return absl::FailedPreconditionError(
            absl::StrCat(where, ": takes ", l.in, " inputs but gets ", in));
      }
      if (l.bias.empty()) l.bias.assign(l.out, 0.f);
      if (static_cast<int>(l.bias.size()) != l.out) {
        return absl::FailedPreconditionError(where + ": bias size does not match the weights");
      }
      l.relu = i + 1 < mlp.size();
      in = l.out;
    }
    if (!mlp.empty() && assets->num_centroids != 0 && in != assets->num_centroids) {
      return absl::FailedPreconditionError(
          absl::StrCat("model ", model.model_id, ": classifier of q head ", h, " has ", in,
                       " outputs but there are ", assets->num_centroids, " centroids"));
    }
  }
  return absl::OkStatus();
}

void InitAttentionResponse(const ParsedRequest& request, v1::AttentionResponse* response) {
  response->set_request_id(request.request_id);
  response->set_layer(static_cast<uint32_t>(request.layer));
  v1::TensorRef* out = response->mutable_output();
  v1::TensorDesc* desc = out->mutable_desc();
  desc->set_dtype(DTypeToProto(request.problem.dtype));
  desc->add_shape(request.problem.total_q());
  desc->add_shape(request.problem.num_q_heads);
  desc->add_shape(request.problem.head_dim);
  if (request.output.has_value()) {
    const TensorSpec& o = *request.output;
    desc->add_strides(o.token_stride);
    desc->add_strides(o.head_stride);
    desc->add_strides(1);
    if (o.kind == HandleKind::kCudaIpc) {
      v1::CudaIpcRef* c = out->mutable_cuda_ipc();
      c->set_ipc_handle(o.ipc_handle);
      c->set_device_uuid(o.device_uuid);
      c->set_device_id(o.device_id);
      c->set_offset(o.offset);
      c->set_byte_size(o.bytes);
    } else {
      v1::RegionRef* r = out->mutable_region();
      r->set_region_name(o.region_name);
      r->set_offset(o.offset);
      r->set_byte_size(o.bytes);
    }
  }
}

void* PrepareInlineOutput(const ParsedRequest& request, v1::AttentionResponse* response) {
  const AttentionProblem& p = request.problem;
  const size_t n =
      static_cast<size_t>(p.total_q()) * p.num_q_heads * p.head_dim * DTypeSize(p.dtype);
  std::string* data = response->mutable_output()->mutable_inline_data()->mutable_data();
  data->assign(n, '\0');
  return data->data();
}

float* PrepareInlineLse(const ParsedRequest& request, v1::AttentionResponse* response) {
  const AttentionProblem& p = request.problem;
  v1::TensorRef* lse = response->mutable_lse();
  lse->mutable_desc()->set_dtype(v1::DATA_TYPE_FP32);
  lse->mutable_desc()->add_shape(p.num_q_heads);
  lse->mutable_desc()->add_shape(p.total_q());
  std::string* data = lse->mutable_inline_data()->mutable_data();
  data->assign(static_cast<size_t>(p.num_q_heads) * p.total_q() * sizeof(float), '\0');
  return reinterpret_cast<float*>(data->data());
}

void FillAttentionResult(const ParsedRequest& request, const AttentionResult& result,
                         v1::AttentionResponse* response) {
  response->set_config_version_used(result.config_version_used);
  response->set_device(result.device);
  v1::StageTimings* t = response->mutable_timings();
  t->set_resolve_seconds(result.seconds.resolve);
  t->set_config_seconds(result.seconds.config);
  t->set_index_build_seconds(result.seconds.index_build);
  t->set_kernel_seconds(result.seconds.kernel);
  t->set_output_seconds(result.seconds.output);
  t->set_total_seconds(result.seconds.total);
  t->set_recall_seconds(result.seconds.recall);
  t->set_transfer_seconds(result.seconds.transfer);
  response->set_density(result.density);
  {  // Per-head method, density and recall estimate: in every response.
    for (const HeadResult& h : result.heads) {
      v1::HeadStats* s = response->add_heads();
      s->set_head(static_cast<uint32_t>(h.head));
      s->set_method(MethodToProto(h.config.method));
      s->set_method_name(MethodName(h.config.method));
      s->set_density(h.density);
      s->set_recall(h.recall);
    }
  }
}

}  // namespace spattn
