// Saap's query classifier f_q (seed 001, Sec. 4 "Query assignment function", Sec. 6.1, App. A):
// a 2-layer MLP, input a de-roped query [dim], hidden layer with batch normalisation and ReLU,
// output logits over the k-means buckets. Trained with Adam on the KL divergence
// KL(t || softmax(f_q(q))) between the true attention mass per bucket of a query (t, the row of
// A H_k) and the classifier's distribution. Exported with batch norm folded into the first layer,
// as the DenseLayerWeights list that LayerAssets::classifiers holds.
#ifndef SPATTN_KERNELS_CALIBRATION_QUERY_CLASSIFIER_H_
#define SPATTN_KERNELS_CALIBRATION_QUERY_CLASSIFIER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/method_config.h"

namespace spattn {

struct ClassifierTrainOptions {
  int hidden = 1024;            // Default: 1024 (Saap Sec. 6.1).
  bool batch_norm = true;       // Default: true (Saap Sec. 6.1); folded into layer 0 on export.
  int steps = 500;              // Default: 500 (the paper runs 40k at lr 1e-5 on 40 prompts).
  int batch_size = 256;         // Default: 256.
  float learning_rate = 1e-3f;  // Default: 1e-3 (Adam).
  float adam_beta1 = 0.9f;      // Default: 0.9.
  float adam_beta2 = 0.999f;    // Default: 0.999.
  float adam_epsilon = 1e-8f;   // Default: 1e-8.
  float bn_momentum = 0.1f;     // Default: 0.1 (running statistics used on export).
  float bn_epsilon = 1e-5f;     // Default: 1e-5.
  uint64_t seed = 1;            // Default: 1 (weights init and batch order).
};

struct ClassifierTrainResult {
  std::vector<DenseLayerWeights> layers;  // [dim -> hidden, ReLU], [hidden -> num_buckets]
  std::vector<double> loss;               // mean KL of each step's batch, before its update
};

// Trains on n examples: queries [n, dim] (de-roped) and targets [n, num_buckets] (non-negative
// rows summing to 1). INVALID_ARGUMENT naming the option or size that is wrong. Thread-safe;
// uses CpuThreads() threads.
absl::StatusOr<ClassifierTrainResult> TrainQueryClassifier(const float* queries,
                                                           const float* targets, int64_t n, int dim,
                                                           int num_buckets,
                                                           const ClassifierTrainOptions& options);

// Mean over the n examples of KL(target || softmax(classifier(query))).
double MeanClassifierKl(const std::vector<DenseLayerWeights>& layers, const float* queries,
                        const float* targets, int64_t n, int dim, int num_buckets);

// Mean over the n examples of the target mass inside the classifier's top_l buckets.
double MeanTopBucketMass(const std::vector<DenseLayerWeights>& layers, const float* queries,
                         const float* targets, int64_t n, int dim, int num_buckets, int top_l);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CALIBRATION_QUERY_CLASSIFIER_H_
