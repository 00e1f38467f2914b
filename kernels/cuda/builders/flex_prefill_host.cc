// Host side of the GPU flex_prefill index builder (kernels: flex_prefill.cu; CPU twin:
// kernels/builders/flex_prefill.cc): sizes every buffer from host-known counts, carves it from the
// build's workspace and enqueues the kernels; two host round trips (the decisions, the CSR totals).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

// This host thread's pinned buffer of at least `n` bytes for the decisions (grown as needed,
// kept for the thread's later builds: a build waits for its copy before it returns); nullptr if
// it cannot be had (the caller then launches the query-aware kernels unconditionally).
const uint8_t* PinnedDecisions(size_t n) {
  thread_local PinnedBuffer buf;
  return reinterpret_cast<const uint8_t*>(buf.Get(n, 4096));
}

// Session 35 knobs, read at every build (tests flip them between builds): "0" selects main's path.
bool KnobOn(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || e[0] != '0';
}

// Most rows (rows + 1 entries) LaunchFlexCsrScan's one CTA scans; longer: main's device scans.
constexpr int64_t kFlexScanMaxRows = int64_t{1} << 18;

// ScanAndSize's result (indptr, totals, the entry arrays carved at their real size) by one scan
// launch writing the totals to mapped host memory and one wait (session 35).
absl::Status FlexScanAndSize(int64_t rows, Csr* c, const BuildScope& ws, cudaStream_t stream) {
  // This host thread's words for the two totals (kept for its later builds).
  thread_local MappedWords words;
  void *host = nullptr, *dev = nullptr;
  if (!KnobOn("SPATTN_FLEX_SCAN") || rows >= kFlexScanMaxRows || !words.Get(&host, &dev)) {
    return ScanAndSize(rows, c, ws, stream, /*with_cols=*/true);
  }
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchFlexCsrScan(c->range_count, c->col_count, c->range_indptr, c->col_indptr, rows + 1,
                        static_cast<int32_t*>(dev), stream),
      "flex CSR scan");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "index count pass");
  const volatile int32_t* t = static_cast<const int32_t*>(host);
  const int32_t totals[2] = {t[0], t[1]};
  return SizeFromTotals(totals, c, ws, /*with_cols=*/true);
}

absl::StatusOr<SparseIndexView> BuildFlexPrefill(const AttentionProblem& p, const AttnParams& a,
                                                 const FlexPrefillParams& fp,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, const BuildScope& ws,
                                                 cudaStream_t stream, StageTimer& timer) {
  const int bs = fp.block_size;
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), bs);
  const PooledPlan pp = MakePooledPlan(p, plan, bs);
  const EstimatePlan e = MakeEstimatePlan(p, bs);
  int rows_per_group = 1;
  bool global_scratch = false;
  if (pp.nk_max > 0) {
    SPATTN_ASSIGN_OR_RETURN(
        rows_per_group,
        RowsPerGroup(
            pp.nk_max,
            [&](int r, bool global) { return FlexQaSmemBytes(p.head_dim, r, pp.nk_max, global); },
            32 * 1024, "flex_prefill.block_size", &global_scratch));
  }
  const std::vector<RowGroup> groups = MakeGroups(plan, pp, rows_per_group);
  // Lines: every column and offset may be kept (budgets are found on the device).
  std::vector<LineSeq> lines(plan.batch);
  for (int b = 0; b < plan.batch; ++b) {
    lines[b].col_base = e.seqs[b].col_base;
    lines[b].off_base = e.seqs[b].diag_base;
  }
  const int64_t cols_stride = p.total_k(), offs_stride = e.diag_stride;
  MetaBlob blob;
  const LineMeta lm = AddLineMeta(plan, e, lines, cols_stride, offs_stride, &blob);
  const PooledMeta pm = AddPooledMeta(pp, groups, &blob);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);
  const int64_t units = static_cast<int64_t>(plan.slots) * plan.batch;
  const int64_t rows = plan.rows();

  // (LaunchFlexPoolKeys: two channels a thread, LaunchPoolKeys' values; session 31.)
  SPATTN_ASSIGN_OR_RETURN(
      float* pooled_k, PoolKeysOnDevice(p, a, pp, blob.At<int32_t>(pm.kb_offsets), bs, ws, stream,
                                        LaunchFlexPoolKeys));
  timer.Mark("pool_keys");
  SPATTN_ASSIGN_OR_RETURN(EstimateParams ep, RunEstimate(p, a, e, blob.At<EstimateSeq>(lm.seqs),
                                                         d_heads, plan.slots, ws, stream, timer));
  FlexParams f;
  f.q = a.q;
  f.q_token_stride = a.q_token_stride;
  f.q_head_stride = a.q_head_stride;
  f.dtype = p.dtype;
  f.head_dim = p.head_dim;
  f.scale = p.softmax_scale;
  f.causal = p.causal;
  f.block = bs;
  f.gamma = fp.gamma;
  f.tau = fp.tau;
  f.min_blocks = static_cast<int>(CeilDiv(fp.min_budget, bs));
  f.max_blocks = fp.max_budget > 0 ? static_cast<int>(CeilDiv(fp.max_budget, bs)) : 0;
  f.flatten = fp.flatten;
  f.slot_head = d_heads;
  f.group = p.group_size();
  f.num_slots = plan.slots;
  f.batch = plan.batch;
  f.num_blocks = plan.num_blocks;
  f.seqs = blob.At<PooledSeq>(pm.seqs);
  f.est = ep.seqs;
  f.pooled_k = pooled_k;
  f.total_kb = pp.total_kb;
  f.col_sums = ep.col_sums;
  f.col_stride = ep.col_stride;
  const int64_t kb_all = static_cast<int64_t>(plan.slots) * pp.total_kb;
  SPATTN_ASSIGN_OR_RETURN(f.truth, Carve<double>(ws, kb_all, "flex truth"));
  SPATTN_ASSIGN_OR_RETURN(f.estimate, Carve<double>(ws, kb_all, "flex estimate"));
  SPATTN_ASSIGN_OR_RETURN(f.terms, Carve<double>(ws, 2 * kb_all, "flex js terms"));
  // Session 35 (SPATTN_FLEX_ZERO, default on): the arrays that start at zero (decisions, ties,
  // histograms, unit states, the merge's row counts) in one carve and one memset; main's path: a
  // carve and a memset each (7 memsets on the stream between the estimate and the decision).
  int32_t* zeroed_counts = nullptr;
  const bool one_zero = KnobOn("SPATTN_FLEX_ZERO");
  if (one_zero) {
    const int64_t count_words = 2 * RoundUp(rows + 1, 64);
    const int64_t o_ties = RoundUp(std::max<int64_t>(units, 1), 256);
    const int64_t o_hc = o_ties + RoundUp(std::max<int64_t>(rows, 1) * 4, 256);
    const int64_t o_hm = o_hc + RoundUp(std::max<int64_t>(units, 1) * 256 * 4, 256);
    const int64_t o_st = o_hm + RoundUp(std::max<int64_t>(units, 1) * 256 * 8, 256);
    const int64_t o_cnt =
        o_st +
        RoundUp(std::max<int64_t>(units, 1) * static_cast<int64_t>(sizeof(FlexUnitState)), 256);
    const int64_t bytes = o_cnt + count_words * 4;
    SPATTN_ASSIGN_OR_RETURN(unsigned char* z,
                            Carve<unsigned char>(ws, bytes, "flex zeroed scratch"));
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(z, 0, bytes, stream), "flex zeroed scratch");
    f.unit_is_vs = z;
    f.row_ties = reinterpret_cast<int32_t*>(z + o_ties);
    f.hist_count = reinterpret_cast<int*>(z + o_hc);
    f.hist_mass = reinterpret_cast<double*>(z + o_hm);
    f.state = reinterpret_cast<FlexUnitState*>(z + o_st);
    zeroed_counts = reinterpret_cast<int32_t*>(z + o_cnt);
  } else {
    SPATTN_ASSIGN_OR_RETURN(f.unit_is_vs,
                            CarveZeroed<uint8_t>(ws, units, "flex decisions", stream));
  }
  // (Session 35, SPATTN_FLEX_DECIDE_SMEM, default on: the decision's arrays in shared memory.)
  f.decide_smem = KnobOn("SPATTN_FLEX_DECIDE_SMEM");
  for (const PooledSeq& s : pp.seqs) f.decide_nk = std::max(f.decide_nk, static_cast<int>(s.nk));
  f.groups = blob.At<RowGroup>(pm.groups);
  f.num_groups = static_cast<int>(groups.size());
  f.max_rows = rows_per_group;
  f.nk_max = std::max(pp.nk_max, 1);
  SPATTN_ASSIGN_OR_RETURN(f.row_mx, Carve<float>(ws, rows, "flex row max"));
  SPATTN_ASSIGN_OR_RETURN(f.row_sum, Carve<double>(ws, rows, "flex row sums"));
  SPATTN_ASSIGN_OR_RETURN(f.row_total, Carve<double>(ws, rows, "flex row totals"));
  if (!one_zero) {
    SPATTN_ASSIGN_OR_RETURN(f.row_ties, CarveZeroed<int32_t>(ws, rows, "flex ties", stream));
    SPATTN_ASSIGN_OR_RETURN(f.hist_count,
                            CarveZeroed<int>(ws, units * 256, "flex histogram", stream));
    SPATTN_ASSIGN_OR_RETURN(f.hist_mass,
                            CarveZeroed<double>(ws, units * 256, "flex histogram", stream));
    SPATTN_ASSIGN_OR_RETURN(f.state,
                            CarveZeroed<FlexUnitState>(ws, units, "flex unit state", stream));
  }
  if (global_scratch) {
    SPATTN_RETURN_IF_ERROR(
        CarveRowScratch(ws, f.num_groups, FlexQaScratchBytes(f.max_rows, f.nk_max),
                        "flex_prefill row scratch", &f.scratch, &f.scratch_ctas));
  }
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexDecide(f, stream), "flex decision");
  timer.Mark("decide");
  // Whether any unit is query-aware: where none is (every head's decision was vertical_slash,
  // e.g. llm_mix at 32K), the query-aware kernels (row statistics, 8 scans, 7 histogram passes,
  // ties, tie ranks, count, fill: 19 launches whose CTAs all return at once) are skipped. The
  // decisions (a byte per unit) go to pinned host memory right after the decision kernel and
  // the host waits for them after enqueueing the line selection, so the selection (~0.17 ms at
  // 32K) runs while the host reads them and enqueues what follows. SPATTN_FLEX_QA_SKIP=0
  // launches them always (main's path, for comparisons).
  static const bool skip_knob = [] {
    const char* e = std::getenv("SPATTN_FLEX_QA_SKIP");
    return e == nullptr || e[0] != '0';
  }();
  struct Event {
    cudaEvent_t e = nullptr;
    ~Event() {
      if (e != nullptr) cudaEventDestroy(e);
    }
  } decided;
  const uint8_t* decisions = nullptr;
  if (skip_knob && units > 0) {
    decisions = PinnedDecisions(static_cast<size_t>(units));
    if (decisions != nullptr &&
        cudaEventCreateWithFlags(&decided.e, cudaEventDisableTiming) != cudaSuccess) {
      decided.e = nullptr;
      (void)cudaGetLastError();
    }
    if (decisions != nullptr && decided.e != nullptr) {
      SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<uint8_t*>(decisions), f.unit_is_vs,
                                                  units, cudaMemcpyDeviceToHost, stream),
                                  "flex decisions to host");
      SPATTN_CUDA_RETURN_IF_ERROR(cudaEventRecord(decided.e, stream), "flex decisions event");
    }
  }

  SPATTN_ASSIGN_OR_RETURN(LineSelectParams lp, CarveLineSelect(plan, ep, blob.At<LineSeq>(lm.lines),
                                                               cols_stride, offs_stride, ws));
  lp.flex = true;
  lp.gamma = fp.gamma;
  lp.min_budget = fp.min_budget;
  lp.max_budget = fp.max_budget;
  lp.unit_is_vs = f.unit_is_vs;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSelectLines(lp, stream), "flex lines");
  timer.Mark("select");

  bool any_qa = true;
  if (decided.e != nullptr) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(decided.e), "flex decisions sync");
    any_qa = std::find(decisions, decisions + units, uint8_t{0}) != decisions + units;
  }

  // Query-aware heads: row statistics, then the flattened selection's levels.
  if (any_qa) {
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 0, 0, stream), "flex rows (stats)");
  }
  timer.Mark("qa_stats");
  if (fp.flatten && any_qa) {
    for (int level = 0; level < kFlexLevels; ++level) {
      SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaScan(f, level, stream), "flex scan");
      if (level + 1 < kFlexLevels) {
        SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 1, level + 1, stream),
                                    "flex rows (histogram)");
      }
    }
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 2, 0, stream), "flex rows (ties)");
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexTieScan(f, stream), "flex tie ranks");
  }
  timer.Mark("qa_levels");

  MergeParams mp = LineMergeParams(p, a, plan, d_offsets, lp, blob.At<int64_t>(lm.unit_col_base),
                                   blob.At<int64_t>(lm.unit_off_base));
  mp.maybe_unit_is_vs = f.unit_is_vs;
  mp.kept_block = bs;
  // The query-aware heads' rows, after each merge pass (the merge skips their rows).
  auto qa_rows = [&](const Csr& csr, bool fill) -> absl::Status {
    if (!any_qa) {
      timer.Mark(fill ? "qa_fill" : "qa_count");
    } else if (!fill) {
      f.range_count = csr.range_count;
      f.col_count = csr.col_count;
      SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 3, 0, stream), "flex rows (count)");
      timer.Mark("qa_count");
    } else {
      f.range_indptr = csr.range_indptr;
      f.range_start = csr.range_start;
      f.range_len = csr.range_len;
      SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 4, 0, stream), "flex rows (fill)");
      timer.Mark("qa_fill");
    }
    return absl::OkStatus();
  };
  MergeLinesOptions merge_opt;
  merge_opt.zeroed_counts = zeroed_counts;
  merge_opt.scan = [&](int64_t n, Csr* c) { return FlexScanAndSize(n, c, ws, stream); };
  SPATTN_ASSIGN_OR_RETURN(const Csr csr, MergeLines(mp, rows, cols_stride, offs_stride, ws,
                                                    stream, timer, qa_rows, merge_opt));
  return ViewOf(plan, d_heads, d_offsets, csr);
}

}  // namespace
}  // namespace merged

absl::StatusOr<SparseIndexView> BuildFlexPrefillIndex(const BuildScope& scope,
                                                      const AttentionProblem& p,
                                                      const MethodConfig& config,
                                                      const std::vector<int>& heads, int block_m) {
  SPATTN_RETURN_IF_ERROR(merged::CheckMergedBuilder(p, config, block_m));
  SPATTN_ASSIGN_OR_RETURN(const int32_t* d_heads, UploadHeads(scope, heads));
  StageTimer timer(scope.stream, MethodName(config.method));
  return merged::BuildFlexPrefill(p, *scope.params, config.flex_prefill, heads, d_heads, scope,
                                  scope.stream, timer);
}

}  // namespace cuda
}  // namespace spattn
