// Sparse attention methods and their parameters, as plain structs. Each field's default is the
// seed paper's (DESIGN §3); Validate() names the bad parameter.
#ifndef SPATTN_KERNELS_METHOD_CONFIG_H_
#define SPATTN_KERNELS_METHOD_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spattn {

enum class Method {
  kDense,
  kAShape,
  kVerticalSlash,
  kBlockSparse,
  kFlexPrefill,
  kSampleAttention,
  kAnchor,
  kSaap,
};

inline constexpr Method kAllMethods[] = {
    Method::kDense,       Method::kAShape,          Method::kVerticalSlash, Method::kBlockSparse,
    Method::kFlexPrefill, Method::kSampleAttention, Method::kAnchor,        Method::kSaap,
};

const char* MethodName(Method m);  // "dense", "a_shape", "vertical_slash", ...
absl::StatusOr<Method> ParseMethod(absl::string_view name);

// StreamingLLM / MInference A-shape.
struct AShapeParams {
  int sink_tokens = 128;    // Default: 128.
  int local_tokens = 3968;  // Default: 3968.
};

// MInference vertical-slash (seed 000, Alg. 2 and 4).
struct VerticalSlashParams {
  int last_q = 64;             // Default: 64.
  int vertical_size = 1000;    // Default: 1000.
  int slash_size = 6096;       // Default: 6096.
  int forced_columns = 30;     // Default: 30.
  int forced_diagonals = 100;  // Default: 100.
};

// MInference block-sparse.
struct BlockSparseParams {
  int block_size = 64;  // Default: 64.
  int top_k = 100;      // Default: 100.
};

// FlexPrefill (seed 003).
struct FlexPrefillParams {
  float gamma = 0.9f;     // Default: 0.9.
  float tau = 0.1f;       // Default: 0.1.
  int min_budget = 1024;  // Default: 1024.
  int max_budget = 0;     // Default: 0 (no limit).
  int block_size = 128;   // Default: 128.
  // Query-aware heads pick key blocks over the whole flattened, normalized block map (the
  // paper's Alg. 4); false picks per query block (the "w/o flatten" variant of its App. F.4).
  bool flatten = true;  // Default: true.
};

// SampleAttention (seed 004).
struct SampleAttentionParams {
  float alpha_c = 0.95f;   // Default: 0.95.
  float alpha_s = 0.95f;   // Default: 0.95.
  int chunk_n = 2;         // Default: 2.
  int block_size = 128;    // Default: 128.
  int local_tokens = 128;  // Default: 128.
};

// AnchorAttention (seed 002).
struct AnchorParams {
  float theta = 12.f;      // Default: 12.
  int step = 16;           // Default: 16.
  int block_size = 128;    // Default: 128.
  int init_tokens = 2048;  // Default: 2048.
};

// Saap (seed 001).
struct SaapParams {
  int num_centroids = 1024;  // Default: 1024.
  int top_l = 32;            // Default: 32.
  int sink_tokens = 1;       // Default: 1.
  int local_tokens = 2047;   // Default: 2047.
};

// A method with its parameters. Only the struct matching `method` is read.
struct MethodConfig {
  Method method = Method::kDense;
  AShapeParams a_shape;
  VerticalSlashParams vertical_slash;
  BlockSparseParams block_sparse;
  FlexPrefillParams flex_prefill;
  SampleAttentionParams sample_attention;
  AnchorParams anchor;
  SaapParams saap;

  // Checks the parameters of `method`; the message names the parameter, e.g.
  // "vertical_slash.last_q must be > 0, got -1".
  absl::Status Validate() const;
  // "vertical_slash(last_q=64, vertical_size=1000, ...)" for logs and reports.
  std::string DebugString() const;
};

// Offline-learned inputs some methods read (Saap's centroids and query classifier) for one layer.
// Absent for methods that learn nothing offline.
struct DenseLayerWeights {
  int in = 0, out = 0;
  std::vector<float> weight;  // [in, out] row-major
  std::vector<float> bias;    // [out]
  bool relu = false;          // Applied after this layer.
};

struct LayerAssets {
  double rope_theta = 10000.0;
  // RoPE pair layout of Q/K: false = rotate-half pairs (i, i + head_dim / 2), as Llama in
  // Hugging Face transformers; true = interleaved pairs (2i, 2i + 1), as GPT-J.
  // Default: false.
  bool rope_interleaved = false;
  // [head_dim / 2] RoPE inverse frequencies of a model that scales RoPE (linear, llama3, ...).
  // Default: empty, meaning rope_theta^(-2i / head_dim).
  std::vector<float> rope_inv_freq;
  // Per kv head: [num_centroids, head_dim] unit-norm k-means centroids of de-roped keys.
  std::vector<std::vector<float>> centroids;
  int num_centroids = 0;
  // Per q head: MLP from a de-roped query [head_dim] to logits over centroids [num_centroids].
  std::vector<std::vector<DenseLayerWeights>> classifiers;
};

}  // namespace spattn

#endif  // SPATTN_KERNELS_METHOD_CONFIG_H_
