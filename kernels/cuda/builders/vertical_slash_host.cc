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
  std::vector<int64_t> unit_col_base(static_cast<size_t>(plan.slots) * plan.batch);
  std::vector<int64_t> unit_off_base(unit_col_base.size());
  for (int slot = 0; slot < plan.slots; ++slot) {
    for (int b = 0; b < plan.batch; ++b) {
      unit_col_base[slot * plan.batch + b] = slot * cols_stride + lines[b].col_base;
      unit_off_base[slot * plan.batch + b] = slot * offs_stride + lines[b].off_base;
    }
  }
  MetaBlob blob;
  const size_t o_seqs = blob.Add(e.seqs);
  const size_t o_lines = blob.Add(lines);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  const size_t o_ucol = blob.Add(unit_col_base);
  const size_t o_uoff = blob.Add(unit_off_base);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);

  SPATTN_ASSIGN_OR_RETURN(EstimateParams ep, RunEstimate(p, a, e, blob.At<EstimateSeq>(o_seqs),
                                                         d_heads, plan.slots, ws, stream, timer));
  LineSelectParams lp;
  lp.num_slots = plan.slots;
  lp.batch = plan.batch;
  lp.seqs = ep.seqs;
  lp.lines = blob.At<LineSeq>(o_lines);
  lp.col_sums = ep.col_sums;
  lp.diag_sums = ep.diag_sums;
  lp.col_stride = ep.col_stride;
  lp.diag_stride = ep.diag_stride;
  lp.cols_stride = cols_stride;
  lp.offs_stride = offs_stride;
  SPATTN_ASSIGN_OR_RETURN(lp.line_cols,
                          Carve<int32_t>(ws, plan.slots * cols_stride, "selected columns"));
  SPATTN_ASSIGN_OR_RETURN(lp.line_offs,
                          Carve<int32_t>(ws, plan.slots * offs_stride, "selected diagonals"));
  const int64_t units = static_cast<int64_t>(plan.slots) * plan.batch;
  SPATTN_ASSIGN_OR_RETURN(lp.unit_ncols, Carve<int32_t>(ws, units, "column counts"));
  SPATTN_ASSIGN_OR_RETURN(lp.unit_noffs, Carve<int32_t>(ws, units, "diagonal counts"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSelectLines(lp, stream), "select lines");
  timer.Mark("select");

  SPATTN_ASSIGN_OR_RETURN(Csr csr, CarveCounts(plan.rows(), ws, stream));
  MergeParams mp = LineMergeParams(p, a, plan, d_offsets, lp, blob.At<int64_t>(o_ucol),
                                   blob.At<int64_t>(o_uoff));
  mp.range_count = csr.range_count;
  mp.col_count = csr.col_count;
  SPATTN_RETURN_IF_ERROR(GroupLines(&mp, plan.slots, cols_stride, offs_stride, ws, stream));
  timer.Mark("group");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/false, stream), "merge rows (count)");
  timer.Mark("merge_count");
  SPATTN_RETURN_IF_ERROR(ScanAndSize(plan.rows(), &csr, ws, stream, /*with_cols=*/true));
  timer.Mark("scan_sync");
  mp.range_indptr = csr.range_indptr;
  mp.col_indptr = csr.col_indptr;
  mp.range_start = csr.range_start;
  mp.range_len = csr.range_len;
  mp.col_idx = csr.col_idx;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/true, stream), "merge rows (fill)");
  timer.Mark("merge_fill");
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
