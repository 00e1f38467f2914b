// Dispatch of the attention launchers and the sparse kernel's work schedule (a counting sort of
// rows by cost on the device).
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/hopper/hopper_launch.h"
#include "kernels/cuda/common/scan.h"

namespace spattn {
namespace cuda {
namespace detail {

cudaError_t DenseBf16(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream);
cudaError_t SparseBf16(const AttnParams& p, const SparseIndexView& idx, const SparseSchedule& sched,
                       KernelVariant v, cudaStream_t stream);
cudaError_t DenseFp16(const AttnParams& p, int max_q_len, KernelVariant v, cudaStream_t stream);
cudaError_t SparseFp16(const AttnParams& p, const SparseIndexView& idx, const SparseSchedule& sched,
                       KernelVariant v, cudaStream_t stream);

namespace {

// Rows of equal cost above this many tiles share the last bucket.
constexpr int kCostBuckets = 4096;
// L2 sections of the schedule (below): at most this many.
constexpr int kMaxSections = 16;

__device__ __forceinline__ int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// Bucket of a row: its section (rows of section 0 first) and within it its cost (costliest
// first; the scan below sums from the top bucket down). A section is `kv_per_section`
// consecutive kv heads (q head / group).
// pack_tails (2 always, the default; 1 per row where it saves tiles; 0 off): the Hopper kernel's
// tiling with range tails packed among the columns (kFlagPackTails of persistent_fa3.cuh): whole
// range tiles, then (columns + tails) / tile_n.
// `stats` (SparseSchedule::stats, zeroed before): the sum of the costs and the rows with keys,
// one atomic pair per warp.
__global__ void CostKernel(SparseIndexView idx, int tile_n, int group, int kv_per_section,
                           int num_sections, int pack_tails, int32_t* hist, int32_t* bucket_of,
                           unsigned long long* stats) {
  const int64_t rows = static_cast<int64_t>(idx.num_heads) * idx.num_blocks;
  unsigned long long cost_sum = 0, with_keys = 0;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int cols = idx.col_indptr[r + 1] - idx.col_indptr[r];
    int whole = 0, tails = 0, partial = 0;
    for (int e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
      whole += idx.range_len[e] / tile_n;
      tails += idx.range_len[e] % tile_n;
      partial += idx.range_len[e] % tile_n != 0 ? 1 : 0;
    }
    const int unpacked = partial + CeilDiv(cols, tile_n);
    const int packed = CeilDiv(cols + tails, tile_n);
    const int cost = whole + (pack_tails == 0   ? unpacked
                              : pack_tails == 2 ? packed
                                                : min(packed, unpacked));
    const int slot = static_cast<int>(r / idx.num_blocks);
    const int section = min(idx.heads[slot] / group / max(kv_per_section, 1), num_sections - 1);
    const int b = (num_sections - 1 - section) * kCostBuckets + min(cost, kCostBuckets - 1);
    bucket_of[r] = b;
    atomicAdd(hist + b, 1);
    cost_sum += cost;
    with_keys += cost > 0 ? 1 : 0;
  }
  // (Every thread of the warp reaches here: the loop above has no early exit.)
  for (int o = 16; o > 0; o /= 2) {
    cost_sum += __shfl_xor_sync(0xffffffffu, cost_sum, o);
    with_keys += __shfl_xor_sync(0xffffffffu, with_keys, o);
  }
  if ((threadIdx.x & 31) == 0 && with_keys > 0) {
    atomicAdd(stats, cost_sum);
    atomicAdd(stats + 1, with_keys);
  }
}

// Order within a bucket (SPATTN_HOPPER_ORDER): 0 (default) whatever order the atomics take (rows
// of one head slot tend to come out together, r = slot * num_blocks + block); 1 block-major:
// thread i places row (slot i % num_heads, block i / num_heads), and the lanes of a warp that
// share a bucket take consecutive places in lane order (one atomic per bucket and warp), so rows
// of the same query block -- the q heads of one kv head among them, which read the same K/V
// tiles where their keys agree -- sit next to each other in the list and run at the same time.
// (Warps still take their places in whatever order they run.) Session 19, run 1 (H100): 1 is
// no faster (0.99x of 0 on average over 28 cells, 0.91-1.06x; block_m 64 1.00x), so the L2 bound
// of block_m 64 is not which CTAs share K/V in time; a variant with costs in 1/8 bands (more
// ties) lost 3% on average (up to 15%) and was dropped.
// Row r's record at list position pos (SparseSchedule::items); `bucket`: its cost bucket
// (cost 0: no keys).
__device__ __forceinline__ void WriteItem(const SparseIndexView& idx, int64_t r, int pos,
                                          int bucket, int32_t* items) {
  if (items == nullptr) return;
  const int r0 = idx.range_indptr[r], c0 = idx.col_indptr[r];
  const int slot = static_cast<int>(r / idx.num_blocks);
  int4* rec = reinterpret_cast<int4*>(items) + 2 * static_cast<int64_t>(pos);
  rec[0] = make_int4(static_cast<int>(r), r0, idx.range_indptr[r + 1] - r0, c0);
  rec[1] = make_int4(idx.col_indptr[r + 1] - c0, idx.heads[slot],
                     static_cast<int>(r - static_cast<int64_t>(slot) * idx.num_blocks),
                     bucket % kCostBuckets != 0 ? 1 : 0);
}

__global__ void ScatterKernel(int64_t rows, int num_heads, int num_blocks, int mode,
                              const int32_t* bucket_of, int32_t* offsets, int32_t* order,
                              SparseIndexView idx, int32_t* items) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (mode == 0) {
    for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
         r += stride) {
      const int b = bucket_of[r];
      const int pos = atomicAdd(offsets + b, 1);
      order[pos] = static_cast<int32_t>(r);
      WriteItem(idx, r, pos, b, items);
    }
    return;
  }
  const int lane = threadIdx.x & 31;
  // The loop bound is the warp's first index: the whole warp runs every trip (blockDim is a
  // multiple of 32).
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + (threadIdx.x & ~31); w < rows;
       w += stride) {
    const int64_t i = w + lane;
    const bool valid = i < rows;
    const unsigned active = __ballot_sync(0xffffffffu, valid);
    if (!valid) continue;
    const int64_t r = (i % num_heads) * static_cast<int64_t>(num_blocks) + i / num_heads;
    const int b = bucket_of[r];
    const unsigned peers = __match_any_sync(active, b);
    const int leader = __ffs(peers) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(offsets + b, __popc(peers));
    base = __shfl_sync(peers, base, leader);
    const int pos = base + __popc(peers & ((1u << lane) - 1));
    order[pos] = static_cast<int32_t>(r);
    WriteItem(idx, r, pos, b, items);
  }
}

int GridFor(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
}

}  // namespace

// kAuto and kWgmma resolve to what the current device runs: wgmma needs compute capability 9.0
// (the sm_90a image); other devices take the mma.sync shapes.
KernelVariant Resolve(KernelVariant v) {
  const bool wants_wgmma = v == KernelVariant::kWgmma || v == KernelVariant::kWgmmaDeep ||
                           v == KernelVariant::kHopper || v == KernelVariant::kHopperPersistent;
  if (v != KernelVariant::kAuto && !wants_wgmma) return v;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return KernelVariant::kWarps4;
  }
  const bool hopper = major == 9 && minor == 0;
  if (wants_wgmma) return hopper ? v : KernelVariant::kWarps4;
  // kAuto: the measured best (kernels/cuda/NOTES.md): on Hopper the warp-specialized kernel of
  // attention/hopper/ (dense; the sparse kernel then runs the deep wgmma pipeline), else 4 warps
  // of 32 rows.
  return hopper ? KernelVariant::kHopper : KernelVariant::kWarps4;
}

}  // namespace detail

int64_t DenseWorkspaceBytes(const AttnParams& p, int max_q_len, KernelVariant variant,
                            int64_t* zero_bytes) {
  *zero_bytes = 0;
  variant = detail::Resolve(variant);
  if (variant != KernelVariant::kHopper) return 0;
  return hopper::DenseWorkspaceBytes(p, max_q_len, false, zero_bytes);
}

cudaError_t LaunchDenseAttention(const AttnParams& p, int max_q_len, KernelVariant variant,
                                 cudaStream_t stream) {
  variant = detail::Resolve(variant);
  if (variant == KernelVariant::kHopper || variant == KernelVariant::kHopperPersistent) {
    if (hopper::DenseSupported(p)) {
      return hopper::LaunchDense(p, max_q_len, variant == KernelVariant::kHopperPersistent, stream);
    }
    variant = KernelVariant::kWgmmaDeep;  // strides/pointers TMA cannot describe
  }
  switch (p.dtype) {
    case DType::kBF16:
      return detail::DenseBf16(p, max_q_len, variant, stream);
    case DType::kF16:
      return detail::DenseFp16(p, max_q_len, variant, stream);
    case DType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchSparseAttention(const AttnParams& p, const SparseIndexView& index,
                                  const SparseSchedule& schedule, KernelVariant variant,
                                  cudaStream_t stream) {
  variant = detail::Resolve(variant);
  if (variant == KernelVariant::kHopper || variant == KernelVariant::kHopperPersistent) {
    if (hopper::SparseSupported(p, index)) return hopper::LaunchSparse(p, index, schedule, stream);
    variant =
        KernelVariant::kWgmmaDeep;  // TMA cannot describe the tensors, or SPATTN_HOPPER_BM64=0
  }
  switch (p.dtype) {
    case DType::kBF16:
      return detail::SparseBf16(p, index, schedule, variant, stream);
    case DType::kF16:
      return detail::SparseFp16(p, index, schedule, variant, stream);
    case DType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

int SparseTileN(int /*head_dim*/, int /*block_m*/) { return 64; }

namespace {
int ScheduleSections(const AttnParams& p) {
  const int kv_heads = std::max(p.num_q_heads / std::max(p.group, 1), 1);
  const int kv_per_section = SparseKvHeadsPerSection(p);
  return (kv_heads + kv_per_section - 1) / kv_per_section;
}
}  // namespace

int64_t SparseScheduleScratchInts(int64_t num_rows, const AttnParams& p) {
  // One histogram of cost buckets per section, SparseSchedule::stats (2 x 8 bytes: the
  // histograms are a multiple of 4096 ints, so the words stay 8-byte aligned), then each row's
  // bucket.
  return ScheduleSections(p) * static_cast<int64_t>(detail::kCostBuckets) + 4 + num_rows;
}

const unsigned long long* SparseScheduleStats(const int32_t* scratch, const AttnParams& p) {
  return reinterpret_cast<const unsigned long long*>(
      scratch + ScheduleSections(p) * static_cast<int64_t>(detail::kCostBuckets));
}

int SparseKvHeadsPerSection(const AttnParams& p) {
  const int kv_heads = p.num_q_heads / std::max(p.group, 1);
  const char* env = std::getenv("SPATTN_HOPPER_L2_MB");
  const int mb = env != nullptr && *env != '\0' ? std::atoi(env) : 32;
  if (mb <= 0 || kv_heads <= 0) return std::max(kv_heads, 1);
  // K and V of one kv head over the whole batch (the rows of a section span every sequence).
  const double kv_bytes = static_cast<double>(p.total_k) * p.head_dim * 2.0 * 2.0;
  int per = 1;
  while (per * 2 <= kv_heads && per * 2 * kv_bytes <= mb * 1048576.0) per *= 2;
  // At most kMaxSections sections.
  while ((kv_heads + per - 1) / per > detail::kMaxSections) per *= 2;
  return per;
}

bool SparseItemRecords() {
  const char* env = std::getenv("SPATTN_HOPPER_ITEM_RECORDS");
  return env == nullptr || *env == '\0' || std::atoi(env) != 0;
}

cudaError_t LaunchSparseSchedule(const SparseIndexView& index, const AttnParams& p, int tile_n,
                                 int32_t* scratch, int32_t* order, int* counter,
                                 cudaStream_t stream, int32_t* items) {
  using namespace detail;
  const int64_t rows = static_cast<int64_t>(index.num_heads) * index.num_blocks;
  const int kv_per_section = SparseKvHeadsPerSection(p);
  const int sections = ScheduleSections(p);
  const int buckets = sections * kCostBuckets;
  int32_t* hist = scratch;
  // SparseSchedule::stats right after the histograms (zeroed with them).
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(scratch + buckets);
  int32_t* bucket_of = scratch + buckets + 4;
  cudaError_t err = cudaMemsetAsync(counter, 0, sizeof(int), stream);
  if (err != cudaSuccess) return err;
  if (rows == 0) return cudaMemsetAsync(stats, 0, 2 * sizeof(unsigned long long), stream);
  if ((err = cudaMemsetAsync(hist, 0, (buckets + 4) * sizeof(int32_t), stream)) != cudaSuccess) {
    return err;
  }
  const char* pack = std::getenv("SPATTN_HOPPER_PACK_TAILS");
  const int pack_tails = pack == nullptr || *pack == '\0' ? 2 : std::atoi(pack);
  const char* ord = std::getenv("SPATTN_HOPPER_ORDER");
  const int order_mode = ord == nullptr || *ord == '\0' ? 0 : std::atoi(ord);
  CostKernel<<<GridFor(rows, 256), 256, 0, stream>>>(index, tile_n, std::max(p.group, 1),
                                                     kv_per_section, sections, pack_tails, hist,
                                                     bucket_of, stats);
  // Section by section, costliest first: offsets from the top bucket down.
  if ((err = LaunchReverseExclusiveScan32(hist, buckets, stream)) != cudaSuccess) return err;
  ScatterKernel<<<GridFor(rows, 256), 256, 0, stream>>>(rows, index.num_heads, index.num_blocks,
                                                        order_mode, bucket_of, hist, order,
                                                        index, items);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
