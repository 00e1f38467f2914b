// Test and bench helpers of the index builders (no gtest; builder_test_util.h adds the gtest
// checks on top): problems and shapes, tensor access, exact attention-mass recall and density,
// the kernel-vs-masked-reference check, the shape sweeps every builder test runs, and generators
// that plant the structures each method is built to find. Not thread-safe.
#ifndef SPATTN_KERNELS_BUILDERS_TESTING_METHOD_TESTING_H_
#define SPATTN_KERNELS_BUILDERS_TESTING_METHOD_TESTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/builders/build_index.h"
#include "kernels/host_problem.h"
#include "kernels/method_config.h"
#include "kernels/sparse_index.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace method_testing {

enum class Tensor { kQ, kK, kV };

ProblemShape MakeShape(std::vector<int32_t> q_lens, std::vector<int32_t> k_lens, int hq, int hkv,
                       int head_dim = 64, DType dtype = DType::kBF16, bool causal = true);
// A problem with Q, K, V ~ N(0, stddev^2) (fixed seed).
std::unique_ptr<HostProblem> RandomProblem(const ProblemShape& shape, uint64_t seed,
                                           float stddev = 1.f);
std::string Describe(const ProblemShape& shape);
std::vector<int> AllHeads(const AttentionProblem& p);

// Whole tensor as float [tokens, heads, head_dim], and back (rounded to the problem's dtype).
std::vector<float> ReadTensor(const HostProblem& hp, Tensor which);
void WriteTensor(HostProblem* hp, Tensor which, const std::vector<float>& values);

// ---- The shared checks of the builder tests ----

// Awkward shapes for index invariants (head_dim 64, bf16): one token, lengths around the block
// sizes, GQA ratios 1/4/8 and MHA, a batch with a one-token sequence, chunked prefill (more keys
// than queries), non-causal.
std::vector<ProblemShape> AwkwardShapes();
// Shapes for the kernel-vs-masked-reference check: bf16, fp32 with varlen + chunked prefill,
// fp16 non-causal (head_dim 64).
std::vector<ProblemShape> KernelCheckShapes();

// Builds the index of every q head of `hp` (problem seed `seed`, e.g. for assets drawn alike).
using IndexBuild =
    std::function<absl::Status(const HostProblem& hp, uint64_t seed, SparseIndex* out)>;
// More checks on a built index: "" when they hold, else what fails.
using IndexCheck = std::function<std::string(HostProblem* hp, const SparseIndex& index)>;

// For shapes[i]: RandomProblem(shapes[i], seed + i), `build`, ValidateSparseIndex, then
// `maybe_check`. Returns "" when all hold, else the first failure with its shape.
std::string CheckIndexesAcrossShapes(const std::vector<ProblemShape>& shapes, uint64_t seed,
                                     const IndexBuild& build,
                                     const IndexCheck& maybe_check = nullptr);

// An IndexCheck: Density < max_density, at least one gathered column when `needs_columns` (so
// the kernel's column path runs), and CompareKernelWithMaskedReference.
IndexCheck KernelMatchesMaskedReference(double max_density, bool needs_columns);

// Exact attention-mass recall of `index`: for every row_stride-th query row of every sequence
// (and its last row) and every head slot, the share of the full causal softmax mass (double)
// carried by the keys the index selects for that row; averaged.
double MassRecall(const AttentionProblem& p, const SparseIndex& index, int row_stride);
// Computed pairs / allowed pairs, over all head slots.
double Density(const AttentionProblem& p, const SparseIndex& index);
// Validates `index` on `p`, then checks MassRecall (row_stride) >= min_recall and Density <=
// max_density; prints both under `label` (what the planted-structure tests measured). "" when
// all hold, else what failed with both numbers.
std::string CheckRecallAndDensity(const AttentionProblem& p, const SparseIndex& index,
                                  int row_stride, double min_recall, double max_density,
                                  const std::string& label);

// Runs SparseAttentionCpu on `index` and ReferenceAttention under its densified masks; returns
// "" when O and LSE agree within twice the dtype's rounding (cpu_kernels_test's rule), else
// what differs.
std::string CompareKernelWithMaskedReference(HostProblem* hp, const SparseIndex& index);

// Structures of one kv head for PlantStructure. Logits are in softmax units (q.k * scale).
struct PlantedHead {
  int sink_keys = 1;  // keys [0, sink_keys) score sink_logit for every query
  float sink_logit = 8.f;
  std::vector<int> columns;  // key positions scoring column_logit for every query
  float column_logit = 8.f;
  std::vector<int> slash_offsets;  // key pos - o scores slash_logit for the query at pos
  float slash_logit = 8.f;
  float noise = 0.3f;  // N(0, noise^2) on the dims no structure uses
};

// Overwrites Q and K (V stays random) so that every q head of kv head h shows heads[h]'s
// structures: slashes from a positional code (24 frequency pairs, so side lobes are small),
// sink and columns from two shared directions. Needs head_dim >= 64.
void PlantStructure(HostProblem* hp, const std::vector<PlantedHead>& heads, uint64_t seed);

// Two sequences (2048 rows over 2048 keys; 700 over 1500: chunked prefill), 4 q / 2 kv heads,
// d = 64, bf16: the shape of the planted-structure tests below and in anchor_test.
ProblemShape PlantingShape();

// PlantingShape(), random (seed 5): kv head 0 plants sink + columns {100, 101, 555, 900, 1300} +
// the diagonal, kv head 1 slashes at offsets {0, 1, 257, 700} (logits 9-11 over noise). The shared
// problem of the per-query-block methods' planted-structure tests.
std::unique_ptr<HostProblem> PlantedColumnsAndSlashes();

// One fp32 head of n queries over n keys (head_dim n) where query i >= offset attends with mass
// ~1 to key i - offset only: q_i = 50 sqrt(n) e_{i - offset}, k_j = e_j (a 50-logit peak after
// the 1 / sqrt(n) scale); queries i < offset score 0 everywhere (uniform).
std::unique_ptr<HostProblem> OneKeyPerRow(int n, int offset);

// One bad setting of a method's parameters and the field its INVALID_ARGUMENT must name.
struct BadSetting {
  std::function<void(MethodConfig*)> set;
  const char* name;
};

// BuildSparseIndex(problem, `base` with each setting applied, q head 0, `options`): "" when
// every one is INVALID_ARGUMENT with a message naming its field, else the first that is not.
std::string CheckBadSettingsNamed(const AttentionProblem& problem, const MethodConfig& base,
                                  const std::vector<BadSetting>& bad,
                                  const BuildOptions& options = BuildOptions());

// Keys from `clusters` directions and queries aimed at one cluster each (shared by runs of
// `segment` query rows), written in de-roped
// space and then RoPE'd (rotate-half, `rope_theta`): the structure Saap's k-means and classifier
// are built to find. Directions depend on model_seed only (the "model"); token draws on seed.
struct ClusterSpec {
  int clusters = 16;
  float logit = 8.f;  // score of a query with keys of its target cluster
  float noise = 0.1f;
  // Consecutive query rows sharing one target cluster (a "topic"), for all q heads of a kv
  // head; 1 draws a target per query and head.
  int segment = 128;
  double rope_theta = 1e6;
  uint64_t model_seed = 7;
};
void PlantClusters(HostProblem* hp, const ClusterSpec& spec, uint64_t seed);

// Random Saap assets (unit centroids, random 2-layer classifiers) of the right shapes.
LayerAssets RandomSaapAssets(int num_q_heads, int num_kv_heads, int head_dim, int num_centroids,
                             int hidden, uint64_t seed);

// A workload from the shared generator (kernels/workload) of one head kind: S = 4096, 4 q heads,
// 2 kv heads, d = 128, bf16.
Workload GeneratorWorkload(const char* kind);

// One index row as text: "[start,end)" per range, then " c<key>" per column.
std::string RowString(const SparseIndex& idx, int slot, int block);

}  // namespace method_testing
}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_TESTING_METHOD_TESTING_H_
