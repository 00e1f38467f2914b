// Host side of the GPU AnchorAttention index builder (kernels: anchor.cu; CPU twin:
// kernels/builders/anchor.cc): host-side tables from the problem's sizes, workspace carving, and
// the count-then-fill row assembly (builder_steps.h: Assemble) with its one host round trip.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/anchor_knobs.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"

namespace spattn {

namespace cuda {

// anchor.cu (s40-anchor, AnKnobs::lean): the count pass, then one CTA scanning both count arrays
// in place into offsets, writing them as int32 into range_indptr / col_indptr and the two totals
// into totals[0, 2).
// anchor.cu (s41-anchor, AnKnobs::early): parts 1 = the anchor pass, 2 = the stripe scan.
cudaError_t LaunchAnchorSelectParts(const AnArgs& a, int parts, cudaStream_t stream);
cudaError_t LaunchAnchorLeanCount(const AnAsmArgs& a, const AsmOut& out, int32_t* range_indptr,
                                  int32_t* col_indptr, int64_t* totals, cudaStream_t stream);

namespace {

constexpr int kAnSpan = 2048;  // keys per stripe-scan CTA

// ---- s40-anchor: the lean launch sequence (AnKnobs::lean) ----

// This thread's pinned host staging buffers for the builds' small uploads (a pageable copy
// stages through the driver's buffer before cudaMemcpyAsync returns): kAnMetaStage for the
// pass's tables and the index metadata, kAnStripeStage for the stripe scan's tables (s41-anchor,
// AnKnobs::early: built and uploaded after the anchor pass's launch). A build rewrites a stage
// only after the previous build on this thread synchronized its stream (every lean build does
// before it returns: the totals' round trip, or AnSyncOnExit on an error path). nullptr where
// pinned memory cannot be had (the caller copies from pageable memory).
enum AnStageId { kAnMetaStage = 0, kAnStripeStage = 1 };
char* AnStage(AnStageId id, size_t bytes) {
  thread_local PinnedBuffer stages[2];
  return stages[id].Get(bytes, size_t{1} << 16);
}

// The host tables of one build. s41-anchor (AnKnobs::early): this thread's, reused by its next
// build (cleared, capacity kept): at 128K the groups and items tables are ~128 KB each, which
// glibc maps fresh and page-faults in every build when they are a build's own vectors.
struct AnTables {
  std::vector<AnGroup> slot_groups, groups;
  std::vector<int32_t> group_of_block, heads32;
  std::vector<AnTile> tiles;
  std::vector<AnItem> items;
  void Clear() {
    slot_groups.clear();
    groups.clear();
    group_of_block.clear();
    heads32.clear();
    tiles.clear();
    items.clear();
  }
};
AnTables& AnThreadTables() {
  thread_local AnTables tables;
  tables.Clear();
  return tables;
}

// Microseconds since `t0` (the profile's host line).
double AnHostUs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// MetaBlob's layout (each array 256-byte aligned) over borrowed vectors, uploaded from the
// pinned stage at `stage` (or, where that is null, from a pageable copy as MetaBlob does).
class AnBlob {
 public:
  template <typename T>
  size_t Add(const std::vector<T>& v) {
    const size_t at = (size_ + 255) / 256 * 256;
    parts_.push_back(Part{v.data(), v.size() * sizeof(T), at});
    size_ = at + std::max<size_t>(v.size() * sizeof(T), 1);
    return at;
  }
  size_t size() const { return size_; }
  absl::Status Upload(void* dev, char* stage, cudaStream_t stream) {
    std::vector<char> pageable;
    char* src = stage;
    if (src == nullptr) {
      pageable.resize(size_);
      src = pageable.data();
    }
    for (const Part& part : parts_) {
      if (part.bytes > 0) std::memcpy(src + part.at, part.src, part.bytes);
    }
    base_ = static_cast<char*>(dev);
    return CudaStatus(cudaMemcpyAsync(dev, src, size_, cudaMemcpyHostToDevice, stream),
                      "anchor metadata upload");
  }
  template <typename T>
  T* At(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  struct Part {
    const void* src;
    size_t bytes, at;
  };
  std::vector<Part> parts_;
  size_t size_ = 0;
  char* base_ = nullptr;
};

// Synchronizes the stream when the build leaves before its round trip (an error path), so that
// no copy from the pinned stage is in flight when the thread's next build rewrites it.
struct AnSyncOnExit {
  explicit AnSyncOnExit(cudaStream_t s) : stream(s) {}
  AnSyncOnExit(const AnSyncOnExit&) = delete;
  AnSyncOnExit& operator=(const AnSyncOnExit&) = delete;
  cudaStream_t stream;
  bool synced = false;
  ~AnSyncOnExit() {
    if (!synced) {
      cudaStreamSynchronize(stream);
      (void)cudaGetLastError();
    }
  }
};

// This thread's mapped pinned words for the totals (the scan kernel writes them; no copy).
int64_t* AnPinnedTotals(int64_t** dev) {
  thread_local MappedWords words;
  void *host = nullptr, *d = nullptr;
  words.Get(&host, &d);
  *dev = static_cast<int64_t*>(d);
  return static_cast<int64_t*>(host);
}

// builder_steps' Assemble with fewer launches and copies: the index's indptr arrays carved
// before the count launch and written by its one scan launch (no LaunchExclusiveScan64 /
// LaunchNarrow64 pairs), the totals written into mapped host words (no device-to-host copies;
// one 16-byte copy where they cannot be had), the index metadata uploaded from the pinned stage.
// The same carves as StartAssembly + CarveKeptWords in the workspace; the same index.
absl::StatusOr<SparseIndexView> AnAssembleLean(const BuildScope& env, const Layout& l,
                                               const AnAsmArgs& args, char* stage,
                                               StageTimer* timer, AnSyncOnExit* sync) {
  const int64_t rows = static_cast<int64_t>(l.host.num_heads()) * l.host.num_blocks();
  SparseIndexView v;
  AsmOut out;
  v.block_m = l.host.block_m;
  v.num_heads = l.host.num_heads();
  v.num_blocks = l.host.num_blocks();
  AnBlob kb;
  const size_t o_heads = kb.Add(l.host.heads), o_offsets = kb.Add(l.host.block_offsets);
  const int64_t kb_bytes = static_cast<int64_t>(kb.size());
  SPATTN_ASSIGN_OR_RETURN(void* kdev, env.keep ? env.keep(kb_bytes, "index metadata")
                                               : env.alloc(kb_bytes, "builder metadata"));
  SPATTN_RETURN_IF_ERROR(kb.Upload(kdev, stage, env.stream));
  v.heads = kb.At<int32_t>(o_heads);
  v.block_offsets = kb.At<int32_t>(o_offsets);
  out.num_blocks = l.host.num_blocks();
  SPATTN_ASSIGN_OR_RETURN(out.count_ranges, Carve<int64_t>(env, rows + 1, "range counts"));
  SPATTN_ASSIGN_OR_RETURN(out.count_cols, Carve<int64_t>(env, rows + 1, "column counts"));
  int64_t* d_totals = nullptr;
  int64_t* h_totals = AnPinnedTotals(&d_totals);
  if (d_totals == nullptr) {
    SPATTN_ASSIGN_OR_RETURN(d_totals, Carve<int64_t>(env, 2, "index totals"));
  }
  CarveKeptWords(env, l, rows, &out);
  int32_t *range_indptr, *col_indptr;
  SPATTN_ASSIGN_OR_RETURN(range_indptr, CarveKept<int32_t>(env, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(col_indptr, CarveKept<int32_t>(env, rows + 1, "col_indptr"));
  v.range_indptr = range_indptr;
  v.col_indptr = col_indptr;
  timer->Mark("stripes");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchAnchorLeanCount(args, out, range_indptr, col_indptr, d_totals, env.stream),
      "index assembly (count)");
  timer->Mark("count");
  int64_t totals[2] = {0, 0};
  if (h_totals == nullptr) {
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(totals, d_totals, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, env.stream),
        "index totals");
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "index count pass");
  sync->synced = true;
  if (h_totals != nullptr) {
    totals[0] = h_totals[0];
    totals[1] = h_totals[1];
  }
  SPATTN_RETURN_IF_ERROR(CheckIndexTotals(env, totals));
  SPATTN_RETURN_IF_ERROR(CarveIndexEntries(env, totals, &out, &v));
  timer->Mark("sync+alloc");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorAssemble(args, out, true, env.stream),
                              "index assembly (fill)");
  timer->Mark("fill");
  return v;
}

absl::StatusOr<SparseIndexView> BuildAnchor(const BuildScope& env, const AttentionProblem& p,
                                            const AttnParams& a, const AnchorParams& params,
                                            const std::vector<int>& heads) {
  const auto t_entry = std::chrono::steady_clock::now();  // the profile's host line
  const int bm = params.block_size, step = params.step;
  const Layout l = MakeLayout(p, heads, bm);
  const int nslots = l.host.num_heads(), nb = p.batch(), num_blocks = l.host.num_blocks();
  const bool lean = AnchorKnobs().lean;
  const bool early = lean && AnchorKnobs().early;
  AnTables local;
  AnTables& tb = early ? AnThreadTables() : local;
  std::vector<AnGroup>& slot_groups = tb.slot_groups;
  std::vector<int32_t>& group_of_block = tb.group_of_block;
  group_of_block.assign(num_blocks, 0);
  // Groups of one slot (the same for every slot), then replicated per slot.
  for (int b = 0; b < nb; ++b) {
    const int ql = p.q_len(b), kl = p.k_len(b);
    const int nqb = (ql + bm - 1) / bm;
    const int64_t groups = (static_cast<int64_t>(nqb) + step - 1) / step;
    for (int64_t g = 0; g < groups; ++g) {
      const int qb0 = static_cast<int>(g * step);
      const int qb1 = static_cast<int>(std::min<int64_t>(nqb, (g + 1) * step));
      const int row0 = qb0 * bm, row_end = std::min(ql, qb1 * bm);
      AnGroup gr{};
      gr.seq = b;
      gr.first_block = l.host.block_offsets[b] + qb0;
      gr.num_blocks = qb1 - qb0;
      gr.gfp = p.query_pos(b, row0);
      gr.glp = p.query_pos(b, row_end - 1);
      gr.init_end = std::min(params.init_tokens, kl);
      gr.r1 = std::min(gr.init_end, gr.gfp);
      gr.r2_end = p.causal ? gr.glp + 1 : std::min(kl, std::max(gr.init_end, gr.glp + 1));
      gr.a1 = gr.init_end;
      gr.b1 = gr.gfp;
      gr.a2 = p.causal ? 0 : std::max(gr.init_end, gr.r2_end);
      gr.b2 = p.causal ? 0 : kl;
      gr.k_len = kl;
      for (int qb = qb0; qb < qb1; ++qb) {
        group_of_block[l.host.block_offsets[b] + qb] = static_cast<int32_t>(slot_groups.size());
      }
      slot_groups.push_back(gr);
    }
  }
  const int groups_per_slot = static_cast<int>(slot_groups.size());
  std::vector<AnGroup>& groups = tb.groups;
  groups.reserve(static_cast<size_t>(groups_per_slot) * nslots);
  int64_t words = 0;
  for (int s = 0; s < nslots; ++s) {
    for (AnGroup gr : slot_groups) {
      gr.slot = s;
      gr.bitmap_off = words;
      words += (gr.k_len + 31) / 32;
      groups.push_back(gr);
    }
  }
  // Stripe scan: m-tiles of 16 pooled queries, ordered by (kv head, sequence, group, slot) so
  // that one CTA's tiles share the keys; items of up to 8 tiles per key span. Built before the
  // launches (main's) or, with AnKnobs::early, while the anchor pass runs (it does not read them).
  std::vector<AnTile>& tiles = tb.tiles;
  std::vector<AnItem>& items = tb.items;
  auto make_stripe_work = [&] {
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      for (int b = 0; b < nb; ++b) {
        const size_t first_tile = tiles.size();
        for (int gi = 0; gi < groups_per_slot; ++gi) {
          if (slot_groups[gi].seq != b) continue;
          for (int s = 0; s < nslots; ++s) {
            if (p.kv_head_of(heads[s]) != kvh) continue;
            const int group = s * groups_per_slot + gi;
            for (int r = 0; r < groups[group].num_blocks; r += 16) {
              tiles.push_back(AnTile{group, r, std::min(16, groups[group].num_blocks - r)});
            }
          }
        }
        for (size_t t0 = first_tile; t0 < tiles.size(); t0 += 8) {
          const int count = static_cast<int>(std::min<size_t>(8, tiles.size() - t0));
          int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
          for (int k = 0; k < count; ++k) {
            const AnGroup& gr = groups[tiles[t0 + k].group];
            if (gr.a1 < gr.b1) {
              lo = std::min<int64_t>(lo, gr.a1);
              hi = std::max<int64_t>(hi, gr.b1);
            }
            if (gr.a2 < gr.b2) {
              lo = std::min<int64_t>(lo, gr.a2);
              hi = std::max<int64_t>(hi, gr.b2);
            }
          }
          if (lo >= hi) continue;
          for (int64_t k0 = lo / 64 * 64; k0 < hi; k0 += kAnSpan) {
            items.push_back(AnItem{static_cast<int>(t0), count, static_cast<int>(k0),
                                   static_cast<int>(std::min<int64_t>(hi, k0 + kAnSpan))});
          }
        }
      }
    }
  };
  if (!early) make_stripe_work();

  AnArgs an;
  an.p = a;
  // The host arrays in one upload (one pageable copy instead of six; the build's wall time did
  // not move beyond its run-to-run spread, kernels/cuda/NOTES.md Session 22 — s22-build).
  std::vector<int32_t>& heads32 = tb.heads32;
  heads32.assign(heads.begin(), heads.end());
  MetaBlob blob;
  AnBlob lean_blob;  // lean: the same layout, from the pinned stage
  size_t o_heads, o_geo, o_groups, o_gob, o_tiles, o_items;
  char* stage = nullptr;  // lean: the pinned stage (this blob, then the index metadata)
  size_t kept_at = 0;     // lean: the index metadata's offset in it
  std::optional<AnSyncOnExit> sync;
  // The same layout in either blob (MetaBlob: main's pageable copy; AnBlob: the pinned stage);
  // the stripe scan's two tables last (early: a blob of their own, after the pass's launch).
  auto add_arrays = [&](auto& b, bool pass_work, bool stripe_work) {
    if (pass_work) {
      o_heads = b.Add(heads32);
      o_geo = b.Add(l.geo);
      o_groups = b.Add(groups);
      o_gob = b.Add(group_of_block);
    }
    if (stripe_work) {
      o_tiles = b.Add(tiles);
      o_items = b.Add(items);
    }
  };
  auto point_args = [&](const auto& b, bool pass_work, bool stripe_work) {
    if (pass_work) {
      an.heads = b.template At<int32_t>(o_heads);
      an.geo = b.template At<BlockGeoDev>(o_geo);
      an.groups = b.template At<AnGroup>(o_groups);
      an.group_of_block = b.template At<int32_t>(o_gob);
    }
    if (stripe_work) {
      an.tiles = b.template At<AnTile>(o_tiles);
      an.items = b.template At<AnItem>(o_items);
    }
  };
  if (!lean) {
    add_arrays(blob, true, true);
    SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream));
    point_args(blob, true, true);
  } else {
    add_arrays(lean_blob, true, !early);
    kept_at = (lean_blob.size() + 255) / 256 * 256;
    const size_t kept_bytes = 512 + l.host.heads.size() * sizeof(l.host.heads[0]) +
                              l.host.block_offsets.size() * sizeof(l.host.block_offsets[0]);
    stage = AnStage(kAnMetaStage, kept_at + kept_bytes);
    SPATTN_ASSIGN_OR_RETURN(void* dev,
                            env.alloc(static_cast<int64_t>(lean_blob.size()), "builder metadata"));
    sync.emplace(env.stream);
    SPATTN_RETURN_IF_ERROR(lean_blob.Upload(dev, stage, env.stream));
    point_args(lean_blob, true, !early);
  }
  an.num_blocks = num_blocks;
  an.num_slots = nslots;
  an.groups_per_slot = groups_per_slot;
  an.softmax_scale = p.softmax_scale;
  const int64_t slot_blocks = static_cast<int64_t>(nslots) * num_blocks;
  SPATTN_ASSIGN_OR_RETURN(an.xa, Carve<float>(env, slot_blocks, "anchor pooled anchors"));
  SPATTN_ASSIGN_OR_RETURN(an.qbar,
                          Carve<float>(env, slot_blocks * p.head_dim, "anchor pooled queries"));
  an.num_items = static_cast<int>(items.size());
  SPATTN_ASSIGN_OR_RETURN(an.bitmaps, Carve<uint32_t>(env, words, "anchor kept-key bitmaps"));
  if (lean && words > 0 && reinterpret_cast<uintptr_t>(an.bitmaps) % 16 == 0) {
    an.clear_words = words;  // zeroed by the anchor pass's CTAs
  } else if (words > 0) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(an.bitmaps, 0, words * 4, env.stream),
                                "anchor bitmaps");
  }
  an.theta = params.theta;
  StageTimer timer(env.stream, "anchor");
  an.anchor_done = timer.Event("anchor");
  double us_pass = 0, us_stripes = 0;
  if (!early) {
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorSelect(an, env.stream), "anchor selection");
    us_pass = us_stripes = AnHostUs(t_entry);
  } else {
    // The anchor pass first, then the stripe scan's tables built and uploaded under it.
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorSelectParts(an, 1, env.stream), "anchor pass");
    us_pass = AnHostUs(t_entry);
    make_stripe_work();
    AnBlob stripe_blob;
    add_arrays(stripe_blob, false, true);
    SPATTN_ASSIGN_OR_RETURN(
        void* sdev, env.alloc(static_cast<int64_t>(stripe_blob.size()), "builder metadata"));
    SPATTN_RETURN_IF_ERROR(
        stripe_blob.Upload(sdev, AnStage(kAnStripeStage, stripe_blob.size()), env.stream));
    point_args(stripe_blob, false, true);
    an.num_items = static_cast<int>(items.size());
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorSelectParts(an, 2, env.stream), "anchor stripes");
    us_stripes = AnHostUs(t_entry);
  }
  // Tests (AnchorKnobs): the pooled anchors and queries of this build, downloaded.
  const AnKnobs& knobs = AnchorKnobs();
  if (knobs.capture_xa != nullptr || knobs.capture_qbar != nullptr) {
    const int64_t nq = slot_blocks * p.head_dim;
    if (knobs.capture_xa != nullptr) knobs.capture_xa->assign(slot_blocks, 0.f);
    if (knobs.capture_qbar != nullptr) knobs.capture_qbar->assign(nq, 0.f);
    if (knobs.capture_xa != nullptr && slot_blocks > 0) {
      SPATTN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(knobs.capture_xa->data(), an.xa, slot_blocks * sizeof(float),
                          cudaMemcpyDeviceToHost, env.stream),
          "anchor x_a capture");
    }
    if (knobs.capture_qbar != nullptr && nq > 0) {
      SPATTN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(knobs.capture_qbar->data(), an.qbar, nq * sizeof(float),
                          cudaMemcpyDeviceToHost, env.stream),
          "anchor qbar capture");
    }
    SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "anchor capture");
  }

  AnAsmArgs asm_args;
  asm_args.geo = an.geo;
  asm_args.num_blocks = num_blocks;
  asm_args.num_slots = nslots;
  asm_args.groups = an.groups;
  asm_args.group_of_block = an.group_of_block;
  asm_args.groups_per_slot = groups_per_slot;
  asm_args.bitmaps = an.bitmaps;
  if (lean) {
    auto v = AnAssembleLean(env, l, asm_args, stage == nullptr ? nullptr : stage + kept_at, &timer,
                            &*sync);
    if (!v.ok()) timer.Cancel();
    // s41-anchor: where the host time goes (the profile's gap): microseconds from the entry to
    // the anchor pass's launch returning, the stripe scan's, and the return (the fill launched).
    if (timer.on() && v.ok()) {
      std::fprintf(stderr, "anchor host us: early %d pass %.1f stripes %.1f return %.1f\n",
                   static_cast<int>(early), us_pass, us_stripes, AnHostUs(t_entry));
    }
    return v;
  }
  auto v = Assemble(
      env, l,
      [&](const AsmOut& out, bool fill) {
        return LaunchAnchorAssemble(asm_args, out, fill, env.stream);
      },
      &timer, "stripes");
  if (!v.ok()) timer.Cancel();
  return v;
}

}  // namespace

absl::StatusOr<SparseIndexView> BuildAnchorIndex(const BuildScope& scope, const AttentionProblem& p,
                                                 const MethodConfig& config,
                                                 const std::vector<int>& heads, int block_m) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  return BuildAnchor(scope, p, *scope.params, config.anchor, heads);
}

}  // namespace cuda
}  // namespace spattn
