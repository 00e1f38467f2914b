// Host side of the GPU Saap index builder (kernels: saap.cu; CPU twin:
// kernels/builders/saap.cc): host-side tables from the problem's sizes, workspace carving, and
// the count-then-fill row assembly (builder_steps.h: Assemble) with its one host round trip.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/cuda/builders/builder_steps.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/cuda/builders/saap_knobs.h"
#include "kernels/dtype.h"

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
  if (params.classify_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("saap.classify_rows must be > 0, got ", params.classify_rows));
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

absl::StatusOr<SparseIndexView> BuildSaap(const BuildScope& env, const AttentionProblem& p,
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
  // The host arrays in one upload (one pageable copy instead of seven, as anchor's).
  MetaBlob blob;
  const size_t o_kv = blob.Add(kv_used), o_tiles = blob.Add(key_tiles);
  const size_t o_key_off = blob.Add(unit_key_off), o_geo = blob.Add(l.geo);
  const size_t o_head_off = blob.Add(head_off), o_heads = blob.Add(head_list);
  const size_t o_slot_off = blob.Add(slot_off), o_slots = blob.Add(slot_list);
  SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream));
  sp.kv_heads = blob.At<int32_t>(o_kv);
  sp.num_kv = num_kv;
  sp.key_tiles = blob.At<SaapKeyTile>(o_tiles);
  sp.num_key_tiles = static_cast<int>(key_tiles.size());
  sp.unit_key_off = blob.At<int64_t>(o_key_off);
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_of, Carve<int32_t>(env, total_keys, "saap key buckets"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_off, Carve<int32_t>(env, buckets + 1, "saap bucket offsets"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_cursor, Carve<int32_t>(env, buckets, "saap bucket cursors"));
  SPATTN_ASSIGN_OR_RETURN(sp.bucket_idx, Carve<int32_t>(env, total_keys, "saap bucket lists"));
  SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sp.bucket_off, 0, (buckets + 1) * 4, env.stream),
                              "saap bucket offsets");
  sp.geo = blob.At<BlockGeoDev>(o_geo);
  sp.num_blocks = num_blocks;
  sp.block_m = block_m;
  sp.group_head_off = blob.At<int32_t>(o_head_off);
  sp.group_heads = blob.At<int32_t>(o_heads);
  int sms = 0;
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, env.device),
      "multiprocessor count");
  // Classifier items: (kv group, block), or (kv group, 64 / classify_rows blocks) when only
  // classify_rows sampled rows of each block are classified (the CPU's rule: below block_m; one
  // block per item above 64 rows).
  if (params.classify_rows < block_m) {
    sp.rows_per_block = params.classify_rows;
    sp.blocks_per_item = std::max(1, 64 / sp.rows_per_block);
    // SPATTN_SAAP_CTA_TOPL=1: the per-block top-l by the whole CTA, block after block (the
    // session-17 kernel; for comparisons, same selection).
    const char* cta = std::getenv("SPATTN_SAAP_CTA_TOPL");
    sp.warp_top_l = cta == nullptr || std::string(cta) != "1";
  }
  const int64_t cls_items =
      static_cast<int64_t>(num_kv) * ((num_blocks + sp.blocks_per_item - 1) / sp.blocks_per_item);
  sp.classify_grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cls_items, sms)));
  // With the per-item RoPE table (SaapClassifierRopeTable), each CTA's 64 x head_dim / 2
  // (cos, -sin) pairs after all CTAs' logits.
  const int64_t rope_floats = SaapClassifierRopeTable(sp) ? int64_t{64} * sp.p.head_dim : 0;
  SPATTN_ASSIGN_OR_RETURN(
      sp.logits_scratch,
      Carve<float>(env, static_cast<int64_t>(sp.classify_grid) * (64 * dev.c_pad + rope_floats),
                   "saap logits scratch"));
  if (sp.rows_per_block > 0) {
    SPATTN_ASSIGN_OR_RETURN(
        sp.score_scratch,
        Carve<float>(env, static_cast<int64_t>(sp.classify_grid) * sp.blocks_per_item * dev.c_pad,
                     "saap block scores"));
  }
  sp.top_l = params.top_l;
  SPATTN_ASSIGN_OR_RETURN(
      sp.selected, Carve<int32_t>(env, static_cast<int64_t>(num_kv) * num_blocks * params.top_l,
                                  "saap visited buckets"));
  StageTimer timer(env.stream, "saap");
  sp.keys_done = timer.Event("keys");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSaapSelect(sp, env.stream), "saap selection");
  // Tests (SaapKnobs): the visited buckets of this build, downloaded.
  if (std::vector<int32_t>* cap = SaapKnobs().capture_selected; cap != nullptr) {
    const int64_t n = static_cast<int64_t>(num_kv) * num_blocks * params.top_l;
    cap->assign(n, -1);
    if (n > 0) {
      SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(cap->data(), sp.selected, n * sizeof(int32_t),
                                                  cudaMemcpyDeviceToHost, env.stream),
                                  "saap selection capture");
    }
    SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "saap selection capture");
  }
  // Tests: every key's bucket (the keys kernel's argmax), downloaded.
  if (std::vector<int32_t>* cap = SaapKnobs().capture_key_buckets; cap != nullptr) {
    cap->assign(total_keys, -1);
    if (total_keys > 0) {
      SPATTN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(cap->data(), sp.bucket_of, total_keys * sizeof(int32_t),
                          cudaMemcpyDeviceToHost, env.stream),
          "saap key buckets capture");
    }
    SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(env.stream), "saap key buckets capture");
  }

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
  asm_args.group_slot_off = blob.At<int32_t>(o_slot_off);
  asm_args.group_slots = blob.At<int32_t>(o_slots);
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

absl::StatusOr<SparseIndexView> BuildSaapIndex(const BuildScope& scope, const AttentionProblem& p,
                                               const MethodConfig& config,
                                               const std::vector<int>& heads, int block_m,
                                               const CudaLayerAssets* maybe_assets) {
  SPATTN_RETURN_IF_ERROR(CheckDeviceInputs(p, config.method));
  return BuildSaap(scope, p, *scope.params, config.saap, heads, block_m, maybe_assets);
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
  const bool swizzled = SaapClassifierUsesTma(d, std::max(layers, 1), hidden_pad, c_pad);
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
      // Transposed weights [out][in] (bf16), zero-padded rows and columns; with
      // SaapKnobs().cls_packed the same elements slab by slab (saap_knobs.h): (o, i) at
      // ((o / 256 x in_pad / 64 + i / 64) x 256 + o % 256) x 64 + i % 64 (out_pad is a multiple
      // of 256, in_pad of 64); swizzled (SaapClassifierUsesTma), also packed, with i's 16-byte
      // chunk (i % 64) / 8 at chunk ((i % 64) / 8) ^ (o % 8) of its 128-byte row.
      const bool packed = SaapKnobs().cls_packed || swizzled;
      auto transpose = [&](const DenseLayerWeights& w, int out_pad, int in_pad, int64_t at) {
        std::vector<uint16_t> t(static_cast<size_t>(out_pad) * in_pad, 0);
        for (int i = 0; i < w.in; ++i) {
          const int ik = i % 64;
          for (int o = 0; o < w.out; ++o) {
            const int col = swizzled ? (((ik >> 3) ^ (o & 7)) << 3) | (ik & 7) : ik;
            const size_t to =
                packed ? ((static_cast<size_t>(o / 256) * (in_pad / 64) + i / 64) * 256 + o % 256) *
                                 64 +
                             col
                       : static_cast<size_t>(o) * in_pad + i;
            t[to] = FloatToBf16(w.weight[static_cast<size_t>(i) * w.out + o]);
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
  // CopyFromHost waits for its DMA: without that wait the first build after an upload could read
  // the assets' pointer tables before they arrived (session 36: the keys kernel's illegal address
  // after an upload, the fault session 35 blamed on the RoPE table).
  SaapAssetsDev& dv = rep->dev;
  dv.head_dim = d;
  dv.num_centroids = C;
  dv.c_pad = c_pad;
  dv.hidden_pad = hidden_pad;
  dv.num_layers = std::max(layers, 1);
  dv.relu0 = relu0;
  dv.relu1 = relu1;
  dv.interleaved = assets.rope_interleaved;
  dv.w_swizzled = swizzled;
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
