// Host side of the GPU block_sparse index builder (kernels: block_sparse.cu; CPU twin:
// kernels/builders/block_sparse.cc): sizes every buffer from host-known counts, carves it from the
// build's workspace and enqueues the kernels; one host round trip (the CSR totals).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"

namespace spattn {
namespace cuda {
namespace merged {

// block_sparse.cu, PROFILE only: zero the rows kernel's phase cycle counters (for a launch with
// BlockRowsParams::phases); read them back (n = 7: pooled queries, pooled dots, rows (CTA); range, walk, runs (warps);
// groups), synchronizing the stream.
cudaError_t BlockSparsePhasesBegin(cudaStream_t stream);
cudaError_t BlockSparsePhasesEnd(cudaStream_t stream, unsigned long long* cycles, int n);

namespace {

// Where the rows kernel's time goes (SPATTN_GPU_BUILDER_PROFILE): the CTA phases' shares of the
// CTAs' cycles, and the warps' split of the rows phase, one stderr line per build (not a
// "gpu builder" stage line: builder_stages.py reads those).
void PrintRowPhases(const unsigned long long (&c)[7]) {
  const double cta = static_cast<double>(c[0] + c[1] + c[2]);
  const double warp = static_cast<double>(c[3] + c[4] + c[5]);
  const double groups = c[6] > 0 ? static_cast<double>(c[6]) : 1.0;
  std::fprintf(stderr,
               "block_sparse rows phases: groups %llu, CTA cycles per group %.0f: pool_queries "
               "%.1f%% pooled_dots %.1f%% rows %.1f%%; warp cycles of the rows: range %.1f%% "
               "walk %.1f%% apply_runs %.1f%%\n",
               c[6], cta / groups, 100.0 * c[0] / (cta > 0 ? cta : 1),
               100.0 * c[1] / (cta > 0 ? cta : 1), 100.0 * c[2] / (cta > 0 ? cta : 1),
               100.0 * c[3] / (warp > 0 ? warp : 1), 100.0 * c[4] / (warp > 0 ? warp : 1),
               100.0 * c[5] / (warp > 0 ? warp : 1));
}

absl::StatusOr<SparseIndexView> BuildBlockSparse(const AttentionProblem& p, const AttnParams& a,
                                                 const ::spattn::BlockSparseParams& bsp,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, const BuildScope& ws,
                                                 cudaStream_t stream, StageTimer& timer) {
  const int bs = bsp.block_size;
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), bs);
  const PooledPlan pp = MakePooledPlan(p, plan, bs);
  int rows_per_group = 1;
  bool global_scratch = false;
  if (pp.nk_max > 0) {
    SPATTN_ASSIGN_OR_RETURN(rows_per_group,
                            RowsPerGroup(
                                pp.nk_max,
                                [&](int r, bool global) {
                                  return BlockSparseSmemBytes(p.head_dim, r, pp.nk_max, global);
                                },
                                // static: 16 warps' 1 KB histograms
                                20 * 1024, "block_sparse.block_size", &global_scratch));
  }
  const std::vector<RowGroup> groups = MakeGroups(plan, pp, rows_per_group);
  MetaBlob blob;
  const PooledMeta pm = AddPooledMeta(pp, groups, &blob);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);
  SPATTN_ASSIGN_OR_RETURN(
      float* pooled_k, PoolKeysOnDevice(p, a, pp, blob.At<int32_t>(pm.kb_offsets), bs, ws, stream));
  BlockRowsParams k;
  k.q = a.q;
  k.q_token_stride = a.q_token_stride;
  k.q_head_stride = a.q_head_stride;
  k.dtype = p.dtype;
  k.head_dim = p.head_dim;
  k.scale = p.softmax_scale;
  k.causal = p.causal;
  k.block = bs;
  k.top_k = bsp.top_k;
  k.slot_head = d_heads;
  k.group = p.group_size();
  k.batch = plan.batch;
  k.num_blocks = plan.num_blocks;
  k.seqs = blob.At<PooledSeq>(pm.seqs);
  k.pooled_k = pooled_k;
  k.total_kb = pp.total_kb;
  k.groups = blob.At<RowGroup>(pm.groups);
  k.num_groups = static_cast<int>(groups.size());
  k.max_rows = rows_per_group;
  k.nk_max = std::max(pp.nk_max, 1);
  k.cap = std::max(1, std::min(std::max(bsp.top_k, 2), k.nk_max));
  SPATTN_ASSIGN_OR_RETURN(Csr csr, CarveCounts(plan.rows(), ws, stream));
  SPATTN_ASSIGN_OR_RETURN(k.tmp_start, Carve<int32_t>(ws, plan.rows() * k.cap, "range slots"));
  SPATTN_ASSIGN_OR_RETURN(k.tmp_end, Carve<int32_t>(ws, plan.rows() * k.cap, "range slots"));
  k.range_count = csr.range_count;
  if (global_scratch) {
    SPATTN_RETURN_IF_ERROR(
        CarveRowScratch(ws, k.num_groups, BlockSparseScratchBytes(k.max_rows, k.nk_max),
                        "block_sparse row scratch", &k.scratch, &k.scratch_ctas));
  }
  k.phases = timer.on();
  if (k.phases) SPATTN_CUDA_RETURN_IF_ERROR(BlockSparsePhasesBegin(stream), "row phases");
  timer.Mark("pool_keys");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchBlockSparseRows(k, stream), "block_sparse rows");
  timer.Mark("rows");
  SPATTN_RETURN_IF_ERROR(ScanAndSize(plan.rows(), &csr, ws, stream, /*with_cols=*/false));
  if (k.phases) {
    unsigned long long c[7] = {0, 0, 0, 0, 0, 0, 0};
    SPATTN_CUDA_RETURN_IF_ERROR(BlockSparsePhasesEnd(stream, c, 7), "row phases");
    PrintRowPhases(c);
  }
  timer.Mark("scan_sync");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchCompactRanges(k.tmp_start, k.tmp_end, k.cap, plan.rows(), csr.range_indptr,
                          csr.range_start, csr.range_len, stream),
      "compact ranges");
  timer.Mark("compact");
  return ViewOf(plan, d_heads, d_offsets, csr);
}

}  // namespace
}  // namespace merged

absl::StatusOr<SparseIndexView> BuildBlockSparseIndex(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m) {
  SPATTN_RETURN_IF_ERROR(merged::CheckMergedBuilder(p, config, block_m));
  SPATTN_ASSIGN_OR_RETURN(const int32_t* d_heads, UploadHeads(scope, heads));
  StageTimer timer(scope.stream, MethodName(config.method));
  return merged::BuildBlockSparse(p, *scope.params, config.block_sparse, heads, d_heads, scope,
                                  scope.stream, timer);
}

}  // namespace cuda
}  // namespace spattn
