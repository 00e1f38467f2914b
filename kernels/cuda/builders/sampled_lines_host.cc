// Host side of the GPU sampled_lines index builder (kernels: sampled_lines.cu; CPU twin:
// kernels/builders/sampled_lines.cc): the sampled-row and group tables, the last-rows evidence
// (vertical_slash's estimate, builder_steps.h RunEstimate), the three passes, and the row
// assembly. Two host round trips: the kept-entry total (to carve the entry list) and the CSR
// totals (Assemble).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/sampled_lines.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/cuda/builders/sampled_lines_kernels.h"

namespace spattn {
namespace cuda {
namespace {

static_assert(kSlBins == kSampledLinesBins, "bins of sampled_lines.h");
static_assert(kSlBinFloor == kSampledLinesBinFloor, "bins of sampled_lines.h");
static_assert(kSlColumnLeak == kSampledLinesColumnLeak, "column test of sampled_lines.h");

absl::StatusOr<SparseIndexView> BuildSampledLines(const BuildScope& env, const AttentionProblem& p,
                                                  const AttnParams& a,
                                                  const SampledLinesParams& params,
                                                  const std::vector<int>& heads, int block_m) {
  const Layout l = MakeLayout(p, heads, block_m);
  const int nslots = l.host.num_heads(), nblocks = l.host.num_blocks();
  // Sampled rows per block, packed into groups.
  std::vector<SlRow> rows;
  std::vector<SlGroup> groups;
  for (int b = 0; b < nblocks; ++b) {
    const BlockGeoDev& g = l.geo[b];
    const std::vector<int> sampled =
        SampledLinesRows(g.q_begin, g.q_end, params.rows_per_block, params.edge_rows);
    if (sampled.empty()) continue;
    const int n = static_cast<int>(sampled.size());
    if (n > kSlGroupRows) {
      return absl::UnimplementedError(
          absl::StrCat("sampled_lines.rows_per_block: the GPU index builder samples at most ",
                       kSlGroupRows, " rows per query block, got ", n));
    }
    SlGroup* cur = groups.empty() ? nullptr : &groups.back();
    if (cur == nullptr || cur->seq != g.seq || cur->rows + n > kSlGroupRows ||
        cur->blocks >= kSlGroupBlocks) {
      SlGroup ng;
      ng.seq = g.seq;
      ng.row_begin = static_cast<int>(rows.size());
      ng.rows = 0;
      ng.block_begin = b;
      ng.blocks = 0;
      ng.key_end = 0;
      groups.push_back(ng);
      cur = &groups.back();
    }
    // Blocks of a group are consecutive: a block without rows in between starts a new group.
    if (cur->blocks > 0 && cur->block_begin + cur->blocks != b) {
      SlGroup ng = *cur;
      ng.row_begin = static_cast<int>(rows.size());
      ng.rows = 0;
      ng.block_begin = b;
      ng.blocks = 0;
      ng.key_end = 0;
      groups.push_back(ng);
      cur = &groups.back();
    }
    for (int r : sampled) {
      const int pos = p.query_pos(g.seq, r);
      rows.push_back(SlRow{r, pos, b, 1.f / static_cast<float>(n)});
      cur->key_end = std::max(cur->key_end, p.causal ? pos + 1 : p.k_len(g.seq));
    }
    cur->rows += n;
    cur->blocks += 1;
  }

  // An entry is (row position - its block's first row position) * k_len + key (one int32).
  for (int b = 0; b < nblocks; ++b) {
    const BlockGeoDev& g = l.geo[b];
    if (static_cast<int64_t>(g.last_pos - g.first_pos + 1) * p.k_len(g.seq) > INT32_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          "sampled_lines: the GPU index builder takes (block rows) x k_len < 2^31, got ",
          g.last_pos - g.first_pos + 1, " x ", p.k_len(g.seq)));
    }
  }

  StageTimer timer(env.stream, "sampled_lines");
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  SPATTN_ASSIGN_OR_RETURN(const int32_t* d_heads, Upload(env, heads32, "sampled_lines heads"));
  // Step 2: the last-rows evidence.
  const merged::EstimatePlan e = merged::MakeEstimatePlan(p, params.last_q);
  SPATTN_ASSIGN_OR_RETURN(const merged::EstimateSeq* d_ev_seqs,
                          Upload(env, e.seqs, "sampled_lines evidence sequences"));
  SPATTN_ASSIGN_OR_RETURN(
      merged::EstimateParams ep,
      merged::RunEstimate(p, a, e, d_ev_seqs, d_heads, nslots, env, env.stream, timer));

  SlArgs sa;
  sa.p = a;
  sa.scale = p.softmax_scale;
  sa.heads = d_heads;
  sa.num_slots = nslots;
  sa.num_blocks = nblocks;
  SPATTN_ASSIGN_OR_RETURN(sa.groups, Upload(env, groups, "sampled_lines groups"));
  sa.num_groups = static_cast<int>(groups.size());
  SPATTN_ASSIGN_OR_RETURN(sa.rows, Upload(env, rows, "sampled_lines rows"));
  sa.num_rows = static_cast<int>(rows.size());
  SPATTN_ASSIGN_OR_RETURN(sa.geo, Upload(env, l.geo, "block geometry"));
  sa.gamma = params.gamma;
  sa.diagonal_floor = params.diagonal_floor;
  sa.ev_seqs = ep.seqs;
  sa.col_sums = ep.col_sums;
  sa.diag_sums = ep.diag_sums;
  sa.col_stride = ep.col_stride;
  sa.diag_stride = ep.diag_stride;
  sa.batch = p.batch();
  SPATTN_ASSIGN_OR_RETURN(sa.col_mean,
                          Carve<float>(env, nslots * ep.col_stride, "sampled_lines column means"));
  SPATTN_ASSIGN_OR_RETURN(
      sa.diag_mean, Carve<float>(env, nslots * ep.diag_stride, "sampled_lines diagonal means"));
  const int64_t srows = static_cast<int64_t>(nslots) * rows.size();
  const int64_t irows = static_cast<int64_t>(nslots) * nblocks;
  SPATTN_ASSIGN_OR_RETURN(sa.row_max2, Carve<float>(env, srows, "sampled_lines row max"));
  SPATTN_ASSIGN_OR_RETURN(sa.row_inv, Carve<float>(env, srows, "sampled_lines row sums"));
  SPATTN_ASSIGN_OR_RETURN(sa.thr, Carve<int32_t>(env, irows, "sampled_lines thresholds"));
  // Zeroed: blocks without sampled rows (empty sequences) are in no group and keep nothing.
  SPATTN_ASSIGN_OR_RETURN(
      sa.counts, CarveZeroed<int32_t>(env, irows, "sampled_lines entry counts", env.stream));
  // Blocks without sampled rows (empty sequences) keep nothing: counts start at 0.
  SPATTN_ASSIGN_OR_RETURN(sa.kept,
                          CarveZeroed<int64_t>(env, irows + 1, "sampled_lines kept", env.stream));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesStats(sa, env.stream), "sampled_lines row stats");
  timer.Mark("row_stats");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesHistogram(sa, env.stream),
                              "sampled_lines histograms");
  timer.Mark("histogram");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchExclusiveScan64(sa.kept, irows, env.stream),
                              "sampled_lines entry offsets");
  int64_t total = 0;
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&total, sa.kept + irows, 8, cudaMemcpyDeviceToHost, env.stream),
      "sampled_lines entry total");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "sampled_lines entry total");
  // Slices sized by pass 2's bound; the assembler reads the first `counts` entries of each.
  SPATTN_ASSIGN_OR_RETURN(sa.entries, Carve<int32_t>(env, total, "sampled_lines entries"));
  timer.Mark("entry_total");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesEmit(sa, env.stream), "sampled_lines emit");
  timer.Mark("emit");

  SlAsmArgs asm_args;
  asm_args.geo = sa.geo;
  asm_args.num_blocks = nblocks;
  asm_args.num_rows = static_cast<int>(irows);
  asm_args.offsets = sa.kept;
  asm_args.counts = sa.counts;
  asm_args.entries = sa.entries;
  std::vector<int32_t> k_lens(p.batch());
  for (int b = 0; b < p.batch(); ++b) k_lens[b] = p.k_len(b);
  SPATTN_ASSIGN_OR_RETURN(asm_args.k_lens, Upload(env, k_lens, "sampled_lines k_lens"));
  asm_args.sink_tokens = params.sink_tokens;
  asm_args.local_tokens = params.local_tokens;
  auto v = Assemble(
      env, l,
      [&](const AsmOut& out, bool fill) {
        return LaunchSampledLinesAssemble(asm_args, out, fill, env.stream);
      },
      &timer, "select");
  if (!v.ok()) timer.Cancel();
  return v;
}

}  // namespace

absl::StatusOr<SparseIndexView> BuildSampledLinesIndex(const BuildScope& scope,
                                                       const AttentionProblem& p,
                                                       const MethodConfig& config,
                                                       const std::vector<int>& heads, int block_m) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  if (config.sampled_lines.last_q > merged::kMaxEstimateRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampled_lines.last_q: the GPU index builder takes at most ",
                     merged::kMaxEstimateRows, " rows, got ", config.sampled_lines.last_q));
  }
  return BuildSampledLines(scope, p, *scope.params, config.sampled_lines, heads, block_m);
}

}  // namespace cuda
}  // namespace spattn
