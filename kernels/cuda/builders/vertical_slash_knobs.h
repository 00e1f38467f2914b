// Knobs of the last-rows estimate (vertical_slash.cu: vertical_slash's and flex_prefill's GPU
// builders), read from the environment once per process (at first use), and the check behind
// the fast exp. Only code under kernels/cuda includes this.
//
// SPATTN_EST_EXP=exact: passes 2-3 (row sums, probabilities and their column / diagonal sums)
// take the exact exp (ExpNonPositive: a double-precision exp rounded to float, the CPU's expf
// bit for bit but within ~1e-15 of a rounding boundary) and sum in double in the CPU's order,
// main's passes before session 29. Default (fast): the exp by ex2.approx.ftz of (l - max) log2 e
// (error: EstimateFastExpError), each thread's row sum over a key tile and each column's /
// diagonal's sum over a row tile in float before their double accumulators (and flex_prefill's
// 8-warp column sums in two halves of 64 rows).
// SPATTN_EST_FUSE=0 (fast estimate only): pass 1 (row maxima) runs as its own launch, as in
// main; by default pass 2 takes the maxima online (running max and rescaled float sums per
// thread, a (sum, max) pair per CTA and row, combined by the row-sum kernel) and pass 1 launches
// nothing. SPATTN_EST_WG (compute capability 9.0 only): a mask of the passes whose products come
// from wgmma instead of mma.sync (bit 0 pass 1, bit 1 pass 2, bit 2 pass 3; default 5: passes 1
// and 3; 1 is main's before session 30). SPATTN_FLEX_SEL=0 / SPATTN_FLEX_POOL=0: flex_prefill's
// line selection / pooled keys by main's kernels (session 31's are the default: the same lines,
// the same pooled keys). SPATTN_EST_SPAN=n: passes 1-3 run n logical CTAs per launched CTA
// (default 2; 1 is main's launch; the same values). SPATTN_EST_DB=0: flex_prefill's 8-warp pass 2
// with one key tile (main's) instead of two, the next by cp.async. SPATTN_EST_TAIL=0: the fast
// passes 2-3 without session 34's tail (main's kernels; 1: its clamp and pitch; 2, the default:
// also balanced diagonal pairs; EstKnobs::est_tail). SPATTN_EST_K_PREFETCH=0: pass 3 without
// session 36's prefetch of the next key tile into L1 (1: after the current tile's loads; 2, the
// default: before the column / diagonal sums). SPATTN_MERGE_BALANCE=0: the line merge's lanes
// over equal key spans (main's) instead of session 38's equal counts of lines (the same rows).
// SPATTN_EST_CHAIN=0: pass 3's full-chunk sums by main's loops instead of session 40's unrolled
// chains (EstKnobs::est_chain; the same sums).
// Tests change the knobs through the returned reference, between builds only.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_VERTICAL_SLASH_KNOBS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_VERTICAL_SLASH_KNOBS_H_

#include <cuda_runtime_api.h>

namespace spattn {
namespace cuda {

struct EstKnobs {
  bool exact_exp = false;
  bool fuse_max = true;  // the fast estimate's passes 1-2 in one launch
  int wg_passes = 5;     // passes (bit p - 1) by wgmma on compute capability 9.0
  // flex_prefill's line selection by SelectFlexLinesKernel (fewer sweeps of the list, the same
  // lines: session 31); SPATTN_FLEX_SEL=0: SelectLinesKernel, main's before.
  bool flex_select = true;
  int flex_sel_cap = 12288;  // its candidate keys in shared memory (at most 12288; tests: fewer)
  // flex_prefill's pooled keys by LaunchFlexPoolKeys (two channels a thread, the same values:
  // session 31); SPATTN_FLEX_POOL=0: LaunchPoolKeys (block_sparse's, main's before).
  bool flex_pool = true;
  // Logical estimate CTAs (kEstKeysPerCta keys each) per launched CTA, run one after another
  // with the Q chunk kept in shared memory (session 32; every logical CTA computes and stores
  // what its own CTA did). SPATTN_EST_SPAN=1: one per CTA, main's launch.
  int est_span = 2;
  // flex_prefill's 8-warp passes 1-2 by mma.sync (pass 2 by default) with two key tiles in shared
  // memory, the next loaded by cp.async during the current one's products (session 32; the same
  // tiles). SPATTN_EST_DB=0: one tile, loaded between barriers (main's).
  bool est_db = true;
  // The fast estimate's per-element tail (session 34; the default kernels: fused pass 2, pass 3
  // by wgmma): 1 = a one-instruction logit clamp and pass 3's probability tile at a pitch of 67
  // floats (2 lanes a bank on its stores instead of 4); 2 = also a full chunk's diagonal sums by
  // balanced pairs of diagonals (80 steps for the slowest warp instead of 95; the default). The
  // same values. SPATTN_EST_TAIL=0: main's kernels.
  int est_tail = 2;
  // Pass 3's next key tile prefetched into L1 (session 36): 1 after the current tile's loads, 2
  // (the default) before the column / diagonal sums. A hint: the same values.
  // SPATTN_EST_K_PREFETCH=0: main's.
  int est_k_prefetch = 2;
  // The line merge's lanes (MergeRowsKernel, vertical_slash and flex_prefill) cut at equal counts
  // of the row's lines (session 38; the same rows). SPATTN_MERGE_BALANCE=0: equal key spans
  // (main's).
  bool merge_balance = true;
  // With merge_balance: the count pass stores each lane's window start (rows x 32 ints after the
  // lane prefixes) and the fill pass reads it instead of repeating the cut searches (session 38,
  // s38-flex3; the same windows, so the same rows). SPATTN_MERGE_STORE_CUTS=0: the fill recomputes
  // them (main's).
  bool merge_store_cuts = true;
  // With flex_select, on compute capability 9.0: SelectFlexLinesKernel on a cluster of 2 CTAs x
  // 512 threads a list instead of one 1,024-thread CTA (session 39, s39-flex; the same lines;
  // H200 32K select 0.131 -> 0.112 ms). SPATTN_FLEX_SEL_CLUSTER=0: one CTA a list (main's).
  bool flex_sel_cluster = true;
  // With est_tail 2, the fast pass 3 by wgmma: a full chunk's column / diagonal sums as unrolled
  // 64-step chains, a balanced pair's two diagonals side by side (session 40, s40-flex; the same
  // terms in the same order: the same sums; H200 flex_prefill 32K est_probs 0.231 -> 0.209 ms).
  // SPATTN_EST_CHAIN=0: main's loops.
  bool est_chain = true;
};
EstKnobs& EstimateKnobs();

// The fast exp of passes 2-3 against the exact one (ExpNonPositive), on the current device, over
// every float x in [-110, 0] (the exact exp's range; below it both give 0) and -inf:
// *max_abs = max |fast - exact|, *max_rel = max |fast - exact| / exact over x >= -16 (where
// exact >= 1.1e-7: the terms that move a column's or a row's sum). Synchronous (tests).
cudaError_t EstimateFastExpError(float* max_abs, float* max_rel);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_VERTICAL_SLASH_KNOBS_H_
