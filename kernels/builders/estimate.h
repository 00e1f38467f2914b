// Shared steps of the dynamic index builders (vertical_slash, block_sparse, flex_prefill, and any
// other method that estimates attention from a few queries or from pooled blocks):
//   * input checks that need the problem,
//   * softmax of a few query rows against every key of their sequence ("last_q" estimates),
//   * column (vertical) and diagonal (slash) sums of such rows,
//   * mean pooling of Q/K rows per block and pooled block logits,
//   * ranking, top-k and cumulative-mass selection with one deterministic tie rule,
//   * the vertical-slash merge of MInference (seed 000, Alg. 4) for one query block.
// All functions are pure functions of their arguments and thread-safe. Host memory only.
#ifndef SPATTN_KERNELS_BUILDERS_ESTIMATE_H_
#define SPATTN_KERNELS_BUILDERS_ESTIMATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// Checks what every CPU builder needs before reading tensors: a valid problem in host memory,
// q heads in range, and a positive block size (`block_name` is the parameter named in the
// message, e.g. "block_m" or "block_sparse.block_size").
absl::Status CheckBuilderInputs(const AttentionProblem& problem, const std::vector<int>& heads,
                                absl::string_view block_name, int block);

// Copies `n` consecutive tokens (from token `token`, global over the batch) of head `head` of
// tensor `t` into dst [n, head_dim] as float.
void LoadRows(const AttentionProblem& problem, const TokenTensor& t, int head, int64_t token, int n,
              float* dst);

// Attention probabilities of query rows [row_begin, row_end) of sequence `seq` and q head
// `q_head` over every key of the sequence: out [n, k_len] row-major, where row i holds
// softmax(softmax_scale * q_i . k) over the keys it may see (causal: keys <= its position) and 0
// for the others. Logits are computed in fp32; NaN logits count as -inf and +inf as the largest
// float, so every row is finite (all zero if no logit is finite). Memory: n * k_len floats.
void RowAttention(const AttentionProblem& problem, int seq, int q_head, int row_begin, int row_end,
                  std::vector<float>* out);

// Sum of `n` rows of `probs` ([n, k_len]) down each key column: [k_len].
std::vector<double> SumColumns(const float* probs, int n, int k_len);

// Sums of probabilities along diagonals. Offset o = (query position) - key, so o = 0 is the
// main diagonal and o > 0 lies below it; sums[o - min_offset] covers every offset that the rows
// can reach.
struct DiagonalSums {
  int min_offset = 0;
  std::vector<double> sums;
  int num_offsets() const { return static_cast<int>(sums.size()); }
  int max_offset() const { return min_offset + num_offsets() - 1; }
};
// Diagonal sums of the rows RowAttention computed for query rows [row_begin, row_end) of `seq`.
DiagonalSums SumDiagonals(const AttentionProblem& problem, int seq, int row_begin, int row_end,
                          const float* probs);

// Means of consecutive groups of `block` rows: rows are tokens [token, token + n) of head `head`
// of `t`; out [ceil(n / block), head_dim]; the last group may be partial (mean over its rows).
void MeanPool(const AttentionProblem& problem, const TokenTensor& t, int head, int64_t token, int n,
              int block, std::vector<float>* out);

// Mean-pooled keys of every (sequence, kv head), transposed for fast dot products: block j of
// sequence b and kv head h is column j of `at(b, h)` ([head_dim][stride] floats).
class PooledKeys {
 public:
  // Pools keys in blocks of `block` keys aligned at key 0 of each sequence (multi-threaded).
  // Thread-safe to read after construction.
  PooledKeys(const AttentionProblem& problem, int block);
  int num_blocks(int seq) const { return num_blocks_[seq]; }
  int stride(int seq) const { return stride_[seq]; }
  const float* at(int seq, int kv_head) const;

 private:
  int num_kv_heads_;
  int head_dim_;
  std::vector<int> num_blocks_, stride_;
  std::vector<int64_t> offset_;  // [batch * kv_heads] start of each transposed matrix
  std::vector<float> data_;
};

// out[j] = sum_c q[c] * kt[c * stride + j] for j in [0, n): dot products of one vector with n
// columns of a transposed matrix (e.g. PooledKeys). NaN results become -inf, +inf the largest
// float, so that they rank and soft-max like RowAttention's logits.
void ColumnDots(const float* q, int head_dim, const float* kt, int stride, int n, float* out);

// In-place softmax of n logits in double; -inf entries get 0; all zero when nothing is finite.
void SoftmaxInPlace(double* x, int n);

// The ranking every builder uses: higher score first, equal scores by lower index, NaN last.
// Returns the first `k` indices of [0, n) in that order (k is clipped to [0, n]).
std::vector<int32_t> TopK(const double* scores, int n, int k);
// All indices of [0, n) in ranking order.
std::vector<int32_t> RankAll(const double* scores, int n);
// The length of the shortest prefix of `order` whose scores sum to >= target (order.size() if
// the whole list falls short). Scores are probabilities (>= 0); NaN counts as 0.
int CumulativeCount(const double* scores, const std::vector<int32_t>& order, double target);

// MInference Alg. 4 for one query block: each slash offset o becomes the key range
// [first_pos - o, last_pos - o] (the segment of that diagonal crossing the block's rows) and
// each vertical index a column; ranges are merged, columns inside a range dropped, and all is
// clipped to the block's causal key_end. `offsets_desc` must be sorted in decreasing order (so
// ranges come out in increasing key order), `columns_asc` in increasing order. Normalizes `row`.
void AddVerticalSlash(const BlockGeometry& g, const std::vector<int32_t>& offsets_desc,
                      const std::vector<int32_t>& columns_asc, RowKeys* row);

}  // namespace spattn

#endif  // SPATTN_KERNELS_BUILDERS_ESTIMATE_H_
