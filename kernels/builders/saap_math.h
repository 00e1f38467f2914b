// Pieces of Saap (seed 001) shared by its index builder and by kernels/calibration: RoPE and its
// inverse, spherical nearest-centroid assignment, the query classifier's forward pass, and the
// checks of a layer's Saap assets. Free functions without shared state: thread-compatible.
#ifndef SPATTN_KERNELS_BUILDERS_SAAP_MATH_H_
#define SPATTN_KERNELS_BUILDERS_SAAP_MATH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"

namespace spattn {

// The [head_dim / 2] RoPE inverse frequencies of `assets`: rope_inv_freq when set, else
// rope_theta^(-2i / head_dim). INVALID_ARGUMENT when head_dim is odd, theta is not > 0, or
// rope_inv_freq has the wrong size.
absl::StatusOr<std::vector<double>> RopeInvFreq(const LayerAssets& assets, int head_dim);

// Rotates the rows of x [count, head_dim] (row stride head_dim), row i sitting at position
// first_pos + i, by sign * pos * inv_freq per pair: sign = +1 applies RoPE, -1 removes it.
// Pairs are (i, i + head_dim/2), or (2i, 2i+1) when `interleaved`. Angles are formed in double
// (positions reach 10^5 and more), so removing RoPE restores x to float rounding.
void RotateRope(float* x, int count, int head_dim, int64_t first_pos,
                const std::vector<double>& inv_freq, bool interleaved, int sign);

// Spherical assignment: out[i] = argmax_c x_i . centroid_c (lowest c on ties), which is the
// nearest unit centroid in cosine for any x_i != 0. x [n, d]; centroids_t [d, num_centroids]
// (transposed centroids). When maybe_best is set it gets the best dot product per row.
void AssignNearestCentroid(const float* x, int n, int d, const float* centroids_t,
                           int num_centroids, int32_t* out, float* maybe_best);

// Row (within its block of n rows) of the j-th of `count` classified rows when Saap classifies
// only some rows per block (SaapParams::classify_rows): evenly spaced, (2j + 1) n / (2 count),
// so count = n gives every row. The GPU builder uses the same rule.
inline int SaapSampledRow(int j, int count, int n) {
  return static_cast<int>((int64_t{2} * j + 1) * n / (int64_t{2} * count));
}

// Checks one q head's classifier chain: the first layer reads head_dim, the last writes
// num_centroids, consecutive sizes agree, weight/bias sizes match. INVALID_ARGUMENT naming the
// head and layer otherwise.
absl::Status CheckClassifier(const std::vector<DenseLayerWeights>& layers, int head_dim,
                             int num_centroids, int q_head);

// Logits [m, out] of the classifier for inputs x [m, in] (dense layers, ReLU where flagged).
void ClassifierForward(const std::vector<DenseLayerWeights>& layers, const float* x, int m,
                       float* logits, std::vector<float>* scratch);

// Checks what BuildSaapIndex reads for q heads `heads`: assets present (FAILED_PRECONDITION),
// num_centroids matching params and top_l <= num_centroids (INVALID_ARGUMENT), per kv head
// centroids and per q head classifiers present (FAILED_PRECONDITION) with the right shapes
// (INVALID_ARGUMENT), RoPE settings usable (INVALID_ARGUMENT).
absl::Status CheckSaapAssets(const AttentionProblem& problem, const SaapParams& params,
                             const std::vector<int>& heads, const LayerAssets* assets);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_SAAP_MATH_H_
