#include "kernels/cuda/builders/assembled_builders.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/stage_timer.h"
#include "kernels/dtype.h"
#include "kernels/status_macros.h"

namespace spattn {

CudaLayerAssets::CudaLayerAssets(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
CudaLayerAssets::~CudaLayerAssets() = default;
int CudaLayerAssets::device() const { return rep_->device; }
int CudaLayerAssets::head_dim() const { return rep_->head_dim; }
int CudaLayerAssets::num_centroids() const { return rep_->num_centroids; }
const CudaLayerAssets::Rep& CudaLayerAssets::rep() const { return *rep_; }
int64_t CudaLayerAssets::bytes() const {
  return rep_->buffer == nullptr ? 0 : rep_->buffer->bytes();
}

namespace cuda {
namespace {

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int FloorDiv(int64_t a, int64_t b) {
  return static_cast<int>(a >= 0 ? a / b : -((-a + b - 1) / b));
}

template <typename T>
absl::StatusOr<T*> Alloc(const BuilderEnv& env, int64_t count, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(
      void* p, env.alloc(std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T)), what));
  return static_cast<T*>(p);
}

// Copies `v` into the workspace (pageable source: staged before the call returns).
template <typename T>
absl::StatusOr<T*> Upload(const BuilderEnv& env, const std::vector<T>& v, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(T * d, Alloc<T>(env, static_cast<int64_t>(v.size()), what));
  if (!v.empty()) {
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, env.stream),
        what);
  }
  return d;
}

// What the kernels need beyond AttentionProblem::Validate(): device Q/K in bf16/fp16, head_dim
// 64 or 128, 16-byte aligned rows.
absl::Status CheckDeviceInputs(const AttentionProblem& p, Method method) {
  if (p.space != MemorySpace::kCuda) {
    return absl::FailedPreconditionError(absl::StrCat("GPU index builder of ", MethodName(method),
                                                      " reads Q/K from device memory: "
                                                      "problem.space must be kCuda"));
  }
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: the GPU index builders take bf16 or "
                     "fp16, got ",
                     DTypeName(p.dtype)));
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim: the GPU index builders support 64 and 128, got ", p.head_dim));
  }
  struct Named {
    const char* name;
    int64_t v;
  };
  for (const Named& s :
       {Named{"q.token_stride", p.q.token_stride}, Named{"q.head_stride", p.q.head_stride},
        Named{"k.token_stride", p.k.token_stride}, Named{"k.head_stride", p.k.head_stride}}) {
    if (s.v % 8 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.name, " must be a multiple of 8 elements (16-byte rows) for the GPU builders, got ",
          s.v));
    }
  }
  for (const void* ptr : {p.q.data, p.k.data}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return absl::InvalidArgumentError("q/k: pointers must be 16-byte aligned");
    }
  }
  return absl::OkStatus();
}

// Block table and block offsets of an index with blocks of `block_m` rows.
struct Layout {
  SparseIndex host;  // heads and block_offsets only
  std::vector<BlockGeoDev> geo;
};
Layout MakeLayout(const AttentionProblem& p, const std::vector<int>& heads, int block_m) {
  Layout l;
  InitSparseIndex(p, heads, block_m, &l.host);
  l.geo.resize(l.host.num_blocks());
  for (int b = 0; b < l.host.num_blocks(); ++b) {
    const BlockGeometry g = GetBlockGeometry(p, l.host, b);
    l.geo[b] = BlockGeoDev{g.seq, g.q_begin, g.q_end, g.first_pos, g.last_pos, g.key_end};
  }
  return l;
}

// Count pass, scan, the entry totals (the build's one host round trip), fill pass.
absl::StatusOr<SparseIndexView> Assemble(
    const BuilderEnv& env, const Layout& l,
    const std::function<cudaError_t(const AsmOut&, bool)>& launch, StageTimer* timer,
    const char* select_stage) {
  const int num_slots = l.host.num_heads(), num_blocks = l.host.num_blocks();
  const int64_t rows = static_cast<int64_t>(num_slots) * num_blocks;
  SparseIndexView v;
  v.block_m = l.host.block_m;
  v.num_heads = num_slots;
  v.num_blocks = num_blocks;
  SPATTN_ASSIGN_OR_RETURN(v.heads, Upload(env, l.host.heads, "index.heads"));
  SPATTN_ASSIGN_OR_RETURN(v.block_offsets,
                          Upload(env, l.host.block_offsets, "index.block_offsets"));
  AsmOut out;
  out.num_blocks = num_blocks;
  SPATTN_ASSIGN_OR_RETURN(out.count_ranges, Alloc<int64_t>(env, rows + 1, "range counts"));
  SPATTN_ASSIGN_OR_RETURN(out.count_cols, Alloc<int64_t>(env, rows + 1, "column counts"));
  timer->Mark(select_stage);
  SPATTN_CUDA_RETURN_IF_ERROR(launch(out, false), "index assembly (count)");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchExclusiveScan64(out.count_ranges, rows, env.stream),
                              "range offsets");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchExclusiveScan64(out.count_cols, rows, env.stream),
                              "column offsets");
  int64_t totals[2] = {0, 0};
  timer->Mark("count");
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[0], out.count_ranges + rows, 8, cudaMemcpyDeviceToHost, env.stream),
      "index totals");
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[1], out.count_cols + rows, 8, cudaMemcpyDeviceToHost, env.stream),
      "index totals");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "index count pass");
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (totals[0] > kMax || totals[1] > kMax) {
    return absl::ResourceExhaustedError(
        absl::StrCat("index has ", totals[0], " ranges and ", totals[1],
                     " columns: more than the int32 offsets of SparseIndex hold"));
  }
  int32_t *range_indptr, *col_indptr, *range_start, *range_len, *col_idx;
  SPATTN_ASSIGN_OR_RETURN(range_indptr, Alloc<int32_t>(env, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(col_indptr, Alloc<int32_t>(env, rows + 1, "col_indptr"));
  SPATTN_ASSIGN_OR_RETURN(range_start, Alloc<int32_t>(env, totals[0], "range_start"));
  SPATTN_ASSIGN_OR_RETURN(range_len, Alloc<int32_t>(env, totals[0], "range_len"));
  SPATTN_ASSIGN_OR_RETURN(col_idx, Alloc<int32_t>(env, totals[1], "col_idx"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchNarrow64(out.count_ranges, rows + 1, range_indptr, env.stream),
                              "range_indptr");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchNarrow64(out.count_cols, rows + 1, col_indptr, env.stream),
                              "col_indptr");
  out.off_ranges = out.count_ranges;
  out.off_cols = out.count_cols;
  out.count_ranges = nullptr;
  out.count_cols = nullptr;
  out.range_start = range_start;
  out.range_len = range_len;
  out.col_idx = col_idx;
  timer->Mark("sync+alloc");
  SPATTN_CUDA_RETURN_IF_ERROR(launch(out, true), "index assembly (fill)");
  timer->Mark("fill");
  v.range_indptr = range_indptr;
  v.range_start = range_start;
  v.range_len = range_len;
  v.col_indptr = col_indptr;
  v.col_idx = col_idx;
  return v;
}

// ---- SampleAttention ---------------------------------------------------------------------------

absl::StatusOr<SparseIndexView> BuildSampleAttention(const BuilderEnv& env,
                                                     const AttentionProblem& p, const AttnParams& a,
                                                     const SampleAttentionParams& params,
                                                     const std::vector<int>& heads) {
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
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  SPATTN_ASSIGN_OR_RETURN(sa.heads, Upload(env, heads32, "sample_attention heads"));
  SPATTN_ASSIGN_OR_RETURN(sa.units, Upload(env, units, "sample_attention units"));
  SPATTN_ASSIGN_OR_RETURN(sa.items, Upload(env, items, "sample_attention spans"));
  sa.num_units = static_cast<int>(units.size());
  sa.num_items = static_cast<int>(items.size());
  sa.block_size = blk;
  SPATTN_ASSIGN_OR_RETURN(sa.partial, Alloc<float2>(env, static_cast<int64_t>(items.size()) * 128,
                                                    "sample_attention row partials"));
  SPATTN_ASSIGN_OR_RETURN(sa.lse2, Alloc<float>(env, static_cast<int64_t>(units.size()) * 128,
                                                "sample_attention row lse"));
  SPATTN_ASSIGN_OR_RETURN(sa.item_scores,
                          Alloc<float>(env, static_cast<int64_t>(items.size()) * 2 * kSaItemScores,
                                       "sample_attention span scores"));
  SPATTN_ASSIGN_OR_RETURN(sa.scores, Alloc<float>(env, score_total, "sample_attention scores"));
  SPATTN_ASSIGN_OR_RETURN(sa.selected,
                          Alloc<int32_t>(env, score_total, "sample_attention selection"));
  SPATTN_ASSIGN_OR_RETURN(sa.selected_n, Alloc<int32_t>(env, 2 * static_cast<int64_t>(units.size()),
                                                        "sample_attention selection counts"));
  sa.alpha_c = params.alpha_c;
  sa.alpha_s = params.alpha_s;
  if (score_total > 0) {
    // Units without keys get no span: their scores stay 0.
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(sa.scores, 0, score_total * sizeof(float), env.stream),
        "sample_attention scores");
  }
  StageTimer timer(env.stream, "sample_attention");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSampleAttentionSelect(sa, env.stream),
                              "sample_attention selection");

  SaAsmArgs asm_args;
  SPATTN_ASSIGN_OR_RETURN(asm_args.geo, Upload(env, l.geo, "block geometry"));
  asm_args.num_blocks = l.host.num_blocks();
  asm_args.num_slots = nslots;
  asm_args.batch = nb;
  asm_args.units = sa.units;
  SPATTN_ASSIGN_OR_RETURN(asm_args.unit_first, Upload(env, unit_first, "sample_attention units"));
  asm_args.selected = sa.selected;
  asm_args.selected_n = sa.selected_n;
  asm_args.block_size = blk;
  asm_args.local_tokens = params.local_tokens;
  auto v = Assemble(
      env, l,
      [&](const AsmOut& out, bool fill) {
        return LaunchSampleAttentionAssemble(asm_args, out, fill, env.stream);
      },
      &timer, "select");
  if (!v.ok()) timer.Cancel();
  return v;
}

// ---- AnchorAttention ---------------------------------------------------------------------------

constexpr int kAnSpan = 2048;  // keys per stripe-scan CTA

absl::StatusOr<SparseIndexView> BuildAnchor(const BuilderEnv& env, const AttentionProblem& p,
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
  std::vector<int32_t> heads32(heads.begin(), heads.end());
  SPATTN_ASSIGN_OR_RETURN(an.heads, Upload(env, heads32, "anchor heads"));
  SPATTN_ASSIGN_OR_RETURN(an.geo, Upload(env, l.geo, "block geometry"));
  an.num_blocks = num_blocks;
  an.num_slots = nslots;
  SPATTN_ASSIGN_OR_RETURN(an.groups, Upload(env, groups, "anchor groups"));
  SPATTN_ASSIGN_OR_RETURN(an.group_of_block, Upload(env, group_of_block, "anchor groups"));
  an.groups_per_slot = groups_per_slot;
  an.softmax_scale = p.softmax_scale;
  const int64_t slot_blocks = static_cast<int64_t>(nslots) * num_blocks;
  SPATTN_ASSIGN_OR_RETURN(an.xa, Alloc<float>(env, slot_blocks, "anchor pooled anchors"));
  SPATTN_ASSIGN_OR_RETURN(an.qbar,
                          Alloc<float>(env, slot_blocks * p.head_dim, "anchor pooled queries"));
  SPATTN_ASSIGN_OR_RETURN(an.tiles, Upload(env, tiles, "anchor stripe tiles"));
  SPATTN_ASSIGN_OR_RETURN(an.items, Upload(env, items, "anchor stripe spans"));
  an.num_items = static_cast<int>(items.size());
  SPATTN_ASSIGN_OR_RETURN(an.bitmaps, Alloc<uint32_t>(env, words, "anchor kept-key bitmaps"));
  if (words > 0) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(an.bitmaps, 0, words * 4, env.stream),
                                "anchor bitmaps");
  }
  an.theta = params.theta;
  StageTimer timer(env.stream, "anchor");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchAnchorSelect(an, env.stream), "anchor selection");

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
      &timer, "anchor+stripes");
  if (!v.ok()) timer.Cancel();
  return v;
}

// ---- Saap --------------------------------------------------------------------------------------

// CheckSaapAssets' rules against the uploaded assets.
absl::Status CheckSaapRequest(const AttentionProblem& p, const SaapParams& params,
                              const std::vector<int>& heads, const CudaLayerAssets* assets,
                              int device) {
  if (assets == nullptr) {
    return absl::FailedPreconditionError(
        "saap: no layer assets (k-means centroids and query classifiers) for this layer");
  }
  if (params.top_l > params.num_centroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saap.top_l (", params.top_l, ") exceeds saap.num_centroids (", params.num_centroids, ")"));
  }
  const CudaLayerAssets::Rep& r = assets->rep();
  if (r.num_centroids != params.num_centroids) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap.num_centroids (", params.num_centroids,
                     ") does not match the layer assets' num_centroids (", r.num_centroids, ")"));
  }
  if (r.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap: layer assets live on device ", r.device, ", the engine on ", device));
  }
  if (heads.empty()) return absl::OkStatus();
  if (r.head_dim != p.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("saap: layer assets were uploaded for head_dim ",
                                                   r.head_dim, ", problem has ", p.head_dim));
  }
  if (params.top_l > 1024) {
    return absl::UnimplementedError(absl::StrCat(
        "saap.top_l: the GPU builder visits at most 1024 buckets, got ", params.top_l));
  }
  for (int h : heads) {
    const int kvh = p.kv_head_of(h);
    if (kvh >= static_cast<int>(r.has_centroids.size()) || !r.has_centroids[kvh]) {
      return absl::FailedPreconditionError(
          absl::StrCat("saap: layer assets have no centroids for kv head ", kvh));
    }
    if (h >= static_cast<int>(r.has_classifier.size()) || !r.has_classifier[h]) {
      return absl::FailedPreconditionError(
          absl::StrCat("saap: layer assets have no query classifier for q head ", h));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseIndexView> BuildSaap(const BuilderEnv& env, const AttentionProblem& p,
                                          const AttnParams& a, const SaapParams& params,
                                          const std::vector<int>& heads, int block_m,
                                          const CudaLayerAssets* assets) {
  if (block_m <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_m must be > 0, got ", block_m));
  }
  SPATTN_RETURN_IF_ERROR(CheckSaapRequest(p, params, heads, assets, env.device));
  const Layout l = MakeLayout(p, heads, block_m);
  const int nslots = l.host.num_heads(), nb = p.batch(), num_blocks = l.host.num_blocks();
  if (nslots == 0) {
    StageTimer timer(env.stream, "saap");
    return Assemble(
        env, l, [](const AsmOut&, bool) { return cudaSuccess; }, &timer, "select");
  }
  const SaapAssetsDev& dev = assets->rep().dev;
  const int C = dev.num_centroids;
  // Used kv heads (ascending), their requested unique q heads and head slots.
  std::vector<std::vector<int>> gh(p.num_kv_heads), gs(p.num_kv_heads);
  for (int s = 0; s < nslots; ++s) {
    const int h = heads[s], kvh = p.kv_head_of(h);
    gs[kvh].push_back(s);
    if (std::find(gh[kvh].begin(), gh[kvh].end(), h) == gh[kvh].end()) gh[kvh].push_back(h);
  }
  std::vector<int32_t> kv_used, head_off{0}, head_list, slot_off{0}, slot_list;
  for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
    if (gs[kvh].empty()) continue;
    if (gs[kvh].size() > static_cast<size_t>(kSaapMaxGroupSlots)) {
      return absl::UnimplementedError(
          absl::StrCat("saap: the GPU builder shares a row between at most ", kSaapMaxGroupSlots,
                       " head slots of one kv head, kv head ", kvh, " has ", gs[kvh].size()));
    }
    kv_used.push_back(kvh);
    head_list.insert(head_list.end(), gh[kvh].begin(), gh[kvh].end());
    head_off.push_back(static_cast<int32_t>(head_list.size()));
    slot_list.insert(slot_list.end(), gs[kvh].begin(), gs[kvh].end());
    slot_off.push_back(static_cast<int32_t>(slot_list.size()));
  }
  const int num_kv = static_cast<int>(kv_used.size());
  std::vector<SaapKeyTile> key_tiles;
  std::vector<int64_t> unit_key_off{0};
  for (int ki = 0; ki < num_kv; ++ki) {
    for (int b = 0; b < nb; ++b) {
      for (int j0 = 0; j0 < p.k_len(b); j0 += 64) key_tiles.push_back(SaapKeyTile{ki, b, j0});
      unit_key_off.push_back(unit_key_off.back() + p.k_len(b));
    }
  }
  const int64_t total_keys = unit_key_off.back();
  const int64_t buckets = static_cast<int64_t>(num_kv) * nb * C;

  SaapArgs sp;
  sp.p = a;
  sp.assets = dev;
  SPATTN_ASSIGN_OR_RETURN(sp.kv_heads, Upload(env, kv_used, "saap kv heads"));
  sp.num_kv = num_kv;
  SPATTN_ASSIGN_OR_RETURN(sp.key_tiles, Upload(env, key_tiles, "saap key tiles"));
  sp.num_key_tiles = static_cast<int>(key_tiles.size());
  SPATTN_ASSIGN_OR_RETURN(sp.unit_key_off, Upload(env, unit_key_off, "saap key offsets"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_of, Alloc<int32_t>(env, total_keys, "saap key buckets"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_off, Alloc<int32_t>(env, buckets + 1, "saap bucket offsets"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_cursor, Alloc<int32_t>(env, buckets, "saap bucket cursors"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_idx, Alloc<int32_t>(env, total_keys, "saap bucket lists"));
  SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sp.bucket_off, 0, (buckets + 1) * 4, env.stream),
                              "saap bucket offsets");
  SPATTN_ASSIGN_OR_RETURN(sp.geo, Upload(env, l.geo, "block geometry"));
  sp.num_blocks = num_blocks;
  sp.block_m = block_m;
  SPATTN_ASSIGN_OR_RETURN(sp.group_head_off, Upload(env, head_off, "saap group heads"));
  SPATTN_ASSIGN_OR_RETURN(sp.group_heads, Upload(env, head_list, "saap group heads"));
  int sms = 0;
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, env.device),
      "multiprocessor count");
  const int64_t cls_items = static_cast<int64_t>(num_kv) * num_blocks;
  sp.classify_grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cls_items, sms)));
  SPATTN_ASSIGN_OR_RETURN(sp.logits_scratch,
                          Alloc<float>(env, static_cast<int64_t>(sp.classify_grid) * 64 * dev.c_pad,
                                       "saap logits scratch"));
  sp.top_l = params.top_l;
  SPATTN_ASSIGN_OR_RETURN(sp.selected,
                          Alloc<int32_t>(env, cls_items * params.top_l, "saap visited buckets"));
  StageTimer timer(env.stream, "saap");
  sp.keys_done = timer.Event("keys");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSaapSelect(sp, env.stream), "saap selection");

  SaapAsmArgs asm_args;
  asm_args.geo = sp.geo;
  asm_args.num_blocks = num_blocks;
  asm_args.num_kv = num_kv;
  asm_args.batch = nb;
  asm_args.num_centroids = C;
  asm_args.top_l = params.top_l;
  asm_args.selected = sp.selected;
  asm_args.bucket_off = sp.bucket_off;
  asm_args.bucket_idx = sp.bucket_idx;
  SPATTN_ASSIGN_OR_RETURN(asm_args.group_slot_off, Upload(env, slot_off, "saap group slots"));
  SPATTN_ASSIGN_OR_RETURN(asm_args.group_slots, Upload(env, slot_list, "saap group slots"));
  asm_args.sink_tokens = params.sink_tokens;
  asm_args.local_tokens = params.local_tokens;
  auto v = Assemble(
      env, l,
      [&](const AsmOut& out, bool fill) {
        return LaunchSaapAssemble(asm_args, out, fill, env.stream);
      },
      &timer, "classify");
  if (!v.ok()) timer.Cancel();
  return v;
}

}  // namespace

bool IsAssembledBuilderMethod(Method method) {
  return method == Method::kSampleAttention || method == Method::kAnchor || method == Method::kSaap;
}

absl::StatusOr<SparseIndexView> BuildAssembledIndex(const BuilderEnv& env,
                                                    const AttentionProblem& p, const AttnParams& a,
                                                    const MethodConfig& config,
                                                    const std::vector<int>& heads, int block_m,
                                                    const CudaLayerAssets* maybe_assets) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  switch (config.method) {
    case Method::kSampleAttention:
      return BuildSampleAttention(env, p, a, config.sample_attention, heads);
    case Method::kAnchor:
      return BuildAnchor(env, p, a, config.anchor, heads);
    case Method::kSaap:
      return BuildSaap(env, p, a, config.saap, heads, block_m, maybe_assets);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("method ", MethodName(config.method), " is not a builder of this file"));
}

absl::StatusOr<std::unique_ptr<CudaLayerAssets::Rep>> UploadSaapAssets(const LayerAssets& assets,
                                                                       int head_dim, int device) {
  if (head_dim != 64 && head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim: the GPU index builders support 64 and 128, got ", head_dim));
  }
  SPATTN_ASSIGN_OR_RETURN(const std::vector<double> freq, RopeInvFreq(assets, head_dim));
  const int d = head_dim, half = d / 2, C = assets.num_centroids;
  if (C <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap: layer assets num_centroids must be > 0, got ", C));
  }
  if (C > kSaapMaxCentroids) {
    return absl::UnimplementedError(absl::StrCat("saap: the GPU builder takes at most ",
                                                 kSaapMaxCentroids, " centroids, got ", C));
  }
  const int c_pad = static_cast<int>(RoundUp(C, 256));
  // Classifier shape, the same for every head that has one.
  int layers = 0, hidden = 0;
  bool relu0 = false, relu1 = false;
  const int nq = static_cast<int>(assets.classifiers.size());
  for (int h = 0; h < nq; ++h) {
    const auto& c = assets.classifiers[h];
    if (c.empty()) continue;
    SPATTN_RETURN_IF_ERROR(CheckClassifier(c, d, C, h));
    const int lh = static_cast<int>(c.size());
    const int hh = lh == 2 ? c[0].out : 0;
    const bool r0 = c[0].relu, r1 = c.back().relu;
    if (lh > 2) {
      return absl::UnimplementedError(
          absl::StrCat("saap: the GPU builder runs classifiers of 1 or 2 dense layers; q head ", h,
                       " has ", lh));
    }
    if (layers == 0) {
      layers = lh;
      hidden = hh;
      relu0 = r0;
      relu1 = r1;
    } else if (lh != layers || hh != hidden || r0 != relu0 || r1 != relu1) {
      return absl::UnimplementedError(
          absl::StrCat("saap: the GPU builder needs one classifier shape for every q head; q head ",
                       h, " differs from the first"));
    }
  }
  if (hidden > kSaapMaxHidden) {
    return absl::UnimplementedError(
        absl::StrCat("saap: the GPU builder takes classifier hidden "
                     "widths up to ",
                     kSaapMaxHidden, ", got ", hidden));
  }
  const int hidden_pad = layers == 2 ? static_cast<int>(RoundUp(hidden, 256)) : 0;
  if (layers == 1) relu1 = relu0;
  int smem_max = 0;
  SPATTN_RETURN_IF_ERROR(
      CudaStatus(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
           "shared memory limit"));
  const int smem = SaapClassifySmemBytes(d, std::max(layers, 1), hidden_pad, c_pad);
  if (smem > smem_max) {
    return absl::UnimplementedError(
        absl::StrCat("saap: the classifier (hidden ", hidden, ", ", C, " centroids) needs ", smem,
                     " bytes of shared memory, the device has ", smem_max));
  }
  const int nkv = static_cast<int>(assets.centroids.size());
  for (int k = 0; k < nkv; ++k) {
    const auto& c = assets.centroids[k];
    if (!c.empty() && c.size() != static_cast<size_t>(C) * d) {
      return absl::InvalidArgumentError(
          absl::StrCat("saap: centroids of kv head ", k, " have ", c.size(),
                       " floats, expected num_centroids * head_dim = ", C, " * ", d));
    }
  }

  // Layout of the one buffer: 256-byte aligned arrays.
  int64_t size = 0;
  auto place = [&](int64_t bytes) {
    const int64_t at = size;
    size = RoundUp(size + std::max<int64_t>(bytes, 1), 256);
    return at;
  };
  const int64_t at_freq = place(half * 8);
  const int64_t at_step = place(int64_t{64} * half * 2 * 8);
  const int64_t at_cptr = place(int64_t{nkv} * 2 * 8);
  const int64_t at_wptr = place(int64_t{nq} * 4 * 8);
  std::vector<int64_t> at_chi(nkv, -1), at_clo(nkv, -1);
  for (int k = 0; k < nkv; ++k) {
    if (assets.centroids[k].empty()) continue;
    at_chi[k] = place(int64_t{c_pad} * d * 2);
    at_clo[k] = place(int64_t{c_pad} * d * 2);
  }
  const int k_last = layers == 2 ? hidden_pad : d;
  std::vector<int64_t> at_w0(nq, -1), at_b0(nq, -1), at_w1(nq, -1), at_b1(nq, -1);
  for (int h = 0; h < nq; ++h) {
    if (assets.classifiers[h].empty()) continue;
    if (layers == 2) {
      at_w0[h] = place(int64_t{hidden_pad} * d * 2);
      at_b0[h] = place(int64_t{hidden_pad} * 4);
    }
    at_w1[h] = place(int64_t{c_pad} * k_last * 2);
    at_b1[h] = place(int64_t{c_pad} * 4);
  }
  auto rep = std::make_unique<CudaLayerAssets::Rep>();
  rep->device = device;
  rep->head_dim = d;
  rep->num_centroids = C;
  SPATTN_ASSIGN_OR_RETURN(rep->buffer, CudaDeviceBuffer::Allocate(device, size));
  char* base = static_cast<char*>(rep->buffer->data());
  std::vector<uint8_t> host(size, 0);
  auto put = [&](int64_t at, const void* src, int64_t bytes) {
    std::memcpy(host.data() + at, src, bytes);
  };
  put(at_freq, freq.data(), half * 8);
  {
    std::vector<double> step(static_cast<size_t>(64) * half * 2);
    for (int k = 0; k < 64; ++k) {
      for (int i = 0; i < half; ++i) {
        const double ang = k * freq[i];
        step[(static_cast<size_t>(k) * half + i) * 2] = std::cos(ang);
        step[(static_cast<size_t>(k) * half + i) * 2 + 1] = std::sin(ang);
      }
    }
    put(at_step, step.data(), static_cast<int64_t>(step.size()) * 8);
  }
  auto dev_ptr = [&](int64_t at) -> const void* { return at < 0 ? nullptr : base + at; };
  rep->has_centroids.assign(nkv, false);
  {
    std::vector<const void*> ptrs(static_cast<size_t>(nkv) * 2, nullptr);
    for (int k = 0; k < nkv; ++k) {
      if (at_chi[k] < 0) continue;
      rep->has_centroids[k] = true;
      std::vector<uint16_t> hi(static_cast<size_t>(c_pad) * d, 0), lo(hi.size(), 0);
      for (int64_t i = 0; i < static_cast<int64_t>(C) * d; ++i) {
        const float x = assets.centroids[k][i];
        hi[i] = FloatToBf16(x);
        lo[i] = FloatToBf16(x - Bf16ToFloat(hi[i]));
      }
      put(at_chi[k], hi.data(), static_cast<int64_t>(hi.size()) * 2);
      put(at_clo[k], lo.data(), static_cast<int64_t>(lo.size()) * 2);
      ptrs[k] = dev_ptr(at_chi[k]);
      ptrs[nkv + k] = dev_ptr(at_clo[k]);
    }
    put(at_cptr, ptrs.data(), static_cast<int64_t>(ptrs.size()) * 8);
  }
  rep->has_classifier.assign(nq, false);
  {
    std::vector<const void*> ptrs(static_cast<size_t>(nq) * 4, nullptr);
    for (int h = 0; h < nq; ++h) {
      const auto& c = assets.classifiers[h];
      if (c.empty()) continue;
      rep->has_classifier[h] = true;
      // Transposed weights [out][in] (bf16), zero-padded rows and columns.
      auto transpose = [&](const DenseLayerWeights& w, int out_pad, int in_pad, int64_t at) {
        std::vector<uint16_t> t(static_cast<size_t>(out_pad) * in_pad, 0);
        for (int i = 0; i < w.in; ++i) {
          for (int o = 0; o < w.out; ++o) {
            t[static_cast<size_t>(o) * in_pad + i] =
                FloatToBf16(w.weight[static_cast<size_t>(i) * w.out + o]);
          }
        }
        put(at, t.data(), static_cast<int64_t>(t.size()) * 2);
      };
      auto bias = [&](const DenseLayerWeights& w, int out_pad, int64_t at) {
        std::vector<float> b(out_pad, 0.f);
        std::copy(w.bias.begin(), w.bias.end(), b.begin());
        put(at, b.data(), static_cast<int64_t>(out_pad) * 4);
      };
      if (layers == 2) {
        transpose(c[0], hidden_pad, d, at_w0[h]);
        bias(c[0], hidden_pad, at_b0[h]);
      }
      transpose(c.back(), c_pad, k_last, at_w1[h]);
      bias(c.back(), c_pad, at_b1[h]);
      ptrs[h] = dev_ptr(at_w0[h]);
      ptrs[nq + h] = dev_ptr(at_b0[h]);
      ptrs[2 * nq + h] = dev_ptr(at_w1[h]);
      ptrs[3 * nq + h] = dev_ptr(at_b1[h]);
    }
    put(at_wptr, ptrs.data(), static_cast<int64_t>(ptrs.size()) * 8);
  }
  SPATTN_RETURN_IF_ERROR(rep->buffer->CopyFromHost(host.data(), size));
  SaapAssetsDev& dv = rep->dev;
  dv.head_dim = d;
  dv.num_centroids = C;
  dv.c_pad = c_pad;
  dv.hidden_pad = hidden_pad;
  dv.num_layers = std::max(layers, 1);
  dv.relu0 = relu0;
  dv.relu1 = relu1;
  dv.interleaved = assets.rope_interleaved;
  dv.inv_freq = reinterpret_cast<const double*>(base + at_freq);
  dv.step_cs = reinterpret_cast<const double*>(base + at_step);
  auto ptr_array = [&](int64_t at, int64_t index) {
    return reinterpret_cast<const void* const*>(base + at) + index;
  };
  dv.centroid_hi = ptr_array(at_cptr, 0);
  dv.centroid_lo = ptr_array(at_cptr, nkv);
  dv.w0t = ptr_array(at_wptr, 0);
  dv.b0 = reinterpret_cast<const float* const*>(ptr_array(at_wptr, nq));
  dv.w1t = ptr_array(at_wptr, 2 * nq);
  dv.b1 = reinterpret_cast<const float* const*>(ptr_array(at_wptr, 3 * nq));
  return rep;
}

}  // namespace cuda
}  // namespace spattn
