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
  kSampledLines,
};

inline constexpr Method kAllMethods[] = {
    Method::kDense,       Method::kAShape,      Method::kVerticalSlash,
    Method::kBlockSparse, Method::kFlexPrefill, Method::kSampleAttention,
    Method::kAnchor,      Method::kSaap,        Method::kSampledLines,
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
  // Query rows per index block fed to the classifier, evenly spaced in the block (row
  // (2j + 1) * n / (2 * classify_rows) of a block of n rows); their distributions are summed as
  // every row's were. A value >= the block's rows classifies every row, the seed's design (128
  // reproduces it at any block_m). Default: 4 (the classifier was 82% of the GPU build at 32K).
  int classify_rows = 4;
};

// Per query block, the fewest vertical + slash lines reaching gamma of the mass of a few sampled
// rows of that block (issue 11; kernels/builders/sampled_lines.h). Index blocks of block_m rows.
struct SampledLinesParams {
  float gamma = 0.95f;     // Default: 0.95.
  int rows_per_block = 3;  // Default: 3.
  int last_q = 64;         // Default: 64.
  int sink_tokens = 4;     // Default: 4.
  int local_tokens = 64;   // Default: 64.
  // Step 2's floor of a diagonal's mean mass, in units of the uniform share 1 / k_len.
  // Default: 7.
  float diagonal_floor = 7.f;
  // Step 1's placement: false spreads the sampled rows over the centres of equal parts of the
  // block, true puts the first and last on the block's first and last rows. Default: true.
  bool edge_rows = true;
  // Step 2's cost test: a diagonal's mean mass must also exceed diagonal_cost x (the block's rows)
  // x (the lower edge of the block's threshold bin), i.e. its range of keys must carry per key
  // about what the block's kept entries do; 0 = off. Default: 0.
  float diagonal_cost = 0.f;
  // Step 3's range of a diagonal entry: false, the keys of every row of the block; true, those of
  // the rows its sampled row stands for (SampledLinesRowSpan: the rows nearer to it than to
  // another sampled row), so a line seen by one sampled row costs a third of the block's rows
  // (3 rows per block). Default: true (issue 11 item 4; kernels/cuda/NOTES.md "Session 22 --
  // s22-sldensity").
  bool clip_diagonals = true;
  // Step 2's floor for sequences of fewer than 65536 keys (kSampledLinesShortKeys), in the same
  // units as diagonal_floor; 0 = diagonal_floor at every length. Default: 9 (with clipped
  // diagonals, 32K takes 9 within item 3's promise and 128K needs 7).
  float short_floor = 9.f;
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
  SampledLinesParams sampled_lines;

  // Checks the parameters of `method`; the message names the parameter, e.g.
  // "vertical_slash.last_q must be > 0, got -1".
  absl::Status Validate() const;
  // "vertical_slash(last_q=64, vertical_size=1000, ...)" for logs and reports.
  std::string DebugString() const;
};

// ---- The parameter table: every method parameter described once.
//
// Validation, DebugString, the proto converter (proto/method_config_convert.cc, which finds the
// proto field `v1.MethodConfig.<method>.<name>` by name), the worker's planner grouping, and the
// command lines (spattnctl attention and spattn-bench: --<method>.<name>=V) all walk this table.
// Adding a parameter means: the struct field above (its initializer is the default), the proto
// field of the same name, and one row in kMethodParams (method_config.cc).

enum class ParamType { kInt, kFloat, kBool };

// What Validate() requires of a value.
enum class ParamRange {
  kAny,           // no check (booleans)
  kPositive,      // > 0 and finite
  kNonNegative,   // >= 0 and finite
  kUnitInterval,  // in (0, 1]
  kBlockSize,     // 16, 32, 64 or 128
};

struct MethodParam {
  Method method;
  const char* name;  // struct field, proto field, and the CLI flag --<method>.<name>
  ParamType type;
  ParamRange range;
  // Heads whose configs differ in this parameter get separate planner groups (separate index
  // builds). False only for a parameter that does not change the index.
  bool splits_groups;
  // The field in a MethodConfig; exactly the one matching `type` is set.
  int* (*int_field)(MethodConfig*);
  float* (*float_field)(MethodConfig*);
  bool* (*bool_field)(MethodConfig*);

  // The value as a double (bools 0/1); exact for int and float fields.
  double Get(const MethodConfig& c) const;
  void Set(double value, MethodConfig* c) const;  // rounds nothing: ints take int values
  // "64", "0.9", "true": as DebugString prints it.
  std::string Format(const MethodConfig& c) const;
  // Parses a command-line value ("64", "0.9", "true"); INVALID_ARGUMENT names "<method>.<name>".
  absl::Status Parse(absl::string_view text, MethodConfig* c) const;
  // The range check of Validate(): "vertical_slash.last_q must be > 0, got -1".
  absl::Status Check(const MethodConfig& c) const;
};

// Every parameter of every method, grouped by method in kAllMethods order, each method's in
// struct order.
const std::vector<MethodParam>& MethodParams();
// The parameters of `m` (none for dense).
std::vector<const MethodParam*> ParamsOf(Method m);
// "<method>.<name>" or nullptr.
const MethodParam* FindParam(Method m, absl::string_view name);
// Same method and the same value of every parameter that splits planner groups.
bool SameGroupConfig(const MethodConfig& a, const MethodConfig& b);
// Sets a parameter from "<method>.<name>" and a value, e.g. ("vertical_slash.last_q", "64").
// INVALID_ARGUMENT for an unknown method or parameter (listing the known ones) or a bad value.
absl::Status SetMethodParam(absl::string_view dotted, absl::string_view value, MethodConfig* c);

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
