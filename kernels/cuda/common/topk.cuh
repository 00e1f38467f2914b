// Top-k on the GPU: ordered integer keys of floats / doubles and CTA-wide radix selections (the
// k best by count, or the shortest prefix reaching a mass) with the CPU builders' ranking
// (higher score first, equal scores by lower index, NaN last), CTA-wide and warp-wide (one warp
// per row), plus the CTA helpers they use.
// Used by the GPU builders of vertical_slash, block_sparse, flex_prefill and saap. Header-only
// device code.
#ifndef SPATTN_KERNELS_CUDA_COMMON_TOPK_CUH_
#define SPATTN_KERNELS_CUDA_COMMON_TOPK_CUH_

#include <cuda_runtime.h>
#include <math_constants.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace spattn {
namespace cuda {
namespace topk {

constexpr unsigned kFullMask = 0xffffffffu;

// Adds 1 to hist[bin] for every lane whose bin is >= 0 (shared memory). Lanes with the same bin
// add once, together: same-address shared atomics of one warp serialize, and the first levels of
// a radix walk put most keys in a few bins. Integer counts, so the histogram is the same. Call
// with all 32 lanes of the warp.
__device__ __forceinline__ void WarpHistAdd(int* hist, int bin) {
  const unsigned peers = __match_any_sync(kFullMask, bin);
  if (bin >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
    atomicAdd(&hist[bin], __popc(peers));
  }
}

// WarpHistAdd with a mass: hist[bin] += 1 and, when m > 0, mass[bin] += m for every lane whose
// bin is >= 0. When lanes share a bin, their masses are first summed (one double atomic per bin
// instead of one per lane, which a warp serializes) by pointer jumping over the bin's lanes in
// lane order: after step s each lane holds the sum of its next 2^s peers (itself included), so
// five steps leave the bin's sum in its lowest lane, in a fixed tree order. The order of a bin's
// sum was never fixed (atomics of many warps). Call with all 32 lanes of the warp.
__device__ __forceinline__ void WarpHistMassAdd(int* hist, double* mass, int bin, double m) {
  const unsigned peers = __match_any_sync(kFullMask, bin);
  if (!__any_sync(kFullMask, bin >= 0 && __popc(peers) > 1)) {
    if (bin >= 0) {
      atomicAdd(&hist[bin], 1);
      if (m > 0) atomicAdd(&mass[bin], m);
    }
    return;
  }
  const int lane = static_cast<int>(threadIdx.x & 31);
  double sum = bin >= 0 && m > 0 ? m : 0.0;
  const unsigned later = peers & ~((2u << lane) - 1u);  // peers above this lane (lane 31: none)
  int next = later != 0 ? __ffs(later) - 1 : -1;
#pragma unroll
  for (int s = 0; s < 5; ++s) {
    const int src = next >= 0 ? next : lane;
    const double v = __shfl_sync(kFullMask, sum, src);
    const int nn = __shfl_sync(kFullMask, next, src);
    if (next >= 0) {
      sum += v;
      next = nn;
    }
  }
  if (bin >= 0 && lane == __ffs(peers) - 1) {
    atomicAdd(&hist[bin], __popc(peers));
    if (sum > 0) atomicAdd(&mass[bin], sum);
  }
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
    for (int base = tid & ~31; base < n; base += kThreads) {  // warp-uniform trip count
      const int i = base + (tid & 31);
      unsigned long long key;
      const bool in = i < n && key_of(i, &key) && (key & mask) == prefix;
      WarpHistAdd(sm.hist, in ? static_cast<int>((key >> shift) & 255) : -1);
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

// One digit of a mass walk (CtaMassCount, vertical_slash's SelectFlexLinesKernel) once its
// histogram (sm.hist, sm.mass) is complete: warp 0 finds the bin where the remaining target
// t_rem falls (WarpFindMassBin) and publishes it, with the case in sm.all: 1 nothing eligible
// (first digit), 2 target already met (one element), 3 falls short (the whole group), 0 found.
// Every thread calls it; the caller's barrier after it publishes the fields.
__device__ __forceinline__ void MassBinPublish(RadixSmem& sm, int shift, double t_rem) {
  const int tid = threadIdx.x;
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
    for (int base = tid & ~31; base < n; base += kThreads) {  // warp-uniform trip count
      const int i = base + (tid & 31);
      unsigned long long key;
      double m = 0;
      const bool in = i < n && key_mass(i, &key, &m) && (key & mask) == prefix;
      WarpHistMassAdd(sm.hist, sm.mass, in ? static_cast<int>((key >> shift) & 255) : -1, m);
    }
    __syncthreads();
    MassBinPublish(sm, shift, t_rem);
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

// ---- Warp-level versions (one warp per row, no CTA barriers): the same rules as CtaTopKRule,
// CtaApplyRule and CtaMassCount. `hist` / `mass` are the warp's own 256 bins of shared memory.

__device__ __forceinline__ unsigned LaneMaskLt() { return (1u << (threadIdx.x & 31)) - 1u; }

// One level of the warp radix walk, once its 256-bin histogram `hist` is complete: the bin,
// from the top, that holds the k_rem-th largest key (lane: threadIdx.x & 31) (*bin), its count (*bin_count) and the rank
// left inside it (*rem), the same in every lane. false: fewer than k_rem keys counted. Shared by
// WarpTopKRule and block_sparse's BsWarpTopKRule (which differ in how they fill the histogram).
__device__ __forceinline__ bool WarpPickBin(const int* hist, int lane, int k_rem, int* bin,
                                            int* bin_count, int* rem) {
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
  if (total < k_rem) return false;
  const bool mine = excl < k_rem && k_rem <= incl;
  int b_mine = 0, count_mine = 0, rem_mine = 0;
  if (mine) {
    int above = excl;
    for (int t = 0; t < 8; ++t) {
      const int b = 255 - (lane * 8 + t);
      const int h = hist[b];
      if (above + h >= k_rem) {
        b_mine = b;
        count_mine = h;
        rem_mine = k_rem - above;
        break;
      }
      above += h;
    }
  }
  const int src = __ffs(__ballot_sync(kFullMask, mine)) - 1;
  *bin = __shfl_sync(kFullMask, b_mine, src);
  *bin_count = __shfl_sync(kFullMask, count_mine, src);
  *rem = __shfl_sync(kFullMask, rem_mine, src);
  return true;
}

template <class KeyFn>
__device__ TopKRule WarpTopKRule(int n, int k, KeyFn key_of, int* hist) {
  const int lane = threadIdx.x & 31;
  if (k <= 0 || n <= 0) return SelectNone();
  unsigned long long prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) hist[b] = 0;
    __syncwarp();
    for (int base = 0; base < n; base += 32) {
      const int i = base + lane;
      unsigned long long key;
      const bool in = i < n && key_of(i, &key) && (key & mask) == prefix;
      WarpHistAdd(hist, in ? static_cast<int>((key >> shift) & 255) : -1);
    }
    __syncwarp();
    int bin = 0, bin_count = 0, rem = 0;
    if (!WarpPickBin(hist, lane, k_rem, &bin, &bin_count, &rem)) return TopKRule{prefix, mask, INT_MAX};
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
    for (int base = 0; base < n; base += 32) {
      const int i = base + lane;
      unsigned long long key;
      double m = 0;
      const bool in = i < n && key_mass(i, &key, &m) && (key & mask) == prefix;
      WarpHistMassAdd(hist, mass, in ? static_cast<int>((key >> shift) & 255) : -1, m);
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

// The bisection of the top-k-by-bisection selections (CtaTopKByBisection here, Saap's warp
// top-l): the largest float bit pattern t with count_ge(t) >= k, where count_ge(t) counts the
// elements (non-negative floats) whose bits are >= t, so everything above t is taken; *need is
// how many elements equal to t to take too (k - count_ge(t + 1)). 31 counts: count_ge must give
// every caller thread the same answer.
template <class CountGe>
__device__ __forceinline__ uint32_t BisectFloatThreshold(int k, CountGe count_ge, int* need) {
  uint32_t lo = 0u, hi = 0x7f800001u;  // count(>= lo) >= k > count(>= hi)
  while (hi - lo > 1u) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (count_ge(mid) >= k) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  *need = k - count_ge(lo + 1u);
  return lo;
}

// The top `k` of sc[0, n) (non-negative floats, in shared or global memory), ties to the lower
// index, written in index order to out[0, min(k, n)): a bisection on the float bits (31 CTA-wide
// counts), then one pass that ranks the ties. Needs a few words of shared memory, where
// CtaTopKRule needs RadixSmem (3 KB): for kernels whose shared memory holds their tiles (Saap's
// classifier). Every thread of the CTA (kThreads of them) must call it.
template <int kThreads>
__device__ void CtaTopKByBisection(const float* sc, int n, int k, int32_t* out) {
  using IReduce = cub::BlockReduce<int, kThreads>;
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename IReduce::TempStorage red;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int bcast;
  const int tid = threadIdx.x;
  const int per = (n + kThreads - 1) / kThreads;
  const int i0 = min(n, tid * per), i1 = min(n, i0 + per);
  auto count_ge = [&](uint32_t key) {
    int c = 0;
    for (int i = i0; i < i1; ++i) c += __float_as_uint(sc[i]) >= key ? 1 : 0;
    const int total = IReduce(red).Sum(c);
    if (tid == 0) bcast = total;
    __syncthreads();
    const int r = bcast;
    __syncthreads();
    return r;
  };
  int need = 0;  // ties at the threshold to take, lowest first
  const uint32_t lo = BisectFloatThreshold(k, count_ge, &need);
  int my_ties = 0;
  for (int i = i0; i < i1; ++i) my_ties += __float_as_uint(sc[i]) == lo ? 1 : 0;
  int rank = 0;
  Scan(scan).ExclusiveSum(my_ties, rank);
  __syncthreads();
  int my_sel = 0;
  {
    int r = rank;
    for (int i = i0; i < i1; ++i) {
      const uint32_t key = __float_as_uint(sc[i]);
      if (key > lo) {
        ++my_sel;
      } else if (key == lo) {
        my_sel += r < need ? 1 : 0;
        ++r;
      }
    }
  }
  int pos = 0;
  Scan(scan).ExclusiveSum(my_sel, pos);
  __syncthreads();
  int r = rank;
  for (int i = i0; i < i1; ++i) {
    const uint32_t key = __float_as_uint(sc[i]);
    bool take = key > lo;
    if (key == lo) {
      take = r < need;
      ++r;
    }
    if (take) out[pos++] = i;
  }
}

}  // namespace topk
}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_TOPK_CUH_
