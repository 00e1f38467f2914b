// Host side of the GPU sampled_lines index builder (kernels: sampled_lines.cu; CPU twin:
// kernels/builders/sampled_lines.cc): the sampled-row and group tables, the last-rows evidence
// (vertical_slash's estimate, builder_steps.h RunEstimate), the three passes, and the row
// assembly. Two host round trips: the kept-entry total (to carve the entry list) and the CSR
// totals (Assemble). The estimate and the evidence means run on a second stream beside passes
// 1-2 (SlKnobs::est_stream, session 33) and the host tables travel in one copy (one_upload).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
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

constexpr int kSlTile = 64;           // keys per tile of the passes
constexpr int kSlCtasPerSm = 4;       // the passes' __launch_bounds__ / shared memory
constexpr int kSlMinSplitTiles = 16;  // shortest item of a split group

// Items per group: a group with more key tiles than `split_len` goes to ceil(tiles / split_len)
// CTAs of equal tile ranges. split_len is the total work over (SMs x CTAs per SM x waves), waves
// from SPATTN_SL_SPLIT_WAVES (default 6; 0 = never split, one CTA per group as before).
// SPATTN_SL_SPLIT_TILES=N > 0 sets split_len to N (tests: 1 splits every group into its tiles).
// Both read once per process (SampledLinesKnobs).
absl::StatusOr<int> SplitLength(int64_t total_tiles) {
  const SlKnobs& knobs = SampledLinesKnobs();
  if (knobs.split_tiles > 0) return knobs.split_tiles;
  const int waves = knobs.split_waves;
  if (waves <= 0 || total_tiles == 0) return INT_MAX;
  int dev = 0, sms = 0;
  SPATTN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev), "sampled_lines device");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                              "sampled_lines SM count");
  const int64_t ctas = static_cast<int64_t>(std::max(sms, 1)) * kSlCtasPerSm * waves;
  return static_cast<int>(std::max<int64_t>(kSlMinSplitTiles, (total_tiles + ctas - 1) / ctas));
}

// The estimate's second stream (SlKnobs::est_stream) and its fork / join events: one set per host
// thread, device and priority mode, made at first use and kept for the thread's life.
struct SlSide {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
struct SlSides {
  std::vector<SlSide> by_dev;  // [device * 2 + (mode == 2)]
  ~SlSides() {
    for (SlSide& s : by_dev) {
      if (s.stream != nullptr) cudaStreamDestroy(s.stream);
      if (s.fork != nullptr) cudaEventDestroy(s.fork);
      if (s.join != nullptr) cudaEventDestroy(s.join);
    }
  }
};
// Null (the estimate then runs on the build's stream) if any of them cannot be made.
SlSide* SideStream(int device, int mode) {
  thread_local SlSides sides;
  const size_t at = static_cast<size_t>(device) * 2 + (mode == 2 ? 1 : 0);
  if (sides.by_dev.size() <= at) sides.by_dev.resize(at + 1);
  SlSide& s = sides.by_dev[at];
  if (s.join != nullptr) return &s;
  int least = 0, greatest = 0;
  if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) greatest = 0;
  if (s.stream == nullptr &&
      cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, mode == 2 ? 0 : greatest) !=
          cudaSuccess) {
    s.stream = nullptr;
  }
  if (s.stream != nullptr && s.fork == nullptr &&
      cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) != cudaSuccess) {
    s.fork = nullptr;
  }
  if (s.fork != nullptr &&
      cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming) != cudaSuccess) {
    s.join = nullptr;
  }
  if (s.join == nullptr) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return &s;
}

// The side stream's end of work (Record, once) and `main`'s wait for it (Now, once): at the
// first reader of the evidence or, on an error path, when the build returns, so that no side
// work outlives the build's workspace.
class SlJoin {
 public:
  SlJoin(cudaStream_t main, const SlSide* side) : main_(main), side_(side) {}
  ~SlJoin() { (void)Now(); }
  SlJoin(const SlJoin&) = delete;
  SlJoin& operator=(const SlJoin&) = delete;
  cudaError_t Record() {
    if (side_ == nullptr || recorded_) return cudaSuccess;
    recorded_ = true;
    return cudaEventRecord(side_->join, side_->stream);
  }
  cudaError_t Now() {
    if (side_ == nullptr) return cudaSuccess;
    cudaError_t err = Record();
    const SlSide* side = side_;
    side_ = nullptr;
    if (err != cudaSuccess) return err;
    return cudaStreamWaitEvent(main_, side->join, 0);
  }

 private:
  cudaStream_t main_;
  const SlSide* side_;
  bool recorded_ = false;
};

// The host side's wall-clock split (session 37; SPATTN_SL_HOST_SPLIT=1, read once: one "sl host
// split:" line per build on stderr, which builder_stages.py does not parse; its own knob so that
// the profiled build times stay comparable with earlier sessions'): where the bench's build time
// outside the device stages ("gap") goes. Marks: entry, timer (the host tables built), sync1
// (passes 1-2 enqueued), wait1 (the entry total on the host), emit (emit enqueued), end.
bool SlHostSplitOn() {
  static const bool on = [] {
    const char* v = std::getenv("SPATTN_SL_HOST_SPLIT");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}
class SlHostSplit {
 public:
  SlHostSplit() : on_(SlHostSplitOn()) { Mark(); }
  ~SlHostSplit() {
    if (!on_ || n_ < 6) return;
    auto us = [&](int i) {
      return std::chrono::duration<double, std::micro>(t_[i] - t_[i - 1]).count();
    };
    std::fprintf(stderr,
                 "sl host split: tables %.1f us, enqueue1 %.1f us, wait1 %.1f us, enqueue2 %.1f "
                 "us, assemble %.1f us (its count sync + fill enqueue)\n",
                 us(1), us(2), us(3), us(4), us(5));
  }
  void Mark() {
    if (on_ && n_ < 6) t_[n_++] = std::chrono::steady_clock::now();
  }

 private:
  bool on_;
  int n_ = 0;
  std::chrono::steady_clock::time_point t_[6];
};

absl::StatusOr<SparseIndexView> BuildSampledLines(const BuildScope& env, const AttentionProblem& p,
                                                  const AttnParams& a,
                                                  const SampledLinesParams& params,
                                                  const std::vector<int>& heads, int block_m,
                                                  const std::vector<float>& gammas) {
  SlHostSplit split;
  SPATTN_RETURN_IF_ERROR(CheckSampledLinesGammas(gammas, heads.size()));
  const Layout l = MakeLayout(p, heads, block_m);
  const int nslots = l.host.num_heads(), nblocks = l.host.num_blocks();
  const SlKnobs& knobs = SampledLinesKnobs();
  const bool early = knobs.early_est;
  std::optional<StageTimer> timer;
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  const merged::EstimatePlan e = merged::MakeEstimatePlan(p, params.last_q);
  // Step 2: the last-rows evidence. Only the emit launch reads it: on a second stream
  // (SlKnobs::est_stream) it runs beside passes 1-2 (its small launches and their gaps under
  // theirs) and is joined before the emit launch.
  SlSide* side = nullptr;
  int dev = 0;
  if (knobs.est_stream != 0 && cudaGetDevice(&dev) == cudaSuccess) {
    side = SideStream(dev, knobs.est_stream);
  }
  std::optional<SlJoin> join;  // made at the fork (the side stream may fall back to null there)
  auto launch_estimate = [&](const int32_t* dh,
                             const merged::EstimateSeq* ds) -> absl::StatusOr<merged::EstimateParams> {
    if (side != nullptr && (cudaEventRecord(side->fork, env.stream) != cudaSuccess ||
                            cudaStreamWaitEvent(side->stream, side->fork, 0) != cudaSuccess)) {
      (void)cudaGetLastError();
      side = nullptr;
    }
    join.emplace(env.stream, side);
    const cudaStream_t est_stream = side != nullptr ? side->stream : env.stream;
    return merged::RunEstimate(p, a, e, ds, dh, nslots, env, est_stream, *timer);
  };
  // SlKnobs::early_est: a build that fails in the table checks below waits for the enqueued
  // estimate before its scratch is given back.
  struct EarlyGuard {
    cudaStream_t side = nullptr;
    ~EarlyGuard() {
      if (side != nullptr) (void)cudaStreamSynchronize(side);
    }
  } early_guard;
  merged::EstimateParams ep{};
  const int32_t* early_heads = nullptr;
  const merged::EstimateSeq* early_seqs = nullptr;
  if (early) {
    timer.emplace(env.stream, "sampled_lines");
    MetaBlob eb;
    const size_t o_h = eb.Add(heads32), o_s = eb.Add(e.seqs);
    SPATTN_RETURN_IF_ERROR(eb.Upload(env, env.stream));
    early_heads = eb.At<const int32_t>(o_h);
    early_seqs = eb.At<const merged::EstimateSeq>(o_s);
    early_guard.side = side != nullptr ? side->stream : env.stream;
    SPATTN_ASSIGN_OR_RETURN(ep, launch_estimate(early_heads, early_seqs));
  }
  if (params.clip_diagonals) {
    for (int b = 0; b < p.batch(); ++b) {
      if (block_m > kSlClipRows || p.k_len(b) > INT32_MAX / kSlClipRows / 2) {
        return absl::UnimplementedError(absl::StrCat(
            "sampled_lines.clip_diagonals: the GPU index builder takes block_m <= ", kSlClipRows,
            " and k_len <= ", INT32_MAX / kSlClipRows / 2, ", got ", block_m, " and ", p.k_len(b)));
      }
    }
  }
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
      ng.part_begin = 0;
      ng.parts = 1;
      ng.split_block = -1;
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
      rows.push_back(
          SlRow{r, pos, b, 1.f / static_cast<float>(n), static_cast<int>(groups.size()) - 1});
      cur->key_end = std::max(cur->key_end, p.causal ? pos + 1 : p.k_len(g.seq));
    }
    cur->rows += n;
    cur->blocks += 1;
  }
  // Items (key-tile ranges of a group), longest first: one CTA per item and slot.
  int64_t total_tiles = 0;
  for (const SlGroup& g : groups) total_tiles += (g.key_end + kSlTile - 1) / kSlTile;
  SPATTN_ASSIGN_OR_RETURN(const int split_len,
                          SplitLength(total_tiles * static_cast<int64_t>(heads.size())));
  std::vector<SlItem> items;
  std::vector<int32_t> split_block_ids;
  int64_t group_tiles = 0;  // SlGroup::tile_base (session 41's tile records)
  for (int gi = 0; gi < static_cast<int>(groups.size()); ++gi) {
    SlGroup& g = groups[gi];
    const int tiles = (g.key_end + kSlTile - 1) / kSlTile;
    g.tile_base = static_cast<int>(std::min<int64_t>(group_tiles, INT_MAX));
    group_tiles += tiles;
    const int parts = tiles > split_len ? (tiles + split_len - 1) / split_len : 1;
    g.part_begin = static_cast<int>(items.size());
    g.parts = parts;
    if (parts > 1) {
      g.split_block = static_cast<int>(split_block_ids.size());
      for (int b = 0; b < g.blocks; ++b) split_block_ids.push_back(g.block_begin + b);
    }
    for (int s = 0; s < parts; ++s) {
      items.push_back(SlItem{gi, s, static_cast<int>(static_cast<int64_t>(s) * tiles / parts),
                             static_cast<int>(static_cast<int64_t>(s + 1) * tiles / parts)});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const SlItem& x, const SlItem& y) {
    return x.tile_end - x.tile_begin > y.tile_end - y.tile_begin;
  });

  // An entry is (row position - its block's first row position) * k_len + key (one int32).
  for (int b = 0; b < nblocks; ++b) {
    const BlockGeoDev& g = l.geo[b];
    if (static_cast<int64_t>(g.last_pos - g.first_pos + 1) * p.k_len(g.seq) > INT32_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          "sampled_lines: the GPU index builder takes (block rows) x k_len < 2^31, got ",
          g.last_pos - g.first_pos + 1, " x ", p.k_len(g.seq)));
    }
  }

  split.Mark();
  if (!early) timer.emplace(env.stream, "sampled_lines");
  std::vector<int32_t> k_lens(p.batch());
  for (int b = 0; b < p.batch(); ++b) k_lens[b] = p.k_len(b);
  SlArgs sa;
  SlAsmArgs asm_args;
  const int32_t* d_heads = nullptr;
  const merged::EstimateSeq* d_ev_seqs = nullptr;
  if (knobs.one_upload) {
    // One pageable copy instead of up to nine (each ~µs of host time before pass 1 starts).
    MetaBlob blob;
    const size_t o_heads = blob.Add(heads32), o_seqs = blob.Add(e.seqs),
                 o_groups = blob.Add(groups), o_items = blob.Add(items), o_rows = blob.Add(rows),
                 o_split = blob.Add(split_block_ids), o_geo = blob.Add(l.geo),
                 o_gammas = blob.Add(gammas), o_klens = blob.Add(k_lens);
    SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream));
    d_heads = blob.At<const int32_t>(o_heads);
    d_ev_seqs = blob.At<const merged::EstimateSeq>(o_seqs);
    sa.groups = blob.At<const SlGroup>(o_groups);
    sa.items = blob.At<const SlItem>(o_items);
    sa.rows = blob.At<const SlRow>(o_rows);
    if (!split_block_ids.empty()) sa.split_block_ids = blob.At<const int32_t>(o_split);
    sa.geo = blob.At<const BlockGeoDev>(o_geo);
    if (!gammas.empty()) sa.gammas = blob.At<const float>(o_gammas);
    asm_args.k_lens = blob.At<const int32_t>(o_klens);
  } else {
    SPATTN_ASSIGN_OR_RETURN(d_heads, Upload(env, heads32, "sampled_lines heads"));
    SPATTN_ASSIGN_OR_RETURN(d_ev_seqs, Upload(env, e.seqs, "sampled_lines evidence sequences"));
  }
  if (early) {
    d_heads = early_heads;
    d_ev_seqs = early_seqs;
  }
  if (!early) {
    SPATTN_ASSIGN_OR_RETURN(ep, launch_estimate(d_heads, d_ev_seqs));
  }
  early_guard.side = nullptr;  // past the table checks: errors from here on are main's
  sa.p = a;
  sa.scale = p.softmax_scale;
  sa.heads = d_heads;
  sa.num_slots = nslots;
  sa.num_blocks = nblocks;
  if (!knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(sa.groups, Upload(env, groups, "sampled_lines groups"));
  }
  sa.num_groups = static_cast<int>(groups.size());
  sa.hist_blocks = 1;
  for (const SlGroup& g : groups) sa.hist_blocks = std::max(sa.hist_blocks, g.blocks);
  if (!knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(sa.items, Upload(env, items, "sampled_lines items"));
  }
  sa.num_items = static_cast<int>(items.size());
  if (!knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(sa.rows, Upload(env, rows, "sampled_lines rows"));
  }
  sa.num_rows = static_cast<int>(rows.size());
  sa.split_blocks = static_cast<int>(split_block_ids.size());
  if (sa.split_blocks > 0) {
    const int64_t parts = static_cast<int64_t>(nslots) * items.size() * kSlGroupRows;
    const int64_t sblocks = static_cast<int64_t>(nslots) * sa.split_blocks;
    SPATTN_ASSIGN_OR_RETURN(sa.part_max, Carve<float>(env, parts, "sampled_lines item maxima"));
    SPATTN_ASSIGN_OR_RETURN(sa.part_sum, Carve<float>(env, parts, "sampled_lines item sums"));
    SPATTN_ASSIGN_OR_RETURN(sa.split_hist,
                            CarveZeroed<unsigned>(env, sblocks * kSlBins,
                                                  "sampled_lines split histograms", env.stream));
    SPATTN_ASSIGN_OR_RETURN(sa.split_wsum,
                            Carve<float>(env, sblocks, "sampled_lines split weights"));
    SPATTN_ASSIGN_OR_RETURN(sa.split_vis, Carve<int32_t>(env, sblocks, "sampled_lines split keys"));
    if (!knobs.one_upload) {
      SPATTN_ASSIGN_OR_RETURN(sa.split_block_ids,
                              Upload(env, split_block_ids, "sampled_lines split blocks"));
    }
  }
  if (!knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(sa.geo, Upload(env, l.geo, "block geometry"));
  }
  sa.gamma = params.gamma;
  if (!gammas.empty() && !knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(sa.gammas, Upload(env, gammas, "sampled_lines gammas"));
  }
  sa.emit_exact = knobs.emit_exact;
  sa.emit_flush_late = SampledLinesKnobs().emit_flush_late;
  sa.classify_batch = SampledLinesKnobs().classify_batch;
  sa.hist_exact = SampledLinesKnobs().hist_exact;
  // The slots' kv-head runs (SlArgs::kv_run): the longest run length r <= 8 dividing the slots
  // with every r consecutive slots on one kv head.
  for (int r = 8; r >= 1; r /= 2) {
    bool ok = nslots % r == 0;
    for (int s = 0; ok && s < nslots; ++s) ok = heads[s] / a.group == heads[s - s % r] / a.group;
    if (ok) {
      sa.kv_run = r;
      break;
    }
  }
  sa.diagonal_floor = params.diagonal_floor;
  sa.short_floor = params.short_floor;
  sa.diagonal_cost = params.diagonal_cost;
  sa.clip_diagonals = params.clip_diagonals;
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
  // Session 41 (SlKnobs::tile_list): pass 1's per-row tile maxima for passes 2 and 3's tile
  // lists, 2 bytes per (slot, group tile, group row), written whole by pass 1; only up to 256 MiB
  // (128K x 32 heads: ~200 MB) and where the workspace has room, else main's walk.
  const int64_t tl_bytes = static_cast<int64_t>(nslots) * group_tiles * kSlGroupRows * 2;
  if (knobs.tile_list != 0 && group_tiles < INT_MAX && tl_bytes <= (int64_t{256} << 20)) {
    absl::StatusOr<uint16_t*> tm = Carve<uint16_t>(env, tl_bytes / 2, "sampled_lines tile maxima");
    if (tm.ok()) {
      sa.tile_max = *tm;
      sa.tile_stride = group_tiles * kSlGroupRows;
      sa.tile_list = knobs.tile_list;
    }
  }
  if (knobs.tile_list != 0 && sa.tile_max == nullptr) {
    static bool told = false;  // once per process (comparisons: a list asked for and not run)
    if (!told) {
      std::fprintf(stderr, "sampled_lines: no tile list (%lld bytes)\n",
                   static_cast<long long>(tl_bytes));
    }
    told = true;
  }
  if (side != nullptr) {
    // The evidence means too (they read the estimate alone), then the side stream's end.
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesEvidence(sa, side->stream),
                                "sampled_lines evidence");
    sa.evidence_ready = true;
    SPATTN_CUDA_RETURN_IF_ERROR(join->Record(), "sampled_lines estimate join");
  }
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesStats(sa, env.stream), "sampled_lines row stats");
  timer->Mark("row_stats");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesHistogram(sa, env.stream),
                              "sampled_lines histograms");
  timer->Mark("histogram");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchExclusiveScan64(sa.kept, irows, env.stream),
                              "sampled_lines entry offsets");
  int64_t total = 0;
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&total, sa.kept + irows, 8, cudaMemcpyDeviceToHost, env.stream),
      "sampled_lines entry total");
  split.Mark();
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "sampled_lines entry total");
  split.Mark();
  // Slices sized by pass 2's bound; the assembler reads the first `counts` entries of each.
  SPATTN_ASSIGN_OR_RETURN(sa.entries, Carve<int32_t>(env, total, "sampled_lines entries"));
  timer->Mark("entry_total");
  SPATTN_CUDA_RETURN_IF_ERROR(join->Now(), "sampled_lines estimate join");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesEmit(sa, env.stream), "sampled_lines emit");
  timer->Mark("emit");
  split.Mark();

  asm_args.geo = sa.geo;
  asm_args.num_blocks = nblocks;
  asm_args.num_rows = static_cast<int>(irows);
  asm_args.offsets = sa.kept;
  asm_args.counts = sa.counts;
  asm_args.entries = sa.entries;
  if (!knobs.one_upload) {
    SPATTN_ASSIGN_OR_RETURN(asm_args.k_lens, Upload(env, k_lens, "sampled_lines k_lens"));
  }
  asm_args.sink_tokens = params.sink_tokens;
  asm_args.local_tokens = params.local_tokens;
  asm_args.clip_diagonals = params.clip_diagonals;
  asm_args.rows_per_block = params.rows_per_block;
  asm_args.edge_rows = params.edge_rows;
  asm_args.row_spans = SampledLinesKnobs().asm_spans;
  asm_args.bucket_loads = SampledLinesKnobs().bucket_loads;
  // Rows of 5 or more assembler segments (> 256K keys): the entries bucketed by segment in place
  // first, so the assembler reads each once instead of once per segment (sampled_lines.cu, "Row
  // assembly"; at 128K, 3 segments, it does not pay yet). SPATTN_SL_ASM_BUCKET=0 / 1: never /
  // always (comparisons, tests).
  int max_segs = 0;
  for (int b = 0; b < nblocks; ++b) {
    max_segs = std::max(max_segs, SampledLinesAsmSegments(l.geo[b].key_end));
  }
  const int bucket_knob = SampledLinesKnobs().asm_bucket;
  const bool bucket =
      max_segs <= kSlMaxAsmSegs && (bucket_knob >= 0 ? bucket_knob == 1 : max_segs >= 5);
  if (bucket) {
    asm_args.max_segs = max_segs;
    asm_args.bucketed = sa.entries;
    SPATTN_ASSIGN_OR_RETURN(asm_args.seg, Carve<int32_t>(env, irows * (2 * max_segs + 1),
                                                         "sampled_lines segment buckets"));
    SPATTN_ASSIGN_OR_RETURN(
        asm_args.max_count,
        CarveZeroed<int32_t>(env, 1, "sampled_lines longest slice", env.stream));
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesBucket(asm_args, false, env.stream),
                                "sampled_lines buckets (count)");
    int32_t longest = 0;
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&longest, asm_args.max_count, 4, cudaMemcpyDeviceToHost, env.stream),
        "sampled_lines longest slice");
    SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "sampled_lines longest slice");
    // One row's copy per CTA, at most ~1 GiB of them.
    asm_args.staging_len = std::max<int64_t>(longest, 1);
    asm_args.staging_rows = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>({irows, 512, (int64_t{1} << 28) / asm_args.staging_len})));
    SPATTN_ASSIGN_OR_RETURN(
        asm_args.staging,
        Carve<int32_t>(env, asm_args.staging_rows * asm_args.staging_len, "sampled_lines staging"));
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampledLinesBucket(asm_args, true, env.stream),
                                "sampled_lines buckets (fill)");
    if (std::getenv("SPATTN_GPU_BUILDER_PROFILE") != nullptr) {
      std::fprintf(stderr,
                   "gpu builder sampled_lines: entry slices %lld, longest %d, %d segments, %d "
                   "staging rows\n",
                   static_cast<long long>(total), longest, max_segs, asm_args.staging_rows);
    }
    timer->Mark("bucket");
  }
  auto v = Assemble(
      env, l,
      [&](const AsmOut& out, bool fill) {
        return LaunchSampledLinesAssemble(asm_args, out, fill, env.stream);
      },
      &*timer, "select");
  if (!v.ok()) timer->Cancel();
  split.Mark();
  return v;
}

}  // namespace

absl::StatusOr<SparseIndexView> BuildSampledLinesIndex(const BuildScope& scope,
                                                       const AttentionProblem& p,
                                                       const MethodConfig& config,
                                                       const std::vector<int>& heads, int block_m,
                                                       const std::vector<float>& gammas) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  if (config.sampled_lines.last_q > merged::kMaxEstimateRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampled_lines.last_q: the GPU index builder takes at most ",
                     merged::kMaxEstimateRows, " rows, got ", config.sampled_lines.last_q));
  }
  return BuildSampledLines(scope, p, *scope.params, config.sampled_lines, heads, block_m, gammas);
}

}  // namespace cuda
}  // namespace spattn
