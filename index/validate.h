// Checks on everything a client can send the index service. Every error is INVALID_ARGUMENT and
// names the field ("configs[3].layer: 40 is out of range [0, 32)"); none echoes raw bytes.
#ifndef SPATTN_INDEX_VALIDATE_H_
#define SPATTN_INDEX_VALIDATE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/method_config.h"
#include "spattn/v1/index_service.pb.h"

namespace spattn {

// Bounds (generous for today's LLMs; they keep keys fixed-width and requests bounded).
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 1024;
inline constexpr size_t kMaxModelIdLength = 128;
inline constexpr size_t kMaxDescriptionBytes = 4096;
inline constexpr size_t kMaxParamNameLength = 64;
inline constexpr int64_t kMaxCentroids = 1 << 16;
inline constexpr int64_t kMaxTensorDim = 1 << 20;
inline constexpr uint64_t kMaxTensorBytes = uint64_t{256} << 20;

// [A-Za-z0-9._-]{1,128}.
absl::Status ValidateModelId(absl::string_view model_id, absl::string_view field = "model_id");

// Shape fields, rope, default method, description. created_unix_ms is ignored (service-owned).
absl::Status ValidateModel(const v1::Model& model);

// Converts a wire MethodConfig into the kernels' struct (0 = the paper default) and validates it
// with the kernels' own rules, so the index never stores a config a worker would refuse.
// METHOD_UNSPECIFIED and params of another method are errors. `field` prefixes messages.
absl::StatusOr<MethodConfig> MethodConfigFromProto(const v1::MethodConfig& proto,
                                                   absl::string_view field);

// layer < num_layers, head < num_q_heads, method valid, search_score finite.
absl::Status ValidateHeadConfig(const v1::Model& model, const v1::HeadConfig& config,
                                absl::string_view field);

// Kind, layer/head bounds, classifier parameter name, dtype FP32, row-major, shape
// ([C, head_dim] for centroids; rank 1 or 2 for classifier parameters), and
// total_bytes == elements * 4.
absl::Status ValidateTensorHeader(const v1::Model& model, const v1::TensorKey& key,
                                  const v1::TensorDesc& desc, uint64_t total_bytes);

// INVALID_ARGUMENT naming the first NaN/Inf element of `bytes` (fp32 little-endian).
absl::Status CheckFiniteFp32(absl::string_view bytes, absl::string_view what);

// "centroids(layer=3, kv_head=1)" / "classifier(layer=3, head=2, param=w0)" for messages.
std::string TensorKeyName(const v1::TensorKey& key);

}  // namespace spattn

#endif  // SPATTN_INDEX_VALIDATE_H_
