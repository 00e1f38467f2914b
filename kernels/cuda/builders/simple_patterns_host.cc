// Host side of the GPU builders of dense and a_shape (kernels: simple_patterns.cu; CPU twin:
// kernels/builders/simple_patterns.cc): ranges from the uploaded sizes alone, Q/K are not read.
#include <cstdint>
#include <vector>

#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/cuda/builders/simple_patterns.h"

namespace spattn {
namespace cuda {

absl::StatusOr<SparseIndexView> BuildSimplePatternIndex(const BuildScope& scope,
                                                        const AttentionProblem& p,
                                                        const MethodConfig& config,
                                                        const std::vector<int>& heads,
                                                        int block_m) {
  SPATTN_ASSIGN_OR_RETURN(const int32_t* d_heads, UploadHeads(scope, heads));
  const int num_heads = static_cast<int>(heads.size());
  const int kind = config.method == Method::kDense ? 0 : 1;
  int num_blocks = 0;
  for (int b = 0; b < p.batch(); ++b) num_blocks += CeilDiv(p.q_len(b), block_m);
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  const int64_t max_ranges = rows * (kind == 0 ? 1 : 2);
  SparseIndexView v;
  v.block_m = block_m;
  v.num_heads = num_heads;
  v.num_blocks = num_blocks;
  v.heads = d_heads;
  DeviceIndexArrays out;
  SPATTN_ASSIGN_OR_RETURN(out.block_offsets, Carve<int32_t>(scope, p.batch() + 1, "block_offsets"));
  SPATTN_ASSIGN_OR_RETURN(out.range_indptr, Carve<int32_t>(scope, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(out.range_start, Carve<int32_t>(scope, max_ranges, "range_start"));
  SPATTN_ASSIGN_OR_RETURN(out.range_len, Carve<int32_t>(scope, max_ranges, "range_len"));
  SPATTN_ASSIGN_OR_RETURN(out.col_indptr, Carve<int32_t>(scope, rows + 1, "col_indptr"));
  SPATTN_ASSIGN_OR_RETURN(out.scratch, Carve<int32_t>(scope, num_blocks + 1, "builder scratch"));
  const AttnParams& a = *scope.params;
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchStaticIndexBuilder(kind, config.a_shape.sink_tokens, config.a_shape.local_tokens,
                               a.cu_seqlens_q, a.cu_seqlens_k, a.batch, p.causal, block_m,
                               num_heads, num_blocks, out, scope.stream),
      "index builder");
  v.block_offsets = out.block_offsets;
  v.range_indptr = out.range_indptr;
  v.range_start = out.range_start;
  v.range_len = out.range_len;
  v.col_indptr = out.col_indptr;
  v.col_idx = out.range_start;  // no columns; any valid pointer
  return v;
}

}  // namespace cuda
}  // namespace spattn
