// Host side of the GPU vertical_slash index builder (kernels: vertical_slash.cu; CPU twin:
// kernels/builders/vertical_slash.cc): sizes every buffer from host-known counts, carves it from
// the build's workspace and enqueues the kernels; one host round trip (the CSR totals).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/cuda/common/row_assembly.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

absl::StatusOr<SparseIndexView> BuildVerticalSlash(const AttentionProblem& p, const AttnParams& a,
                                                   const VerticalSlashParams& vs,
                                                   const std::vector<int>& heads,
                                                   const int32_t* d_heads, int block_m,
                                                   const BuildScope& ws, cudaStream_t stream,
                                                   StageTimer& timer) {
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), block_m);
  const EstimatePlan e = MakeEstimatePlan(p, vs.last_q);
  std::vector<LineSeq> lines(plan.batch);
  int64_t cols_stride = 0, offs_stride = 0;
  for (int b = 0; b < plan.batch; ++b) {
    const EstimateSeq& s = e.seqs[b];
    LineSeq& l = lines[b];
    l.col_base = cols_stride;
    l.off_base = offs_stride;
    if (s.n == 0) continue;
    const int forced_cols = std::min(vs.forced_columns, s.kl);
    l.forced_col_end = forced_cols;
    l.col_k = std::min(std::max(vs.vertical_size, forced_cols), s.kl);
    int lo = 0, hi = 0;
    const int forced_offs = row_assembly::ForcedOffsets(vs.forced_diagonals, s.min_offset,
                                                        s.min_offset + s.num_offsets - 1, &lo, &hi);
    l.forced_off_lo = lo - s.min_offset;
    l.forced_off_hi = hi - s.min_offset;
    l.off_k = std::min(std::max(vs.slash_size, forced_offs), s.num_offsets);
    cols_stride += l.col_k;
    offs_stride += l.off_k;
  }
  MetaBlob blob;
  const LineMeta lm = AddLineMeta(plan, e, lines, cols_stride, offs_stride, &blob);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);

  SPATTN_ASSIGN_OR_RETURN(EstimateParams ep, RunEstimate(p, a, e, blob.At<EstimateSeq>(lm.seqs),
                                                         d_heads, plan.slots, ws, stream, timer));
  SPATTN_ASSIGN_OR_RETURN(LineSelectParams lp, CarveLineSelect(plan, ep, blob.At<LineSeq>(lm.lines),
                                                               cols_stride, offs_stride, ws));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSelectLines(lp, stream), "select lines");
  timer.Mark("select");

  const MergeParams mp =
      LineMergeParams(p, a, plan, d_offsets, lp, blob.At<int64_t>(lm.unit_col_base),
                      blob.At<int64_t>(lm.unit_off_base));
  SPATTN_ASSIGN_OR_RETURN(const Csr csr, MergeLines(mp, plan.rows(), cols_stride, offs_stride, ws,
                                                    stream, timer, nullptr));
  return ViewOf(plan, d_heads, d_offsets, csr);
}

}  // namespace
}  // namespace merged

absl::StatusOr<SparseIndexView> BuildVerticalSlashIndex(const BuildScope& scope,
                                                        const AttentionProblem& p,
                                                        const MethodConfig& config,
                                                        const std::vector<int>& heads,
                                                        int block_m) {
  SPATTN_RETURN_IF_ERROR(merged::CheckMergedBuilder(p, config, block_m));
  SPATTN_ASSIGN_OR_RETURN(const int32_t* d_heads, UploadHeads(scope, heads));
  StageTimer timer(scope.stream, MethodName(config.method));
  return merged::BuildVerticalSlash(p, *scope.params, config.vertical_slash, heads, d_heads,
                                    block_m, scope, scope.stream, timer);
}

}  // namespace cuda
}  // namespace spattn
