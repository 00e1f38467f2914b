#include "index/validate.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"
#include "proto/method_config_convert.h"

namespace spattn {
namespace {

bool IsIdChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

absl::Status Range(absl::string_view field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value, " is out of range [", lo, ", ", hi, "]"));
}

absl::Status FiniteNonNegative(absl::string_view field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": must be finite and >= 0"));
}

}  // namespace

absl::Status ValidateModelId(absl::string_view model_id, absl::string_view field) {
  if (model_id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": is empty"));
  if (model_id.size() > kMaxModelIdLength) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": longer than ", kMaxModelIdLength,
                                                   " characters (", model_id.size(), ")"));
  }
  for (size_t i = 0; i < model_id.size(); ++i) {
    if (!IsIdChar(model_id[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": character at offset ", i, " is not one of [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const v1::Model& m) {
  absl::Status s = ValidateModelId(m.model_id(), "model.model_id");
  if (!s.ok()) return s;
  if (!(s = Range("model.num_layers", m.num_layers(), 1, kMaxLayers)).ok()) return s;
  if (!(s = Range("model.num_q_heads", m.num_q_heads(), 1, kMaxHeads)).ok()) return s;
  if (!(s = Range("model.num_kv_heads", m.num_kv_heads(), 1, m.num_q_heads())).ok()) return s;
  if (m.num_q_heads() % m.num_kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.num_kv_heads: ", m.num_kv_heads(),
                                                   " does not divide num_q_heads ",
                                                   m.num_q_heads()));
  }
  if (!(s = Range("model.head_dim", m.head_dim(), 1, kMaxHeadDim)).ok()) return s;
  if (!(s = FiniteNonNegative("model.rope_theta", m.rope_theta())).ok()) return s;
  const v1::RopeScaling& rs = m.rope_scaling();
  static constexpr absl::string_view kRopeTypes[] = {"",        "none",   "linear",
                                                     "dynamic", "llama3", "yarn"};
  bool known = false;
  for (absl::string_view t : kRopeTypes) known = known || rs.type() == t;
  if (!known) {
    return absl::InvalidArgumentError(
        "model.rope_scaling.type: must be one of none, linear, dynamic, llama3, yarn");
  }
  if (!(s = FiniteNonNegative("model.rope_scaling.factor", rs.factor())).ok()) return s;
  if (!(s = FiniteNonNegative("model.rope_scaling.low_freq_factor", rs.low_freq_factor())).ok()) {
    return s;
  }
  if (!(s = FiniteNonNegative("model.rope_scaling.high_freq_factor", rs.high_freq_factor())).ok()) {
    return s;
  }
  if (rs.original_max_position() < 0) {
    return absl::InvalidArgumentError("model.rope_scaling.original_max_position: must be >= 0");
  }
  if (m.default_method().method() != v1::METHOD_UNSPECIFIED ||
      m.default_method().params_case() != v1::MethodConfig::PARAMS_NOT_SET) {
    absl::StatusOr<MethodConfig> method =
        MethodConfigFromProto(m.default_method(), "model.default_method");
    if (!method.ok()) return method.status();
  }
  if (m.description().size() > kMaxDescriptionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.description: longer than ", kMaxDescriptionBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MethodConfig> MethodConfigFromProto(const v1::MethodConfig& p,
                                                   absl::string_view field) {
  SPATTN_ASSIGN_OR_RETURN(MethodConfig c, ParseMethodConfig(p, field));
  if (c.method == Method::kSaap && c.saap.num_centroids > kMaxCentroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".saap.num_centroids: ", c.saap.num_centroids, " exceeds ", kMaxCentroids));
  }
  return c;
}

absl::Status ValidateHeadConfig(const v1::Model& model, const v1::HeadConfig& config,
                                absl::string_view field) {
  if (config.layer() >= model.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".layer: ", config.layer(), " is out of range [0, ", model.num_layers(), ")"));
  }
  if (config.head() >= model.num_q_heads()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".head: ", config.head(), " is out of range [0, ", model.num_q_heads(), ")"));
  }
  if (!std::isfinite(config.search_score())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".search_score: is not finite"));
  }
  absl::StatusOr<MethodConfig> method =
      MethodConfigFromProto(config.method(), absl::StrCat(field, ".method"));
  return method.status();
}

absl::Status ValidateTensorHeader(const v1::Model& model, const v1::TensorKey& key,
                                  const v1::TensorDesc& desc, uint64_t total_bytes) {
  const std::string name = TensorKeyName(key);
  if (key.layer() >= model.num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.layer: ", key.layer(), " is out of range [0, ", model.num_layers(), ")"));
  }
  switch (key.kind()) {
    case v1::TENSOR_KIND_CENTROIDS:
      if (key.head() >= model.num_kv_heads()) {
        return absl::InvalidArgumentError(
            absl::StrCat("key.head: ", key.head(), " is out of range [0, ", model.num_kv_heads(),
                         ") (centroids are per kv head)"));
      }
      if (!key.name().empty()) {
        return absl::InvalidArgumentError("key.name: must be empty for centroids");
      }
      break;
    case v1::TENSOR_KIND_CLASSIFIER: {
      if (key.head() >= model.num_q_heads()) {
        return absl::InvalidArgumentError(absl::StrCat("key.head: ", key.head(),
                                                       " is out of range [0, ", model.num_q_heads(),
                                                       ") (classifiers are per q head)"));
      }
      if (key.name().empty() || key.name().size() > kMaxParamNameLength) {
        return absl::InvalidArgumentError(
            absl::StrCat("key.name: classifier parameter name must have 1 to ", kMaxParamNameLength,
                         " characters"));
      }
      for (char c : key.name()) {
        if (!IsIdChar(c)) {
          return absl::InvalidArgumentError(
              "key.name: classifier parameter name must match [A-Za-z0-9._-]");
        }
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "key.kind: must be CENTROIDS or CLASSIFIER, got ", static_cast<int>(key.kind())));
  }
  if (desc.dtype() != v1::DATA_TYPE_FP32) {
    return absl::InvalidArgumentError(
        absl::StrCat("desc.dtype: ", name, " must be FP32, got ", v1::DataType_Name(desc.dtype())));
  }
  const int rank = desc.shape_size();
  if (key.kind() == v1::TENSOR_KIND_CENTROIDS) {
    if (rank != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "desc.shape: ", name, " must be [num_centroids, head_dim], got rank ", rank));
    }
    if (desc.shape(0) < 1 || desc.shape(0) > kMaxCentroids) {
      return absl::InvalidArgumentError(absl::StrCat("desc.shape[0]: ", name, " num_centroids ",
                                                     desc.shape(0), " is out of range [1, ",
                                                     kMaxCentroids, "]"));
    }
    if (desc.shape(1) != static_cast<int64_t>(model.head_dim())) {
      return absl::InvalidArgumentError(absl::StrCat("desc.shape[1]: ", name,
                                                     " must equal head_dim ", model.head_dim(),
                                                     ", got ", desc.shape(1)));
    }
  } else if (rank < 1 || rank > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("desc.shape: ", name, " must have rank 1 or 2, got ", rank));
  }
  uint64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    if (desc.shape(i) < 1 || desc.shape(i) > kMaxTensorDim) {
      return absl::InvalidArgumentError(absl::StrCat("desc.shape[", i, "]: ", desc.shape(i),
                                                     " is out of range [1, ", kMaxTensorDim, "]"));
    }
    elements *= static_cast<uint64_t>(desc.shape(i));
  }
  if (elements * 4 > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("desc.shape: ", name, " has ", elements * 4,
                                                   " bytes, more than the limit ",
                                                   kMaxTensorBytes));
  }
  if (desc.strides_size() != 0) {
    int64_t expect = 1;
    if (desc.strides_size() != rank) {
      return absl::InvalidArgumentError("desc.strides: must be empty or have one entry per dim");
    }
    for (int i = rank - 1; i >= 0; --i) {
      if (desc.strides(i) != expect) {
        return absl::InvalidArgumentError(
            absl::StrCat("desc.strides[", i, "]: tensors must be row-major contiguous"));
      }
      expect *= desc.shape(i);
    }
  }
  if (total_bytes != elements * 4) {
    return absl::InvalidArgumentError(absl::StrCat("total_bytes: ", name, " declares ", total_bytes,
                                                   " bytes but shape x 4 is ", elements * 4));
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteFp32(absl::string_view bytes, absl::string_view what) {
  const size_t n = bytes.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes.data() + 4 * i, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u) {  // Exponent all ones: Inf or NaN.
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": element ", i, " is ", (bits & 0x007FFFFFu) ? "NaN" : "Inf"));
    }
  }
  return absl::OkStatus();
}

std::string TensorKeyName(const v1::TensorKey& key) {
  switch (key.kind()) {
    case v1::TENSOR_KIND_CENTROIDS:
      return absl::StrCat("centroids(layer=", key.layer(), ", kv_head=", key.head(), ")");
    case v1::TENSOR_KIND_CLASSIFIER:
      return absl::StrCat("classifier(layer=", key.layer(), ", head=", key.head(),
                          ", param=", key.name(), ")");
    default:
      return absl::StrCat("tensor(layer=", key.layer(), ", head=", key.head(), ")");
  }
}

}  // namespace spattn
