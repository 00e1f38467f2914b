// Dispatch of the attention launchers, the sparse kernel's work schedule (a counting sort of rows
// by cost on the device) and the GPU builders of the static patterns (dense, a_shape).
#include <algorithm>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/hopper/hopper_launch.h"

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

constexpr int kScanThreads = 1024;
constexpr int kScanItems = 4;
// Rows of equal cost above this many tiles share the last bucket.
constexpr int kCostBuckets = kScanThreads * kScanItems;

// Exclusive prefix sum of data[0, n) in place by one CTA; total (optional) gets the sum.
// With `reverse`, sums from the end: data[i] = sum of data[j] for j > i.
__global__ void ScanKernel(int32_t* data, int n, int32_t* total, bool reverse) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int32_t carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kScanThreads * kScanItems) {
    int32_t items[kScanItems];
    for (int j = 0; j < kScanItems; ++j) {
      const int i = base + threadIdx.x * kScanItems + j;
      items[j] = i < n ? data[reverse ? n - 1 - i : i] : 0;
    }
    int32_t chunk_total = 0;
    Scan(temp).ExclusiveSum(items, items, chunk_total);
    const int32_t c = carry;
    for (int j = 0; j < kScanItems; ++j) {
      const int i = base + threadIdx.x * kScanItems + j;
      if (i < n) data[reverse ? n - 1 - i : i] = items[j] + c;
    }
    __syncthreads();
    if (threadIdx.x == 0) carry = c + chunk_total;
    __syncthreads();
  }
  if (threadIdx.x == 0 && total != nullptr) *total = carry;
}

__device__ __forceinline__ int CeilDiv(int a, int b) { return (a + b - 1) / b; }

__global__ void CostKernel(SparseIndexView idx, int tile_n, int32_t* hist, int32_t* bucket_of) {
  const int64_t rows = static_cast<int64_t>(idx.num_heads) * idx.num_blocks;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int cost = 0;
    for (int e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
      cost += CeilDiv(idx.range_len[e], tile_n);
    }
    cost += CeilDiv(idx.col_indptr[r + 1] - idx.col_indptr[r], tile_n);
    const int b = min(cost, kCostBuckets - 1);
    bucket_of[r] = b;
    atomicAdd(hist + b, 1);
  }
}

__global__ void ScatterKernel(int64_t rows, const int32_t* bucket_of, int32_t* offsets,
                              int32_t* order) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    order[atomicAdd(offsets + bucket_of[r], 1)] = static_cast<int32_t>(r);
  }
}

int GridFor(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
}

// block_offsets from cu_seqlens_q (one thread: batches are short).
__global__ void BlockOffsetsKernel(const int32_t* cu_q, int batch, int block_m, int32_t* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t acc = 0;
  out[0] = 0;
  for (int b = 0; b < batch; ++b) {
    acc += CeilDiv(cu_q[b + 1] - cu_q[b], block_m);
    out[b + 1] = acc;
  }
}

struct BlockGeo {
  int first_pos, last_pos, key_end;
};

__device__ BlockGeo Geometry(const int32_t* cu_q, const int32_t* cu_k, const int32_t* offsets,
                             int batch, bool causal, int block_m, int blk) {
  int seq = 0;
  while (seq + 1 < batch && offsets[seq + 1] <= blk) ++seq;
  const int q_len = cu_q[seq + 1] - cu_q[seq];
  const int k_len = cu_k[seq + 1] - cu_k[seq];
  const int q_begin = (blk - offsets[seq]) * block_m;
  const int q_end = min(q_begin + block_m, q_len);
  BlockGeo g;
  g.first_pos = k_len - q_len + q_begin;
  g.last_pos = k_len - q_len + q_end - 1;
  g.key_end = causal ? g.last_pos + 1 : k_len;
  return g;
}

// The ranges of one block: dense [0, key_end); a_shape sink + local window, clipped to key_end
// and merged when they touch (like RowKeys::Normalize).
__device__ int BlockRanges(int kind, int sink, int local, const BlockGeo& g, int* starts,
                           int* ends) {
  if (kind == 0) {
    starts[0] = 0;
    ends[0] = g.key_end;
    return 1;
  }
  int n = 0;
  const int s_end = min(sink, g.key_end);
  if (s_end > 0) {
    starts[n] = 0;
    ends[n] = s_end;
    ++n;
  }
  const int l_start = max(0, g.first_pos - local + 1);
  const int l_end = min(g.last_pos + 1, g.key_end);
  if (l_end > l_start) {
    if (n == 1 && l_start <= ends[0]) {
      ends[0] = max(ends[0], l_end);
    } else {
      starts[n] = l_start;
      ends[n] = l_end;
      ++n;
    }
  }
  return n;
}

__global__ void CountRangesKernel(int kind, int sink, int local, const int32_t* cu_q,
                                  const int32_t* cu_k, const int32_t* offsets, int batch,
                                  bool causal, int block_m, int num_blocks, int32_t* counts) {
  for (int blk = blockIdx.x * blockDim.x + threadIdx.x; blk < num_blocks;
       blk += gridDim.x * blockDim.x) {
    const BlockGeo g = Geometry(cu_q, cu_k, offsets, batch, causal, block_m, blk);
    int s[2], e[2];
    counts[blk] = BlockRanges(kind, sink, local, g, s, e);
  }
}

// prefix: exclusive prefix of per-block counts, prefix[num_blocks] = ranges per head slot.
__global__ void FillRangesKernel(int kind, int sink, int local, const int32_t* cu_q,
                                 const int32_t* cu_k, const int32_t* offsets, int batch,
                                 bool causal, int block_m, int num_heads, int num_blocks,
                                 const int32_t* prefix, DeviceIndexArrays out) {
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  const int32_t per_slot = prefix[num_blocks];
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int slot = static_cast<int>(r / num_blocks);
    const int blk = static_cast<int>(r - static_cast<int64_t>(slot) * num_blocks);
    const BlockGeo g = Geometry(cu_q, cu_k, offsets, batch, causal, block_m, blk);
    int s[2], e[2];
    const int n = BlockRanges(kind, sink, local, g, s, e);
    const int32_t o = slot * per_slot + prefix[blk];
    out.range_indptr[r] = o;
    out.col_indptr[r] = 0;
    for (int i = 0; i < n; ++i) {
      out.range_start[o + i] = s[i];
      out.range_len[o + i] = e[i] - s[i];
    }
    if (r == rows - 1) {
      out.range_indptr[rows] = num_heads * per_slot;
      out.col_indptr[rows] = 0;
    }
  }
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
    variant = KernelVariant::kWgmmaDeep;  // block_m 64
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

int64_t SparseScheduleScratchInts(int64_t num_rows) {
  return 2 * static_cast<int64_t>(detail::kCostBuckets) + num_rows;
}

cudaError_t LaunchSparseSchedule(const SparseIndexView& index, int tile_n, int32_t* scratch,
                                 int32_t* order, int* counter, cudaStream_t stream) {
  using namespace detail;
  const int64_t rows = static_cast<int64_t>(index.num_heads) * index.num_blocks;
  int32_t* hist = scratch;
  int32_t* bucket_of = scratch + kCostBuckets;
  cudaError_t err = cudaMemsetAsync(counter, 0, sizeof(int), stream);
  if (err != cudaSuccess || rows == 0) return err;
  if ((err = cudaMemsetAsync(hist, 0, kCostBuckets * sizeof(int32_t), stream)) != cudaSuccess) {
    return err;
  }
  CostKernel<<<GridFor(rows, 256), 256, 0, stream>>>(index, tile_n, hist, bucket_of);
  // Costliest first: offsets from the top bucket down.
  ScanKernel<<<1, kScanThreads, 0, stream>>>(hist, kCostBuckets, nullptr, /*reverse=*/true);
  ScatterKernel<<<GridFor(rows, 256), 256, 0, stream>>>(rows, bucket_of, hist, order);
  return cudaGetLastError();
}

cudaError_t LaunchStaticIndexBuilder(int kind, int sink_tokens, int local_tokens,
                                     const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                     int batch, bool causal, int block_m, int num_heads,
                                     int num_blocks, const DeviceIndexArrays& out,
                                     cudaStream_t stream) {
  using namespace detail;
  if (kind != 0 && kind != 1) return cudaErrorInvalidValue;
  BlockOffsetsKernel<<<1, 32, 0, stream>>>(cu_seqlens_q, batch, block_m, out.block_offsets);
  if (num_blocks == 0 || num_heads == 0) {
    cudaError_t err = cudaMemsetAsync(
        out.range_indptr, 0, (static_cast<int64_t>(num_heads) * num_blocks + 1) * 4, stream);
    if (err != cudaSuccess) return err;
    err = cudaMemsetAsync(out.col_indptr, 0, (static_cast<int64_t>(num_heads) * num_blocks + 1) * 4,
                          stream);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
  }
  CountRangesKernel<<<GridFor(num_blocks, 256), 256, 0, stream>>>(
      kind, sink_tokens, local_tokens, cu_seqlens_q, cu_seqlens_k, out.block_offsets, batch, causal,
      block_m, num_blocks, out.scratch);
  ScanKernel<<<1, kScanThreads, 0, stream>>>(out.scratch, num_blocks, out.scratch + num_blocks,
                                             /*reverse=*/false);
  const int64_t rows = static_cast<int64_t>(num_heads) * num_blocks;
  FillRangesKernel<<<GridFor(rows, 256), 256, 0, stream>>>(
      kind, sink_tokens, local_tokens, cu_seqlens_q, cu_seqlens_k, out.block_offsets, batch, causal,
      block_m, num_heads, num_blocks, out.scratch, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace spattn
