// The one place where wire messages (spattn.v1 protobuf) meet the kernels' plain structs: every
// request field is validated here, and every error names the field it is about (e.g.
// "q.desc.shape[0]: 100 does not match total_q 128 (cu_seqlens_q ends at 128)"). Stateless
// functions; thread-safe.
#ifndef SPATTN_SERVER_CONVERT_H_
#define SPATTN_SERVER_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/method_config.h"
#include "proto/method_config_convert.h"
#include "server/request.h"
#include "spattn/v1/attention_service.pb.h"
#include "spattn/v1/index_service.pb.h"

namespace spattn {

struct ConvertLimits {
  // Largest inline tensor (each of q, k, v, the inline output and the LSE). Default: 64 MiB.
  int64_t max_inline_bytes = 64 << 20;
  // Largest head count accepted (guards allocations sized by heads). Default: 1024.
  int max_heads = 1024;
};

// DType enum (Method conversions are in proto/method_config_convert.h).
absl::StatusOr<DType> DTypeFromProto(int proto_dtype, absl::string_view field);
v1::DataType DTypeToProto(DType dtype);

// Validates a whole AttentionRequest: head counts, head_dim, scale, cu_seqlens, each tensor's
// dtype, shape, strides, byte size and handle, the output, and the method overrides. Region
// names are not looked up here (RegionManager does that, with bounds). Inline tensors point into
// `request`, which must outlive the result.
absl::StatusOr<ParsedRequest> ParseAttentionRequest(const v1::AttentionRequest& request,
                                                    const ConvertLimits& limits);

// A model and its head configs for one version, as read from the index service. Inconsistent
// configs (a head or layer outside the model, a bad parameter) are FAILED_PRECONDITION: the
// index service's data, not the request, is wrong.
absl::StatusOr<ModelConfig> ModelConfigFromProto(
    const v1::Model& model, uint64_t version,
    const google::protobuf::RepeatedPtrField<v1::HeadConfig>& configs);

// Adds one tensor read from IndexService.GetTensors (header + all its bytes, checksum already
// verified) to the layer's assets: centroids of one kv head, or one classifier parameter
// ("w<i>" [in, out] or "b<i>" [out]) of one q head.
absl::Status AddTensorToAssets(const v1::TensorHeader& header, const std::string& bytes,
                               const ModelConfig& model, LayerAssets* assets);
// Checks that the assets form complete centroid sets and classifier MLPs (matching shapes,
// ReLU between layers) once every tensor was added.
absl::Status FinishAssets(const ModelConfig& model, LayerAssets* assets);

// The response: echoes the request id, layer and output location; inline output and LSE bytes
// are sized here and written in place by the kernel through the returned pointers.
void InitAttentionResponse(const ParsedRequest& request, v1::AttentionResponse* response);
// Sizes the inline output of `request` (Q's dtype and shape) and returns where to write it.
void* PrepareInlineOutput(const ParsedRequest& request, v1::AttentionResponse* response);
// Sizes the inline LSE (fp32 [num_q_heads, total_q]) and returns where to write it.
float* PrepareInlineLse(const ParsedRequest& request, v1::AttentionResponse* response);
// Copies the result (version, device, timings, per-head stats) into the response.
void FillAttentionResult(const ParsedRequest& request, const AttentionResult& result,
                         v1::AttentionResponse* response);

}  // namespace spattn

#endif  // SPATTN_SERVER_CONVERT_H_
