// Helpers shared by the index tests and benchmark (testonly).
#ifndef SPATTN_INDEX_TEST_UTIL_H_
#define SPATTN_INDEX_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "index/tensor_client.h"
#include "spattn/v1/index_service.pb.h"

namespace spattn {
namespace testing_util {

v1::Model MakeModel(const std::string& model_id, uint32_t layers, uint32_t q_heads,
                    uint32_t kv_heads, uint32_t head_dim);

// Deterministic pseudo-random floats in [-1, 1) from `seed`.
std::vector<float> RandomFloats(uint64_t seed, size_t n);

// One head config per (layer, q head), cycling through methods with non-default params so a
// round trip checks every field. Saap is left out (it needs tensors to seal).
std::vector<v1::HeadConfig> MakeHeadConfigs(const v1::Model& model, uint64_t seed);

// Centroids [num_centroids, head_dim] for every (layer, kv head), values from `seed`.
std::vector<TensorUpload> MakeCentroids(const v1::Model& model, int num_centroids, uint64_t seed);

// Classifier parameters w0 [head_dim, hidden], b0 [hidden], w1 [hidden, out], b1 [out] for the
// given (layer, q head).
std::vector<TensorUpload> MakeClassifier(const v1::Model& model, uint32_t layer, uint32_t head,
                                         int hidden, int out, uint64_t seed);

// HTTP/1.0 GET on 127.0.0.1:port; returns the body.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace testing_util
}  // namespace spattn

#endif  // SPATTN_INDEX_TEST_UTIL_H_
