// Device helpers shared by the GPU builders of vertical_slash, block_sparse and flex_prefill:
// ordered keys, a CTA-wide radix selection (top-k by count, or the shortest prefix reaching a
// mass) with estimate.cc's ranking (higher score first, equal scores by lower index, NaN last),
// and the mma.sync / ldmatrix wrappers of the last-rows estimate. Header-only device code.
#ifndef SPATTN_KERNELS_CUDA_ESTIMATE_A_CUH_
#define SPATTN_KERNELS_CUDA_ESTIMATE_A_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace spattn {
namespace cuda {
namespace merged {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int CeilDivD(int a, int b) { return (a + b - 1) / b; }

// estimate.cc's SanitizeLogit: NaN -> -inf, +inf -> the largest float.
__device__ __forceinline__ float SanitizeLogit(float x) {
  if (isnan(x)) return -CUDART_INF_F;
  if (x == CUDART_INF_F) return FLT_MAX;
  return x;
}

// Ordered 64-bit key of a double: larger value, larger key; NaN ranks as -inf; -0 as +0 (they
// compare equal on the CPU, so they tie and rank by index).
__device__ __forceinline__ unsigned long long DoubleKey(double v) {
  if (isnan(v)) v = -CUDART_INF;
  if (v == 0.0) v = 0.0;
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(v));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}
__device__ __forceinline__ double KeyToDouble(unsigned long long key) {
  const unsigned long long b = (key >> 63) ? (key & 0x7fffffffffffffffull) : ~key;
  return __longlong_as_double(static_cast<long long>(b));
}
constexpr unsigned long long kKeyPosInf = 0xfff0000000000000ull;  // DoubleKey(+inf)

// Ordered 32-bit key of a float (for atomicMax of row maxima); 0 = nothing seen.
__device__ __forceinline__ unsigned FloatKey(float v) {
  const unsigned b = __float_as_uint(v);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float KeyToFloat(unsigned key) {
  if (key == 0) return -CUDART_INF_F;
  const unsigned b = (key >> 31) ? (key & 0x7fffffffu) : ~key;
  return __uint_as_float(b);
}

// The selection a radix walk ends with: element i (eligible) is selected iff
//   (key & mask) > prefix, or (key & mask) == prefix and its rank among the equal ones
//   (by index) is < take_eq.
struct TopKRule {
  unsigned long long prefix;
  unsigned long long mask;
  int take_eq;
};

__device__ __forceinline__ TopKRule SelectNone() { return TopKRule{~0ull, ~0ull, 0}; }

struct RadixSmem {
  int hist[256];
  double mass[256];
  int bin;
  int bin_count;
  int k_rem;
  int all;
  int count_above;
  double mass_above;
  int total;
};

// Warp 0: finds the bin, counted from the top, that holds the k_rem-th element of `hist`.
// Writes sm.bin, sm.bin_count, sm.k_rem (rank inside the bin), sm.all (fewer than k_rem).
__device__ __forceinline__ void FindCountBin(RadixSmem& sm, int k_rem) {
  const int lane = threadIdx.x & 31;
  int local = 0;
#pragma unroll
  for (int t = 0; t < 8; ++t) local += sm.hist[255 - (lane * 8 + t)];
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += v;
  }
  const int excl = incl - local;
  const int total = __shfl_sync(kFullMask, incl, 31);
  if (lane == 0) {
    sm.all = total < k_rem ? 1 : 0;
    sm.total = total;
  }
  if (total >= k_rem && excl < k_rem && k_rem <= incl) {
    int above = excl;
    for (int t = 0; t < 8; ++t) {
      const int b = 255 - (lane * 8 + t);
      const int h = sm.hist[b];
      if (above + h >= k_rem) {
        sm.bin = b;
        sm.bin_count = h;
        sm.k_rem = k_rem - above;
        break;
      }
      above += h;
    }
  }
}

// Top `k` eligible elements of [0, n) by (key desc, index asc). key_of(i, &key) returns whether
// i is eligible. Every thread of the CTA must call it; returns the same rule in every thread.
template <int kThreads, class KeyFn>
__device__ TopKRule CtaTopKRule(int n, int k, KeyFn key_of, RadixSmem& sm) {
  const int tid = threadIdx.x;
  if (k <= 0 || n <= 0) return SelectNone();
  unsigned long long prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) sm.hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      unsigned long long key;
      if (key_of(i, &key) && (key & mask) == prefix) {
        atomicAdd(&sm.hist[(key >> shift) & 255], 1);
      }
    }
    __syncthreads();
    if (tid < 32) FindCountBin(sm, k_rem);
    __syncthreads();
    const int all = sm.all, bin = sm.bin, bin_count = sm.bin_count, rem = sm.k_rem;
    __syncthreads();  // the scalars are rewritten by the next pass
    if (all) return TopKRule{prefix, mask, INT_MAX};
    prefix |= static_cast<unsigned long long>(bin) << shift;
    mask |= 0xffull << shift;
    k_rem = rem;
    if (bin_count == k_rem) return TopKRule{prefix, mask, INT_MAX};
  }
  return TopKRule{prefix, mask, k_rem};
}

// Where a descending walk over 256 bins reaches mass t_rem (> 0). Call with all 32 lanes of a
// warp; every lane gets the result.
struct MassBin {
  int found;          // 0: the bins' total mass is below t_rem
  int bin;            // the bin where the cumulative mass reaches t_rem
  int bin_count;      // its elements
  int count_above;    // elements in higher bins
  double mass_above;  // their mass
  int total;          // elements in all bins
};

__device__ __forceinline__ MassBin WarpFindMassBin(const int* hist, const double* mass,
                                                   double t_rem) {
  const int lane = threadIdx.x & 31;
  int cnt = 0;
  double ms = 0;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    cnt += hist[255 - (lane * 8 + t)];
    ms += mass[255 - (lane * 8 + t)];
  }
  int ci = cnt;
  double mi = ms;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int cv = __shfl_up_sync(kFullMask, ci, o);
    const double mv = __shfl_up_sync(kFullMask, mi, o);
    if (lane >= o) {
      ci += cv;
      mi += mv;
    }
  }
  // Exclusive sums from the neighbour's inclusive ones (lane 0: nothing above).
  double me = __shfl_up_sync(kFullMask, mi, 1);
  int ce = __shfl_up_sync(kFullMask, ci, 1);
  if (lane == 0) {
    me = 0;
    ce = 0;
  }
  MassBin r;
  r.total = __shfl_sync(kFullMask, ci, 31);
  const double total_mass = __shfl_sync(kFullMask, mi, 31);
  r.found = total_mass >= t_rem ? 1 : 0;
  r.bin = -1;
  r.bin_count = 0;
  r.count_above = 0;
  r.mass_above = 0;
  const bool mine = r.found && me < t_rem && t_rem <= mi;
  int bin = -1, bin_count = 0, c_above_out = 0;
  double m_above_out = 0;
  if (mine) {
    double above = me;
    int c_above = ce;
    for (int t = 0; t < 8; ++t) {
      const int b = 255 - (lane * 8 + t);
      if (hist[b] > 0) {
        // The last non-empty bin of the lane is the fallback when rounding of the lane's
        // parts keeps the sum below t_rem.
        bin = b;
        bin_count = hist[b];
        c_above_out = c_above;
        m_above_out = above;
        if (above + mass[b] >= t_rem) break;
      }
      above += mass[b];
      c_above += hist[b];
    }
  }
  const unsigned who = __ballot_sync(kFullMask, mine);
  if (who != 0) {
    const int src = __ffs(who) - 1;
    r.bin = __shfl_sync(kFullMask, bin, src);
    r.bin_count = __shfl_sync(kFullMask, bin_count, src);
    r.count_above = __shfl_sync(kFullMask, c_above_out, src);
    r.mass_above = __shfl_sync(kFullMask, m_above_out, src);
  }
  if (r.bin < 0) r.found = 0;
  return r;
}

// The length of the shortest prefix, in (key desc, index asc) order of the eligible elements,
// whose masses (> 0 only) sum to >= target; all eligible elements when they fall short; 1 when
// target <= 0 (estimate.cc's CumulativeCount). key_mass(i, &key, &mass) returns eligibility.
// Sums run in a different order than the CPU's: at exact boundaries the last bit may differ.
template <int kThreads, class KeyMassFn>
__device__ int CtaMassCount(int n, double target, KeyMassFn key_mass, RadixSmem& sm) {
  const int tid = threadIdx.x;
  unsigned long long prefix = 0, mask = 0;
  double t_rem = target;
  int count_above = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) {
      sm.hist[b] = 0;
      sm.mass[b] = 0;
    }
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      unsigned long long key;
      double m;
      if (key_mass(i, &key, &m) && (key & mask) == prefix) {
        const int b = static_cast<int>((key >> shift) & 255);
        atomicAdd(&sm.hist[b], 1);
        if (m > 0) atomicAdd(&sm.mass[b], m);
      }
    }
    __syncthreads();
    if (tid < 32) {
      const MassBin mb = WarpFindMassBin(sm.hist, sm.mass, t_rem);
      if (tid == 0) {
        sm.total = mb.total;
        sm.bin = mb.bin;
        sm.bin_count = mb.bin_count;
        sm.count_above = mb.count_above;
        sm.mass_above = mb.mass_above;
        if (shift == 56 && mb.total == 0) {
          sm.all = 1;  // nothing eligible
        } else if (t_rem <= 0) {
          sm.all = 2;  // target already met: one element
        } else if (!mb.found) {
          sm.all = 3;  // falls short: the whole group
        } else {
          sm.all = 0;
        }
      }
    }
    __syncthreads();
    const int all = sm.all, bin = sm.bin, bin_count = sm.bin_count, total = sm.total;
    const int c_above = sm.count_above;
    const double m_above = sm.mass_above;
    __syncthreads();
    if (all == 1) return 0;
    if (all == 2) return count_above + 1;
    if (all == 3) return count_above + total;
    count_above += c_above;
    t_rem -= m_above;
    prefix |= static_cast<unsigned long long>(bin) << shift;
    mask |= 0xffull << shift;
    if (bin_count == 1) return count_above + 1;
    if (shift == 0) {
      // Every element of the bin equals T: add them one by one, as the CPU does.
      const double t = KeyToDouble(prefix);
      double cum = 0;
      int m = 0;
      while (m < bin_count && cum < t_rem) {
        if (t > 0) cum += t;
        ++m;
      }
      return count_above + m;
    }
  }
  return count_above;
}

// Applies `rule` in index order: calls emit(i, position) for every selected element, position
// counting the selected ones before it. Every thread must call it. Returns the number selected.
template <int kThreads, class KeyFn, class Emit>
__device__ int CtaApplyRule(int n, const TopKRule& rule, KeyFn key_of, Emit emit,
                            typename cub::BlockScan<int, kThreads>::TempStorage& scan,
                            int eq_before = 0) {
  using Scan = cub::BlockScan<int, kThreads>;
  int carry_eq = eq_before, carry_sel = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    bool eq = false, above = false;
    if (i < n) {
      unsigned long long key;
      if (key_of(i, &key)) {
        const unsigned long long m = key & rule.mask;
        eq = m == rule.prefix;
        above = m > rule.prefix;
      }
    }
    int eq_rank = 0, eq_total = 0;
    Scan(scan).ExclusiveSum(eq ? 1 : 0, eq_rank, eq_total);
    __syncthreads();
    const bool sel =
        above || (eq && (rule.take_eq == INT_MAX || carry_eq + eq_rank < rule.take_eq));
    int pos = 0, sel_total = 0;
    Scan(scan).ExclusiveSum(sel ? 1 : 0, pos, sel_total);
    __syncthreads();
    if (sel) emit(i, carry_sel + pos);
    carry_eq += eq_total;
    carry_sel += sel_total;
  }
  return carry_sel;
}

// CTA-wide sum of one int per thread (result in every thread).
template <int kThreads>
__device__ int CtaSum(int v, typename cub::BlockScan<int, kThreads>::TempStorage& scan) {
  int excl = 0, total = 0;
  cub::BlockScan<int, kThreads>(scan).ExclusiveSum(v, excl, total);
  __syncthreads();
  return total;
}

// ---- mma.sync m16n8k16 with fp32 accumulators (sm_80+).

template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void Run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
};

template <>
struct Mma<__half> {
  __device__ __forceinline__ static void Run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static float ToFloat(__half x) { return __half2float(x); }
};

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Element of a [tokens, heads, d] tensor as float.
template <typename T>
__device__ __forceinline__ float LoadAsFloat(const T* base, int64_t token, int64_t token_stride,
                                             int64_t head, int64_t head_stride, int c) {
  return Mma<T>::ToFloat(base[token * token_stride + head * head_stride + c]);
}

// ---- Pooled estimates (block_sparse, flex_prefill): fp32 means and dot products in the CPU's
// order (MeanPool sums rows in order; ColumnDots runs one FMA chain over the head dimension).

// Mean of each of `rows` consecutive query blocks of `bs` rows (the last may be partial), times
// `scale`, into qs [rows][d].
template <typename T, int kThreads>
__device__ __forceinline__ void PoolQueries(const T* q, int64_t token_stride, int64_t head,
                                            int64_t head_stride, int q_begin, int ql,
                                            int first_block, int rows, int bs, int d, float scale,
                                            float* qs) {
  for (int idx = threadIdx.x; idx < rows * d; idx += kThreads) {
    const int r = idx / d, c = idx - r * d;
    const int b0 = (first_block + r) * bs;
    const int b1 = min(ql, b0 + bs);
    float acc = 0.f;
    for (int t = b0; t < b1; ++t) {
      acc = __fadd_rn(acc, LoadAsFloat(q, static_cast<int64_t>(q_begin) + t, token_stride, head,
                                       head_stride, c));
    }
    const float inv = __fdiv_rn(1.f, static_cast<float>(b1 - b0));
    qs[idx] = __fmul_rn(__fmul_rn(acc, inv), scale);
  }
}

// For r < rows (at most 4 * kThreads / 64) and kb < kb_end: out(r, kb, logit) with
// logit = SanitizeLogit(fma chain over c of qs[r][c] * pk[kb][c]). ks: smem [64][d + 1].
template <int kThreads, class Out>
__device__ __forceinline__ void PooledDots(const float* qs, int rows, int d, const float* pk,
                                           int kb_end, float* ks, Out out) {
  constexpr int kGroups = kThreads / 64;
  const int kbi = threadIdx.x & 63, rsub = threadIdx.x >> 6;
  for (int kb0 = 0; kb0 < kb_end; kb0 += 64) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < 64 * d; idx += kThreads) {
      const int b = idx / d, c = idx - b * d;
      ks[b * (d + 1) + c] = kb0 + b < kb_end ? pk[static_cast<int64_t>(kb0 + b) * d + c] : 0.f;
    }
    __syncthreads();
    if (kb0 + kbi < kb_end) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float* kr = ks + kbi * (d + 1);
      for (int c = 0; c < d; ++c) {
        const float kc = kr[c];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int r = rsub + u * kGroups;
          if (r < rows) acc[u] = fmaf(qs[r * d + c], kc, acc[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int r = rsub + u * kGroups;
        if (r < rows) out(r, kb0 + kbi, SanitizeLogit(acc[u]));
      }
    }
  }
  __syncthreads();
}

// Ranges of the runs of flagged blocks [0, n): block j covers keys [j * bs, (j + 1) * bs),
// clipped to key_end. emit(range_index, start, end) per run in key order; returns the count.
template <int kThreads, class Emit>
__device__ __forceinline__ int CtaBlockRuns(
    const uint8_t* flags, int n, int bs, int key_end, Emit emit,
    typename cub::BlockScan<int, kThreads>::TempStorage& scan) {
  int carry = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const bool f = j < n && flags[j] != 0;
    const bool starts = f && (j == 0 || flags[j - 1] == 0);
    const bool ends = f && (j == n - 1 || flags[j + 1] == 0);
    int incl = 0, total = 0;
    cub::BlockScan<int, kThreads>(scan).InclusiveSum(starts ? 1 : 0, incl, total);
    __syncthreads();
    const int r = carry + incl - 1;  // the run holding j
    if (starts || ends) {
      const int e = min((j + 1) * bs, key_end);
      emit(r, starts, ends, j * bs, e);
    }
    carry += total;
  }
  return carry;
}

// Groups of a sorted array a[0, n): maximal runs whose consecutive values differ by at most
// `gap`, written as [lo, hi] pairs to out (as line_merge::GroupRuns); returns their count.
template <int kThreads>
__device__ __forceinline__ int CtaGroupRuns(
    const int32_t* a, int n, int gap, int32_t* out,
    typename cub::BlockScan<int, kThreads>::TempStorage& scan) {
  int carry = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool in = i < n;
    const int v = in ? a[i] : 0;
    const bool head = in && (i == 0 || v - a[i - 1] > gap);
    const bool tail = in && (i == n - 1 || a[i + 1] - v > gap);
    int incl = 0, total = 0;
    cub::BlockScan<int, kThreads>(scan).InclusiveSum(head ? 1 : 0, incl, total);
    __syncthreads();
    const int k = carry + incl - 1;
    if (head) out[2 * k] = v;
    if (tail) out[2 * k + 1] = v;
    carry += total;
  }
  return carry;
}

// ---- Warp-level versions (one warp per row, no CTA barriers): the same rules as the Cta*
// functions above. `hist` is the warp's own 256 ints of shared memory.

__device__ __forceinline__ unsigned LaneMaskLt() { return (1u << (threadIdx.x & 31)) - 1u; }

template <class KeyFn>
__device__ TopKRule WarpTopKRule(int n, int k, KeyFn key_of, int* hist) {
  const int lane = threadIdx.x & 31;
  if (k <= 0 || n <= 0) return SelectNone();
  unsigned long long prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) hist[b] = 0;
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
      unsigned long long key;
      if (key_of(i, &key) && (key & mask) == prefix) {
        atomicAdd(&hist[(key >> shift) & 255], 1);
      }
    }
    __syncwarp();
    int local = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) local += hist[255 - (lane * 8 + t)];
    int incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += v;
    }
    const int excl = incl - local;
    const int total = __shfl_sync(kFullMask, incl, 31);
    if (total < k_rem) return TopKRule{prefix, mask, INT_MAX};
    const bool mine = excl < k_rem && k_rem <= incl;
    int bin = 0, bin_count = 0, rem = 0;
    if (mine) {
      int above = excl;
      for (int t = 0; t < 8; ++t) {
        const int b = 255 - (lane * 8 + t);
        const int h = hist[b];
        if (above + h >= k_rem) {
          bin = b;
          bin_count = h;
          rem = k_rem - above;
          break;
        }
        above += h;
      }
    }
    const int src = __ffs(__ballot_sync(kFullMask, mine)) - 1;
    bin = __shfl_sync(kFullMask, bin, src);
    bin_count = __shfl_sync(kFullMask, bin_count, src);
    rem = __shfl_sync(kFullMask, rem, src);
    __syncwarp();  // every lane has read hist before the next pass clears it
    prefix |= static_cast<unsigned long long>(bin) << shift;
    mask |= 0xffull << shift;
    k_rem = rem;
    if (bin_count == k_rem) return TopKRule{prefix, mask, INT_MAX};
  }
  return TopKRule{prefix, mask, k_rem};
}

template <class KeyFn, class Emit>
__device__ int WarpApplyRule(int n, const TopKRule& rule, KeyFn key_of, Emit emit,
                             int eq_before = 0) {
  const int lane = threadIdx.x & 31;
  int carry_eq = eq_before, carry_sel = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    bool eq = false, above = false;
    if (i < n) {
      unsigned long long key;
      if (key_of(i, &key)) {
        const unsigned long long m = key & rule.mask;
        eq = m == rule.prefix;
        above = m > rule.prefix;
      }
    }
    const unsigned eqm = __ballot_sync(kFullMask, eq);
    const int eq_rank = __popc(eqm & LaneMaskLt());
    const bool sel =
        above || (eq && (rule.take_eq == INT_MAX || carry_eq + eq_rank < rule.take_eq));
    const unsigned selm = __ballot_sync(kFullMask, sel);
    if (sel) emit(i, carry_sel + __popc(selm & LaneMaskLt()));
    carry_eq += __popc(eqm);
    carry_sel += __popc(selm);
  }
  return carry_sel;
}

// CtaBlockRuns for one warp (flags written before it must be __syncwarp'ed).
template <class Emit>
__device__ int WarpBlockRuns(const uint8_t* flags, int n, int bs, int key_end, Emit emit) {
  const int lane = threadIdx.x & 31;
  int carry = 0;
  for (int base = 0; base < n; base += 32) {
    const int j = base + lane;
    const bool f = j < n && flags[j] != 0;
    const bool starts = f && (j == 0 || flags[j - 1] == 0);
    const bool ends = f && (j == n - 1 || flags[j + 1] == 0);
    const unsigned sm = __ballot_sync(kFullMask, starts);
    const int r = carry + __popc(sm & ((LaneMaskLt() << 1) | 1u)) - 1;
    if (starts || ends) emit(r, starts, ends, j * bs, min((j + 1) * bs, key_end));
    carry += __popc(sm);
  }
  return carry;
}

// CtaMassCount for one warp: `hist` / `mass` are the warp's own 256 bins.
template <class KeyMassFn>
__device__ int WarpMassCount(int n, double target, KeyMassFn key_mass, int* hist, double* mass) {
  const int lane = threadIdx.x & 31;
  unsigned long long prefix = 0, mask = 0;
  double t_rem = target;
  int count_above = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) {
      hist[b] = 0;
      mass[b] = 0;
    }
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
      unsigned long long key;
      double m;
      if (key_mass(i, &key, &m) && (key & mask) == prefix) {
        const int b = static_cast<int>((key >> shift) & 255);
        atomicAdd(&hist[b], 1);
        if (m > 0) atomicAdd(&mass[b], m);
      }
    }
    __syncwarp();
    const MassBin mb = WarpFindMassBin(hist, mass, t_rem);
    __syncwarp();  // every lane has read the bins before the next pass clears them
    if (shift == 56 && mb.total == 0) return 0;
    if (t_rem <= 0) return count_above + 1;
    if (!mb.found) return count_above + mb.total;
    count_above += mb.count_above;
    t_rem -= mb.mass_above;
    prefix |= static_cast<unsigned long long>(mb.bin) << shift;
    mask |= 0xffull << shift;
    if (mb.bin_count == 1) return count_above + 1;
    if (shift == 0) {
      const double t = KeyToDouble(prefix);
      double cum = 0;
      int m = 0;
      while (m < mb.bin_count && cum < t_rem) {
        if (t > 0) cum += t;
        ++m;
      }
      return count_above + m;
    }
  }
  return count_above;
}

__device__ __forceinline__ int WarpSum(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ESTIMATE_A_CUH_
