// Host side of the GPU SampleAttention index builder (kernels: sample_attention.cu; CPU twin:
// kernels/builders/sample_attention.cc): host-side tables from the problem's sizes, workspace
// carving, and the count-then-fill row assembly (builder_steps.h: Assemble) with its one host round
// trip.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"

namespace spattn {

namespace cuda {

// sample_attention.cu (declared here rather than in assembled_kernels.h, which anchor.cu and
// saap.cu include too): the lean launches of SaAssembleLean below. Count: the span count kernel
// making each row's record itself (and, with `kept`, keeping each span row's ranges there,
// 2 * kAsmSpanCap words a unit, span_row[unit] = 1 for those rows), the bitmap count kernel for
// the rows left to it, then one CTA scanning both count arrays in place into offsets, writing
// them as int32 into range_indptr / col_indptr and the two totals into totals[0, 2) (device
// memory). Fill: with `kept`, the span rows copied from it and the bitmap fill for the others;
// without, LaunchSampleAttentionAssemble's fill launch. `warp` (s33-sa): the count kernel's
// record and sort by the whole warp, and totals[2] = the rows left to the bitmap kernels (0: the
// fill launch skips the bitmap fill, `bitmap_rows` false).
cudaError_t LaunchSampleAttentionLeanCount(const SaAsmArgs& a, const AsmOut& out,
                                           int32_t* range_indptr, int32_t* col_indptr,
                                           int64_t* totals, int32_t* kept, int32_t* span_row,
                                           bool warp, cudaStream_t stream);
cudaError_t LaunchSampleAttentionLeanFill(const SaAsmArgs& a, const AsmOut& out,
                                          const int32_t* kept, const int32_t* span_row,
                                          bool bitmap_rows, cudaStream_t stream);

namespace {

// SPATTN_SA_LEAN (read once per build; SaArgs::lean passes it to the select launch): 0 main's
// launches (builder_steps' Assemble, SaCombineKernel); 1 SaAssembleLean without the kept ranges
// (the fill sorts the span rows again); 2 s32-sa's SaAssembleLean, with them where they fit;
// 3, unset or anything else: that with s33-sa's count kernel (the row record and the span sort
// by the whole warp), the totals written by the scan kernel straight into this thread's pinned
// host words (no copy) and the bitmap fill launch skipped where the span kernel left it no row.
// (s33-sa2's 4, the host waiting on a word the scan kernel publishes after the totals instead of
// on the stream, was not faster in a whole build on an H200:
// bench/results/kernels/s33-sa2/published_totals.patch.)
int SaLeanLevel() {
  const char* e = std::getenv("SPATTN_SA_LEAN");
  if (e != nullptr && e[0] >= '0' && e[0] <= '3') return e[0] - '0';
  return 3;
}

// Host-side times of the build under SPATTN_GPU_BUILDER_PROFILE (s33-sa2; a line after the
// stage line): the clock where the timer is on, else nothing is read.
using SaClock = std::chrono::steady_clock;
SaClock::time_point SaHostClock(const StageTimer* timer) {
  return timer->on() ? SaClock::now() : SaClock::time_point();
}
double SaMicros(SaClock::time_point a, SaClock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// This host thread's mapped pinned words for the lean assembly's totals (the scan kernel writes
// them, the host reads them after its stream synchronization: no device-to-host copy in the
// round trip).
struct PinnedWords {
  int64_t* host = nullptr;
  int64_t* dev = nullptr;
};
PinnedWords PinnedTotals() {
  thread_local MappedWords words;
  void *host, *dev;
  words.Get(&host, &dev);
  return PinnedWords{static_cast<int64_t*>(host), static_cast<int64_t*>(dev)};
}

// builder_steps' Assemble for sample_attention with fewer launches and one host round trip of
// one copy (s32-sa): the index's indptr arrays are carved before the count launch (their size is
// known) and written by its scan (no Narrow64 launches after the round trip); the records come
// from the span count kernel (no records launch); the span kernel's word `span_rest` comes
// zeroed (the caller's metadata upload: no memset); one scan launch for both arrays; the two
// totals in one 16-byte copy. With `keep_ranges`, the count launch also keeps each span row's
// ranges (2 * kAsmSpanCap words a unit, carved where they take at most an eighth of what the
// workspace has left) and the fill launch copies them instead of sorting the row's spans again.
// The same index as Assemble (the kept words carved the same way).
absl::StatusOr<SparseIndexView> SaAssembleLean(const BuildScope& env, const Layout& l,
                                               const SaAsmArgs& args, uint32_t* rec,
                                               uint32_t* span_rest, bool keep_ranges,
                                               bool warp, StageTimer* timer,
                                               const char* select_stage, double host_us[3]) {
  const int num_slots = l.host.num_heads(), num_blocks = l.host.num_blocks();
  const int64_t rows = static_cast<int64_t>(num_slots) * num_blocks;
  SparseIndexView v;
  AsmOut out;
  SPATTN_RETURN_IF_ERROR(StartAssembly(env, l, &v, &out));
  out.rec = rec;
  out.span_rest = span_rest;
  // s33-sa (`warp`): three totals (the third: rows left to the bitmap kernels), in pinned host
  // words where they can be had (the kernel's writes are the round trip's only transfer).
  const PinnedWords pinned = warp ? PinnedTotals() : PinnedWords{};
  int64_t* h_totals = pinned.host;
  int64_t* d_totals = pinned.dev;
  if (d_totals == nullptr) {
    SPATTN_ASSIGN_OR_RETURN(d_totals, Carve<int64_t>(env, warp ? 3 : 2, "index totals"));
  }
  int32_t *kept = nullptr, *span_row = nullptr;
  if (keep_ranges && rows > 0) {
    const int64_t words = rows * 2 * row_assembly::kAsmSpanCap;
    if (!env.available || 4 * (words + rows) <= env.available() / 8) {
      absl::StatusOr<int32_t*> k = Carve<int32_t>(env, words + rows, "span row ranges");
      if (k.ok()) {
        kept = *k;
        span_row = *k + words;
      }
    }
  }
  CarveKeptWords(env, l, rows, &out);  // as Assemble carves them
  int32_t *range_indptr, *col_indptr;
  SPATTN_ASSIGN_OR_RETURN(range_indptr, CarveKept<int32_t>(env, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(col_indptr, CarveKept<int32_t>(env, rows + 1, "col_indptr"));
  v.range_indptr = range_indptr;
  v.col_indptr = col_indptr;
  timer->Mark(select_stage);
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampleAttentionLeanCount(args, out, range_indptr, col_indptr,
                                                             d_totals, kept, span_row, warp,
                                                             env.stream),
                              "index assembly (count)");
  timer->Mark("count");
  const auto wait_start = SaHostClock(timer);
  int64_t totals[3] = {0, 0, 1};
  if (h_totals == nullptr) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(totals, d_totals, (warp ? 3 : 2) * sizeof(int64_t),
                                                cudaMemcpyDeviceToHost, env.stream),
                                "index totals");
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "index count pass");
  const auto wait_end = SaHostClock(timer);
  if (h_totals != nullptr) {
    for (int i = 0; i < 3; ++i) totals[i] = h_totals[i];
  }
  const bool bitmap_rows = !warp || totals[2] != 0;
  SPATTN_RETURN_IF_ERROR(CheckIndexTotals(env, totals));
  SPATTN_RETURN_IF_ERROR(CarveIndexEntries(env, totals, &out, &v));
  timer->Mark("sync+alloc");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchSampleAttentionLeanFill(args, out, kept, span_row, bitmap_rows, env.stream),
      "index assembly (fill)");
  if (timer->on()) {
    host_us[1] = SaMicros(wait_start, wait_end);
    host_us[2] = SaMicros(wait_end, SaHostClock(timer));
  }
  timer->Mark("fill");
  return v;
}

absl::StatusOr<SparseIndexView> BuildSampleAttention(const BuildScope& env,
                                                     const AttentionProblem& p, const AttnParams& a,
                                                     const SampleAttentionParams& params,
                                                     const std::vector<int>& heads) {
  const SaClock::time_point entry = SaClock::now();
  const int blk = params.block_size;
  const Layout l = MakeLayout(p, heads, blk);
  const int nslots = l.host.num_heads(), nb = p.batch();
  std::vector<SaUnit> units;
  std::vector<SaItem> items;
  std::vector<int32_t> unit_first;
  int64_t score_total = 0;
  for (int s = 0; s < nslots; ++s) {
    for (int b = 0; b < nb; ++b) {
      unit_first.push_back(static_cast<int32_t>(units.size()));
      const int ql = p.q_len(b), kl = p.k_len(b);
      const int n = std::min(params.chunk_n, (ql + blk - 1) / blk);
      int begin = 0;
      for (int c = 1; c <= n; ++c) {
        const int end = static_cast<int>(static_cast<int64_t>(c) * ql / n);
        if (end <= begin) continue;
        SaUnit u;
        u.slot = s;
        u.seq = b;
        u.row_begin = begin;
        u.row_end = end;
        u.s1 = end;
        u.s0 = std::max(0, end - blk);
        u.n_keys = p.causal ? p.query_pos(b, end - 1) + 1 : kl;
        u.n_col = (kl + blk - 1) / blk;
        u.sb_min = p.causal ? 0 : FloorDiv(-(static_cast<int64_t>(kl) - 1), blk);
        u.n_slash = std::max(0, FloorDiv(static_cast<int64_t>(kl) - 1, blk) - u.sb_min + 1);
        u.score_off = score_total;
        score_total += u.n_col + u.n_slash;
        u.item_begin = static_cast<int>(items.size());
        for (int k0 = 0; k0 < u.n_keys; k0 += kSaSpan) {
          items.push_back(
              SaItem{static_cast<int>(units.size()), k0, std::min(u.n_keys, k0 + kSaSpan)});
        }
        u.item_count = static_cast<int>(items.size()) - u.item_begin;
        units.push_back(u);
        begin = end;
      }
    }
  }
  unit_first.push_back(static_cast<int32_t>(units.size()));

  SaArgs sa;
  sa.p = a;
  // The host arrays in one upload (one pageable copy instead of five, as anchor's).
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  MetaBlob blob;
  const size_t o_heads = blob.Add(heads32), o_units = blob.Add(units), o_items = blob.Add(items);
  const size_t o_geo = blob.Add(l.geo), o_first = blob.Add(unit_first);
  // The lean assembly's span_rest word (SaAssembleLean), zeroed by this upload.
  const size_t o_rest = blob.Add(std::vector<uint32_t>(4, 0u));
  SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream));
  const SaClock::time_point uploaded = SaClock::now();
  sa.heads = blob.At<int32_t>(o_heads);
  sa.units = blob.At<SaUnit>(o_units);
  sa.items = blob.At<SaItem>(o_items);
  sa.num_units = static_cast<int>(units.size());
  sa.num_items = static_cast<int>(items.size());
  sa.block_size = blk;
  SPATTN_ASSIGN_OR_RETURN(sa.partial, Carve<float2>(env, static_cast<int64_t>(items.size()) * 128,
                                                    "sample_attention row partials"));
  SPATTN_ASSIGN_OR_RETURN(sa.lse2, Carve<float>(env, static_cast<int64_t>(units.size()) * 128,
                                                "sample_attention row lse"));
  SPATTN_ASSIGN_OR_RETURN(sa.item_scores,
                          Carve<float>(env, static_cast<int64_t>(items.size()) * 2 * kSaItemScores,
                                       "sample_attention span scores"));
  // One pass for block sizes of at least one 64-key tile: the rows' block partials (69 entries
  // of 128 rows per span at blk 128, 133 at 64) instead of pass 2's recomputed Q K^T. Same
  // densities and recalls at 32K and 128K on the device, the CPU twin's rows in every twin case
  // (kernels/cuda/NOTES.md, Session 25 — s25-build).
  if (blk >= 64 && !items.empty()) {
    sa.op_ncol = kSaSpan / blk + 1;
    sa.op_entries = sa.op_ncol + kSaSpan / blk + 4;
    int max_entries = 0;
    for (const SaUnit& u : units) max_entries = std::max(max_entries, u.n_col + u.n_slash);
    sa.op_ctas_y = std::max(1, (max_entries + 63) / 64);
    SPATTN_ASSIGN_OR_RETURN(
        sa.op_partial, Carve<float2>(env, static_cast<int64_t>(items.size()) * sa.op_entries * 128,
                                     "sample_attention block partials"));
  }
  SPATTN_ASSIGN_OR_RETURN(sa.scores, Carve<float>(env, score_total, "sample_attention scores"));
  SPATTN_ASSIGN_OR_RETURN(sa.selected,
                          Carve<int32_t>(env, score_total, "sample_attention selection"));
  SPATTN_ASSIGN_OR_RETURN(sa.selected_n, Carve<int32_t>(env, 2 * static_cast<int64_t>(units.size()),
                                                        "sample_attention selection counts"));
  sa.alpha_c = params.alpha_c;
  sa.alpha_s = params.alpha_s;
  const int lean = SaLeanLevel();  // read once: the select launch and the assembly below
  sa.lean = lean > 0;
  if (score_total > 0 && sa.op_partial == nullptr) {
    // Units without keys get no span: their scores stay 0. (The one pass's combine writes every
    // score of every unit, 0 where no span touches it: no memset there.)
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(sa.scores, 0, score_total * sizeof(float), env.stream),
        "sample_attention scores");
  }
  // The assembler's row records (row_assembly.cuh: made before the count pass, read by both),
  // then the span kernel's word (AsmOut::span_rest: how many rows it left to the bitmap kernel).
  const int64_t rec_words =
      static_cast<int64_t>(nslots) * l.host.num_blocks() * row_assembly::kAsmRecWords;
  SPATTN_ASSIGN_OR_RETURN(uint32_t* const asm_rec,
                          Carve<uint32_t>(env, rec_words + 4, "assembly row records"));
  StageTimer timer(env.stream, "sample_attention");
  sa.pass1_done = timer.Event("pass1");
  sa.pass2_done = timer.Event("pass2");
  const SaClock::time_point pre_launch = SaHostClock(&timer);
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampleAttentionSelect(sa, env.stream),
                              "sample_attention selection");
  double host_us[3] = {timer.on() ? SaMicros(entry, SaClock::now()) : 0.0, 0.0, 0.0};
  // s35-sa: of the launch time, entry to the metadata upload's return and entry to the select
  // launch's call (host time before the one pass is launched: 28-37 / 36-51 us on an H200 host).
  const double upload_us = timer.on() ? SaMicros(entry, uploaded) : 0.0;
  const double prep_us = timer.on() ? SaMicros(entry, pre_launch) : 0.0;

  SaAsmArgs asm_args;
  asm_args.geo = blob.At<BlockGeoDev>(o_geo);
  asm_args.num_blocks = l.host.num_blocks();
  asm_args.num_slots = nslots;
  asm_args.batch = nb;
  asm_args.units = sa.units;
  asm_args.unit_first = blob.At<int32_t>(o_first);
  asm_args.selected = sa.selected;
  asm_args.selected_n = sa.selected_n;
  asm_args.block_size = blk;
  asm_args.local_tokens = params.local_tokens;
  absl::StatusOr<SparseIndexView> v =
      lean > 0 ? SaAssembleLean(env, l, asm_args, asm_rec, blob.At<uint32_t>(o_rest), lean > 1,
                                lean > 2, &timer, "cra", host_us)
               : Assemble(
                     env, l,
                     [&](const AsmOut& out, bool fill) {
                       AsmOut o = out;
                       o.rec = asm_rec;
                       o.span_rest = asm_rec + rec_words;
                       return LaunchSampleAttentionAssemble(asm_args, o, fill, env.stream);
                     },
                     &timer, "cra");
  if (!v.ok()) {
    timer.Cancel();
  } else if (timer.on()) {
    // Host: entry to the select launch's return; the wait for the totals; from them to the
    // fill launch's return (lean > 0); entry to the upload's return; entry to the select launch.
    std::fprintf(stderr,
                 "sample_attention host: launch %.1f us, wait %.1f us, post %.1f us, "
                 "upload-done %.1f us, prep %.1f us\n",
                 host_us[0], host_us[1], host_us[2], upload_us, prep_us);
  }
  return v;
}

}  // namespace

absl::StatusOr<SparseIndexView> BuildSampleAttentionIndex(const BuildScope& scope,
                                                          const AttentionProblem& p,
                                                          const MethodConfig& config,
                                                          const std::vector<int>& heads,
                                                          int block_m) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  return BuildSampleAttention(scope, p, *scope.params, config.sample_attention, heads);
}

}  // namespace cuda
}  // namespace spattn
