// Host side of the GPU AnchorAttention index builder (kernels: anchor.cu; CPU twin:
// kernels/builders/anchor.cc): host-side tables from the problem's sizes, workspace carving, and
// the count-then-fill row assembly (builder_steps.h: Assemble) with its one host round trip.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/anchor_knobs.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"

namespace spattn {

namespace cuda {
namespace {

constexpr int kAnSpan = 2048;  // keys per stripe-scan CTA

absl::StatusOr<SparseIndexView> BuildAnchor(const BuildScope& env, const AttentionProblem& p,
                                            const AttnParams& a, const AnchorParams& params,
                                            const std::vector<int>& heads) {
  const int bm = params.block_size, step = params.step;
  const Layout l = MakeLayout(p, heads, bm);
  const int nslots = l.host.num_heads(), nb = p.batch(), num_blocks = l.host.num_blocks();
  // Groups of one slot (the same for every slot), then replicated per slot.
  std::vector<AnGroup> slot_groups;
  std::vector<int32_t> group_of_block(num_blocks, 0);
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
  std::vector<AnGroup> groups;
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
  // that one CTA's tiles share the keys; items of up to 8 tiles per key span.
  std::vector<AnTile> tiles;
  std::vector<AnItem> items;
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

  AnArgs an;
  an.p = a;
  // The host arrays in one upload (one pageable copy instead of six; the build's wall time did
  // not move beyond its run-to-run spread, kernels/cuda/NOTES.md Session 22 — s22-build).
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  MetaBlob blob;
  const size_t o_heads = blob.Add(heads32), o_geo = blob.Add(l.geo), o_groups = blob.Add(groups);
  const size_t o_gob = blob.Add(group_of_block), o_tiles = blob.Add(tiles);
  const size_t o_items = blob.Add(items);
  SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream));
  an.heads = blob.At<int32_t>(o_heads);
  an.geo = blob.At<BlockGeoDev>(o_geo);
  an.groups = blob.At<AnGroup>(o_groups);
  an.group_of_block = blob.At<int32_t>(o_gob);
  an.tiles = blob.At<AnTile>(o_tiles);
  an.items = blob.At<AnItem>(o_items);
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
  if (words > 0) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(an.bitmaps, 0, words * 4, env.stream),
                                "anchor bitmaps");
  }
  an.theta = params.theta;
  StageTimer timer(env.stream, "anchor");
  an.anchor_done = timer.Event("anchor");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorSelect(an, env.stream), "anchor selection");
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
