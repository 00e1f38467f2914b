// The tensor-core attention core shared by the dense and the sparse kernel (FlashAttention-2
// style): one CTA computes one (q head, query block) with an online softmax over a sequence of
// key tiles. A tile is either BN consecutive keys of a range or BN keys gathered one by one from
// a column list; both are loaded with cp.async into XOR-swizzled shared memory, kStages deep,
// and fed to mma.sync m16n8k16 (bf16/fp16 in, fp32 accumulate) through ldmatrix.
//
// Warp w owns query rows [w * kWarpRows, (w + 1) * kWarpRows) of the block (16 or 32 rows); its
// S = Q K^T fragment stays in registers and becomes the A operand of P V directly.
//
// With kWgmma (Hopper, sm_90a) each warpgroup of 4 warps computes its 64 rows with wgmma instead:
// S = Q K^T from shared memory (K-major, 128-byte swizzle descriptors), then O += P V with P
// from registers and V read N-major. Shared tiles are then stored as [head_dim / 64] sub-tiles
// of [rows][128 bytes], the layout the descriptors describe; the register layouts of S and O
// are the same as mma.sync's, so masking, softmax and the epilogue are shared.
#ifndef SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CORE_CUH_
#define SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CORE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/wgmma_ops.cuh"

namespace spattn {
namespace cuda {
namespace detail {

constexpr float kLn2 = 0.6931471805599453f;

// PTX wrappers (cp.async, ldmatrix, mma.sync, ex2): common/mma.cuh.

// ---- Kernel shape ----------------------------------------------------------------------------

template <typename T_, int kD_, int kBM_, int kBN_, int kWarps_, int kStages_, bool kWgmma_ = false>
struct Traits {
  using T = T_;
  static constexpr int kD = kD_;
  static constexpr int kBM = kBM_;
  static constexpr int kBN = kBN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kBM / kWarps;
  static constexpr int kMT = kWarpRows / 16;  // m16 tiles per warp
  static constexpr int kNT = kBN / 8;         // n8 tiles of S
  static constexpr int kKS = kD / 16;         // k16 steps of Q K^T
  static constexpr int kDT = kD / 8;          // n8 tiles of O
  static constexpr int kChunks = kD / 8;      // 16-byte chunks per row
  static constexpr bool kWgmma = kWgmma_;
  static constexpr bool kQInRegs = (kMT == 1) && !kWgmma;
  static_assert(!kWgmma || (kMT == 1 && kWarps % 4 == 0 && (kBN == 64 || kBN == 128)),
                "wgmma: warpgroups of 64 rows, key tiles of 64 or 128");
  static_assert(kD % 64 == 0, "swizzle needs >= 8 chunks per row");
  static_assert(kWarpRows % 16 == 0 && kMT <= 2, "16 or 32 query rows per warp");
  static_assert(kBN % 16 == 0, "key tile must be a multiple of 16");
  static_assert(kStages >= 2, "at least double buffering");

  // Shared memory: Q [kBM][kD], K and V [kStages][kBN][kD], keys [kStages][kBN], tile info.
  static constexpr int kQBytes = kBM * kD * 2;
  static constexpr int kKVTileBytes = kBN * kD * 2;
  static constexpr int kKOff = kQBytes;
  static constexpr int kVOff = kKOff + kStages * kKVTileBytes;
  static constexpr int kKeysOff = kVOff + kStages * kKVTileBytes;
  static constexpr int kInfoOff = kKeysOff + kStages * kBN * 4;
  // wgmma descriptors need 1024-byte aligned sub-tiles: room to align the base.
  static constexpr int kSmemBytes = kInfoOff + kStages * 4 * 4 + (kWgmma ? 1024 : 0);
  static_assert(!kWgmma || (kQBytes % 1024 == 0 && kKVTileBytes % 1024 == 0), "alignment");

  // Byte offset of 16-byte chunk `ch` of row `row` in a tile of `rows` rows. The chunk index
  // is XORed with the row's low 3 bits so that the 8 rows an ldmatrix phase (or a wgmma core
  // matrix) reads fall into 8 different bank groups; wgmma tiles split rows into 128-byte
  // sub-tiles (the 128-byte swizzle layout of the descriptors).
  static __device__ __forceinline__ uint32_t Off(int row, int ch, int rows) {
    if constexpr (kWgmma) {
      return static_cast<uint32_t>((ch / 8) * rows * 128 + row * 128 +
                                   (((ch & 7) ^ (row & 7)) * 16));
    } else {
      return static_cast<uint32_t>((row * kChunks + (ch ^ (row & 7))) * 16);
    }
  }
};

// ---- wgmma helpers ---------------------------------------------------------------------------

// Shared-memory matrix descriptor with 128-byte swizzle.
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr, uint32_t lbo_bytes,
                                             uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void WgmmaFence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaWaitAll() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// Makes shared memory written through the generic proxy (cp.async) visible to wgmma.
__device__ __forceinline__ void FenceProxyAsync() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accesses of `x` across an async wgmma boundary.
__device__ __forceinline__ void FenceReg(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void FenceReg(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }

template <typename T, int N>
struct Wgmma;
template <>
struct Wgmma<__nv_bfloat16, 64> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N64_bf16(d, a, b, sd);
  }
  static __device__ __forceinline__ void RS(float* d, const uint32_t* a, uint64_t b) {
    WgmmaRS_N64_bf16(d, a, b, 1);
  }
};
template <>
struct Wgmma<__nv_bfloat16, 128> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N128_bf16(d, a, b, sd);
  }
  static __device__ __forceinline__ void RS(float* d, const uint32_t* a, uint64_t b) {
    WgmmaRS_N128_bf16(d, a, b, 1);
  }
};
template <>
struct Wgmma<__half, 64> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N64_f16(d, a, b, sd);
  }
  static __device__ __forceinline__ void RS(float* d, const uint32_t* a, uint64_t b) {
    WgmmaRS_N64_f16(d, a, b, 1);
  }
};
template <>
struct Wgmma<__half, 128> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N128_f16(d, a, b, sd);
  }
  static __device__ __forceinline__ void RS(float* d, const uint32_t* a, uint64_t b) {
    WgmmaRS_N128_f16(d, a, b, 1);
  }
};
template <>
struct Wgmma<__nv_bfloat16, 176> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N176_bf16(d, a, b, sd);
  }
};
template <>
struct Wgmma<__half, 176> {
  static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int sd) {
    WgmmaSS_N176_f16(d, a, b, sd);
  }
};

// The keys of one (head, query block): ranges then gathered columns. With range_start null, one
// range [0, dense_end).
struct KeySet {
  int num_ranges = 0;
  const int32_t* range_start = nullptr;
  const int32_t* range_len = nullptr;
  int dense_end = 0;
  const int32_t* cols = nullptr;
  int num_cols = 0;
};

// Walks a KeySet tile by tile: range tiles of up to kBN consecutive keys, then column groups.
template <int kBN>
struct TileCursor {
  int e = 0, off = 0, c = 0;
  // kind 0: keys [start, start + n); kind 1: cols[start, start + n).
  __device__ __forceinline__ bool Next(const KeySet& ks, int& kind, int& start, int& n) {
    while (e < ks.num_ranges) {
      int rs = 0, rl = ks.dense_end;
      if (ks.range_start != nullptr) {
        rs = __ldg(ks.range_start + e);
        rl = __ldg(ks.range_len + e);
      }
      if (off < rl) {
        kind = 0;
        start = rs + off;
        n = min(kBN, rl - off);
        off += kBN;
        return true;
      }
      ++e;
      off = 0;
    }
    if (c < ks.num_cols) {
      kind = 1;
      start = c;
      n = min(kBN, ks.num_cols - c);
      c += kBN;
      return true;
    }
    return false;
  }
};

// Computes O (and LSE) of rows [q_block * kBM, ...) of sequence `seq`, q head `head`, over the
// keys of `ks`. All threads of the CTA call it; it uses all of `smem`.
template <class Tr>
__device__ __forceinline__ void ProcessBlock(const AttnParams& p, char* smem, int seq, int head,
                                             int q_block, const KeySet& ks) {
  using T = typename Tr::T;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStages = Tr::kStages;
  constexpr int kChunks = Tr::kChunks, kMT = Tr::kMT, kNT = Tr::kNT, kKS = Tr::kKS, kDT = Tr::kDT;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int warp_row0 = warp * Tr::kWarpRows;

  const int q_tok0 = p.cu_seqlens_q[seq];
  const int q_len = p.cu_seqlens_q[seq + 1] - q_tok0;
  const int k_tok0 = p.cu_seqlens_k[seq];
  const int k_len = p.cu_seqlens_k[seq + 1] - k_tok0;
  const int q_begin = q_block * kBM;
  const int first_pos = k_len - q_len + q_begin;  // key position of the block's first row
  const int kv_head = head / p.group;

  if constexpr (Tr::kWgmma) {
    smem += (1024 - (SmemAddr(smem) & 1023)) & 1023;
  }
  char* sQ = smem;
  char* sK = smem + Tr::kKOff;
  char* sV = smem + Tr::kVOff;
  int* sKeys = reinterpret_cast<int*>(smem + Tr::kKeysOff);
  int* sInfo = reinterpret_cast<int*>(smem + Tr::kInfoOff);
  const uint32_t sQa = SmemAddr(sQ), sKa = SmemAddr(sK), sVa = SmemAddr(sV);
  // ldmatrix lane addresses: every row a lane reads has (row & 7) == (lane & 7), so the swizzle
  // is a per-lane XOR of the chunk index with a compile-time step (chunk = 2 * step ^ x).
  constexpr uint32_t kRowBytes = kChunks * 16;
  const uint32_t lane_k_row = ((lane % 8) + (lane / 16) * 8) * kRowBytes;  // K: 2 n-tiles
  const uint32_t lane_k_xor = (((lane / 8) % 2) ^ (lane & 7)) * 16;
  const uint32_t lane_v_row = ((lane % 8) + ((lane / 8) % 2) * 8) * kRowBytes;  // V: 2 k-halves
  const uint32_t lane_v_xor = ((lane / 16) ^ (lane & 7)) * 16;  // also Q's (same lane pattern)
  const uint32_t lane_q_row = (warp_row0 + (lane % 16)) * kRowBytes;

  const T* qg = static_cast<const T*>(p.q) + static_cast<int64_t>(head) * p.q_head_stride;
  const T* kg = static_cast<const T*>(p.k) + static_cast<int64_t>(kv_head) * p.k_head_stride;
  const T* vg = static_cast<const T*>(p.v) + static_cast<int64_t>(kv_head) * p.v_head_stride;

  // Q tile (rows past q_len read as zeros).
  for (int i = tid; i < kBM * kChunks; i += Tr::kThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    const bool valid = q_begin + r < q_len;
    const T* src =
        qg + static_cast<int64_t>(q_tok0 + (valid ? q_begin + r : 0)) * p.q_token_stride + ch * 8;
    CpAsync16(sQa + Tr::Off(r, ch, kBM), src, valid);
  }

  TileCursor<kBN> cursor;
  // The next tile to issue, looked up one tile ahead: its gathered key numbers are loaded into
  // registers a whole tile before the cp.asyncs that need them, so the index load's latency is
  // not paid in the loop.
  // Only the wgmma shapes have the registers to spare; the mma.sync ones load at issue time.
  constexpr int kLoadIters = kBN * kChunks / Tr::kThreads;
  static_assert(kBN * kChunks % Tr::kThreads == 0, "whole chunks per thread");
  constexpr bool kPrefetch = Tr::kWgmma;
  int nx_kind = 0, nx_start = 0, nx_n = 0, nx_last = 0;
  bool nx_has = false;
  int nx_keys[kPrefetch ? kLoadIters : 1];
  auto advance = [&] {
    nx_has = cursor.Next(ks, nx_kind, nx_start, nx_n);
    if (!nx_has) return;
    if (nx_kind == 0) {
      nx_last = nx_start + nx_n - 1;
      return;
    }
    if constexpr (kPrefetch) {
      nx_last = __ldg(ks.cols + nx_start + nx_n - 1);
#pragma unroll
      for (int j = 0; j < kLoadIters; ++j) {
        const int r = (tid + j * Tr::kThreads) / kChunks;
        nx_keys[j] = r < nx_n ? __ldg(ks.cols + nx_start + r) : 0;
      }
    }
  };
  advance();
  // Issues the loads of the next tile into `stage` (or records that none is left).
  auto issue = [&](int stage) {
    if (!nx_has) {
      if (tid == 0) sInfo[stage * 4 + 2] = 0;
      return;
    }
    const int kind = nx_kind, start = nx_start, n = nx_n;
    const uint32_t kst = sKa + stage * Tr::kKVTileBytes;
    const uint32_t vst = sVa + stage * Tr::kKVTileBytes;
#pragma unroll
    for (int j = 0; j < kLoadIters; ++j) {
      const int i = tid + j * Tr::kThreads;
      const int r = i / kChunks, ch = i % kChunks;
      const bool valid = r < n;
      int key = 0;
      if (valid) {
        if (kind == 0) {
          key = start + r;
        } else if constexpr (kPrefetch) {
          key = nx_keys[j];
        } else {
          key = __ldg(ks.cols + start + r);
        }
      }
      const int64_t tok = k_tok0 + key;
      CpAsync16(kst + Tr::Off(r, ch, kBN), kg + tok * p.k_token_stride + ch * 8, valid);
      CpAsync16(vst + Tr::Off(r, ch, kBN), vg + tok * p.v_token_stride + ch * 8, valid);
      if (ch == 0) sKeys[stage * kBN + r] = valid ? key : 0x7fffffff;
    }
    if (tid == 0) {
      if (!kPrefetch && kind == 1) nx_last = __ldg(ks.cols + start + n - 1);
      sInfo[stage * 4 + 0] = kind;
      sInfo[stage * 4 + 1] = start;
      sInfo[stage * 4 + 2] = n;
      sInfo[stage * 4 + 3] = (n < kBN || (p.causal && nx_last > first_pos)) ? 1 : 0;
    }
    advance();
  };

  for (int st = 0; st < kStages - 1; ++st) {
    issue(st);
    CpAsyncCommit();  // group st (group 0 also holds Q)
  }

  float acc[kMT][kDT][4];
  float m_i[kMT][2], l_i[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
    }
    m_i[mt][0] = m_i[mt][1] = kNegInf;
    l_i[mt][0] = l_i[mt][1] = 0.f;
  }
  uint32_t qf[Tr::kQInRegs ? kKS : 1][4];
  const float scale = p.scale_log2;

  for (int t = 0;; ++t) {
    CpAsyncWait<kStages - 2>();
    if constexpr (Tr::kWgmma) FenceProxyAsync();
    __syncthreads();
    if (Tr::kQInRegs && t == 0) {
#pragma unroll
      for (int ks_i = 0; ks_i < kKS; ++ks_i) {
        LdMatrixX4(sQa + lane_q_row + ((ks_i * 32) ^ lane_v_xor), qf[ks_i][0], qf[ks_i][1],
                   qf[ks_i][2], qf[ks_i][3]);
      }
    }
    const int stage = t % kStages;
    const int n = sInfo[stage * 4 + 2];
    if (n == 0) break;
    const int kind = sInfo[stage * 4 + 0];
    const int start = sInfo[stage * 4 + 1];
    const bool need_mask = sInfo[stage * 4 + 3] != 0;
    issue((t + kStages - 1) % kStages);
    CpAsyncCommit();

    const uint32_t kst = sKa + stage * Tr::kKVTileBytes;
    const uint32_t vst = sVa + stage * Tr::kKVTileBytes;
    // Two copies of the tile math: interior tiles skip the mask code (fewer live registers).
    auto compute = [&](auto mask_tag) {
      constexpr bool kMask = decltype(mask_tag)::value;

      // S = Q K^T
      float s[kMT][kNT][4];
      if constexpr (Tr::kWgmma) {
        // This warpgroup's 64 rows of Q against the whole key tile; d in steps of 16.
        const uint32_t q_rows = sQa + (warp / 4) * 64 * 128;
        WgmmaFence();
#pragma unroll
        for (int ks_i = 0; ks_i < kKS; ++ks_i) {
          const uint32_t koff = (ks_i % 4) * 32;  // 16 elements within the 128-byte row
          const uint64_t da = SmemDesc(q_rows + (ks_i / 4) * kBM * 128 + koff, 16, 1024);
          const uint64_t db = SmemDesc(kst + (ks_i / 4) * kBN * 128 + koff, 16, 1024);
          Wgmma<T, kBN>::SS(&s[0][0][0], da, db, ks_i > 0 ? 1 : 0);
        }
        WgmmaCommit();
        WgmmaWaitAll();
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) FenceReg(s[0][nt][e]);
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
          }
        }
#pragma unroll
        for (int ks_i = 0; ks_i < kKS; ++ks_i) {
          uint32_t a[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (Tr::kQInRegs) {
#pragma unroll
              for (int e = 0; e < 4; ++e) a[mt][e] = qf[ks_i][e];
            } else {
              LdMatrixX4(sQa + lane_q_row + mt * 16 * kRowBytes + ((ks_i * 32) ^ lane_v_xor),
                         a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
            }
          }
#pragma unroll
          for (int np = 0; np < kNT / 2; ++np) {
            uint32_t b0, b1, b2, b3;
            LdMatrixX4(kst + lane_k_row + np * 16 * kRowBytes + ((ks_i * 32) ^ lane_k_xor), b0, b1,
                       b2, b3);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              Mma<T>::Run(s[mt][2 * np], a[mt], b0, b1);
              Mma<T>::Run(s[mt][2 * np + 1], a[mt], b2, b3);
            }
          }
        }
      }  // mma.sync

      // Mask: keys past the tile's n, and causal (key > row position).
      if constexpr (kMask) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = nt * 8 + 2 * t4 + j;
            const int key =
                kind == 0 ? (col < n ? start + col : 0x7fffffff) : sKeys[stage * kBN + col];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int pos = first_pos + warp_row0 + mt * 16 + g + 8 * h;
                const bool ok = col < n && (!p.causal || key <= pos);
                if (!ok) s[mt][nt][2 * h + j] = kNegInf;
              }
            }
          }
        }
      }

      // Online softmax (log2 domain; scores scaled on the fly).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = m_i[mt][h];
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float ms = mx == kNegInf ? 0.f : mx * scale;
          const float corr = Exp2(m_i[mt][h] * scale - ms);
          m_i[mt][h] = mx;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float pv = Exp2(fmaf(s[mt][nt][2 * h + j], scale, -ms));
              s[mt][nt][2 * h + j] = pv;
              sum += pv;
            }
          }
          l_i[mt][h] = l_i[mt][h] * corr + sum;
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            acc[mt][dt][2 * h] *= corr;
            acc[mt][dt][2 * h + 1] *= corr;
          }
        }
      }

      // O += P V
      if constexpr (Tr::kWgmma) {
        uint32_t pa[kBN / 16][4];
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          pa[kk][0] = Mma<T>::Pack(s[0][2 * kk][0], s[0][2 * kk][1]);
          pa[kk][1] = Mma<T>::Pack(s[0][2 * kk][2], s[0][2 * kk][3]);
          pa[kk][2] = Mma<T>::Pack(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
          pa[kk][3] = Mma<T>::Pack(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
        }
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
          for (int e = 0; e < 4; ++e) FenceReg(pa[kk][e]);  // written before the fence
        }
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) FenceReg(acc[0][dt][e]);
        }
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          // V N-major: 8-key groups 1024 bytes apart (SBO), 64-wide d blocks kBN * 128 apart (LBO).
          const uint64_t db = SmemDesc(vst + kk * 16 * 128, kBN * 128, 1024);
          Wgmma<T, kD>::RS(&acc[0][0][0], pa[kk], db);
        }
        WgmmaCommit();
        WgmmaWaitAll();
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) FenceReg(acc[0][dt][e]);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          uint32_t a[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            a[mt][0] = Mma<T>::Pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            a[mt][1] = Mma<T>::Pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            a[mt][2] = Mma<T>::Pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            a[mt][3] = Mma<T>::Pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
          }
#pragma unroll
          for (int dp = 0; dp < kDT / 2; ++dp) {
            uint32_t b0, b1, b2, b3;
            LdMatrixX4Trans(vst + lane_v_row + kk * 16 * kRowBytes + ((dp * 32) ^ lane_v_xor), b0,
                            b1, b2, b3);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              Mma<T>::Run(acc[mt][2 * dp], a[mt], b0, b1);
              Mma<T>::Run(acc[mt][2 * dp + 1], a[mt], b2, b3);
            }
          }
        }
      }  // mma.sync
    };
    if (need_mask) {
      compute(std::true_type{});
    } else {
      compute(std::false_type{});
    }
  }
  CpAsyncWait<0>();

  // Epilogue: normalize, stage the warp's rows in its part of sQ, write 16-byte rows.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_i[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l == 0.f ? 0.f : 1.f / l;
      const int r = warp_row0 + mt * 16 + g + 8 * h;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        const uint32_t packed =
            Mma<T>::Pack(acc[mt][dt][2 * h] * inv, acc[mt][dt][2 * h + 1] * inv);
        *reinterpret_cast<uint32_t*>(sQ + Tr::Off(r, dt, kBM) + t4 * 4) = packed;
      }
      if (p.maybe_lse != nullptr && t4 == 0 && q_begin + r < q_len) {
        const float lse = l == 0.f ? kNegInf : (m_i[mt][h] * scale + __log2f(l)) * kLn2;
        p.maybe_lse[static_cast<int64_t>(head) * p.total_q + q_tok0 + q_begin + r] = lse;
      }
    }
  }
  __syncwarp();
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(head) * p.o_head_stride;
  for (int i = lane; i < Tr::kWarpRows * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, ch = i % kChunks;
    if (q_begin + r < q_len) {
      const uint4 val = *reinterpret_cast<const uint4*>(sQ + Tr::Off(r, ch, kBM));
      *reinterpret_cast<uint4*>(og + static_cast<int64_t>(q_tok0 + q_begin + r) * p.o_token_stride +
                                ch * 8) = val;
    }
  }
}

// Dense: one CTA per (q head, query block, sequence); blocks with the most keys start first.
template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) DenseKernel(AttnParams p, int num_m_blocks) {
  extern __shared__ __align__(128) char smem[];
  const int head = blockIdx.x;
  const int m_block = num_m_blocks - 1 - static_cast<int>(blockIdx.y);
  const int seq = blockIdx.z;
  const int q_len = p.cu_seqlens_q[seq + 1] - p.cu_seqlens_q[seq];
  if (m_block * Tr::kBM >= q_len) return;
  const int k_len = p.cu_seqlens_k[seq + 1] - p.cu_seqlens_k[seq];
  const int last_row = min(q_len, (m_block + 1) * Tr::kBM) - 1;
  KeySet ks;
  ks.num_ranges = 1;
  ks.dense_end = p.causal ? k_len - q_len + last_row + 1 : k_len;
  ProcessBlock<Tr>(p, smem, seq, head, m_block, ks);
}

// Sparse: a persistent grid; each CTA pulls (head slot, block) rows from the schedule.
template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads)
    SparseKernel(AttnParams p, SparseIndexView idx, SparseSchedule sched, int batch) {
  extern __shared__ __align__(128) char smem[];
  __shared__ int item;
  for (;;) {
    if (threadIdx.x == 0) item = atomicAdd(sched.counter, 1);
    __syncthreads();
    const int w = item;
    if (w >= sched.num_items) break;
    const int r = sched.order[w];
    const int slot = r / idx.num_blocks;
    const int blk = r - slot * idx.num_blocks;
    int seq = 0;
    while (seq + 1 < batch && idx.block_offsets[seq + 1] <= blk) ++seq;
    KeySet ks;
    const int r0 = idx.range_indptr[r];
    ks.num_ranges = idx.range_indptr[r + 1] - r0;
    ks.range_start = idx.range_start + r0;
    ks.range_len = idx.range_len + r0;
    const int c0 = idx.col_indptr[r];
    ks.cols = idx.col_idx + c0;
    ks.num_cols = idx.col_indptr[r + 1] - c0;
    ProcessBlock<Tr>(p, smem, seq, idx.heads[slot], blk - idx.block_offsets[seq], ks);
    __syncthreads();  // smem and `item` are reused by the next row
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ATTENTION_ATTENTION_CORE_CUH_
