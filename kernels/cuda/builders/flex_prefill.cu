// GPU index builder of flex_prefill (FlexPrefill, seed 003), the twin of
// kernels/builders/flex_prefill.cc. The pieces it shares with vertical_slash and block_sparse
// (last-rows estimate, line selection, row merge, pooled keys) live in vertical_slash.cu and
// block_sparse.cu; here are the pattern decision and the query-aware rows.
//
// Query-aware heads with `flatten` keep the fewest (query block, key block) entries of the whole
// normalized block map whose mass reaches gamma of the total, ranked by (probability desc, query
// block asc, key block asc). The map is S/B x S/B per head: instead of storing it, each unit walks
// the probabilities' bits 8 at a time (a radix select by mass): every level recomputes the rows'
// pooled logits and softmax (cheap: S/B x S/B x d) and histograms the next byte of the entries
// still tied with the boundary; a unit stops as soon as its boundary is one entry. Row softmax
// sums are sequential per row, as on the CPU.
#include <algorithm>

#include "kernels/cuda/builders/estimate.cuh"
#include "kernels/cuda/builders/merged_kernels.h"
#include "kernels/cuda/builders/vertical_slash_knobs.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

constexpr int kDecideThreads = 256;
// Largest dynamic shared memory of the decision's kSmem kernel (longer sequences: global scratch).
constexpr int64_t kDecideSmemMax = 192 * 1024;
constexpr int kQaThreads = 256;
constexpr int kMaxGroupRows = 4 * (kQaThreads / 64);

enum QaMode { kStats = 0, kHist = 1, kTies = 2, kCount = 3, kFill = 4 };

// kSmem (session 35, the default where 32 * nk bytes fit): the truth, estimate and term arrays in
// dynamic shared memory instead of the global scratch (p.truth / p.estimate / p.terms), and the
// truth total summed by another warp beside the estimate's sum. The same values, adds and order:
// the three sequential double sums (the CPU twin's order) were one thread's chains of global
// loads, most of the kernel's time.
template <typename T, bool kSmem>
__global__ void __launch_bounds__(kDecideThreads) FlexDecideKernel(FlexParams p) {
  extern __shared__ __align__(16) double decide_smem[];
  using Reduce = cub::BlockReduce<double, kDecideThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  __shared__ float mq[256];
  __shared__ double scalars[4];
  const int tid = threadIdx.x;
  const int unit = blockIdx.x;
  const int slot = unit / p.batch, seq = unit - slot * p.batch;
  const EstimateSeq es = p.est[seq];
  const PooledSeq ps = p.seqs[seq];
  if (es.n == 0) {
    if (tid == 0) p.unit_is_vs[unit] = 0;
    return;
  }
  const int qh = p.slot_head[slot], kvh = qh / p.group;
  const int d = p.head_dim, bs = p.block, nk = ps.nk, n = es.n;
  const double* cols = p.col_sums + slot * p.col_stride + es.col_base;
  const int64_t kb0 = static_cast<int64_t>(slot) * p.total_kb + ps.kb_base;
  double* truth = kSmem ? decide_smem : p.truth + kb0;
  double* est = kSmem ? decide_smem + nk : p.estimate + kb0;
  double* terms = kSmem ? decide_smem + 2 * nk : p.terms + 2 * kb0;
  const float* pk = p.pooled_k + (static_cast<int64_t>(kvh) * p.total_kb + ps.kb_base) * d;

  // True block distribution: the rows' column sums added per key block, in key order.
  // (Session 31: 16-byte loads where the sums are 16-byte aligned, the same adds in the same
  // order; each thread's scalar loads of its own 1 KB fetched every 32-byte sector 4 times.)
  const bool cols16 = reinterpret_cast<uintptr_t>(cols) % 16 == 0 && bs % 2 == 0;
  for (int kb = tid; kb < nk; kb += kDecideThreads) {
    double t = 0;
    const int j1 = min(es.kl, (kb + 1) * bs);
    int j = kb * bs;
    if (cols16) {
      for (; j + 8 <= j1; j += 8) {
        double2 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = *reinterpret_cast<const double2*>(cols + j + 2 * u);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          t += v[u].x;
          t += v[u].y;
        }
      }
    }
    for (; j < j1; ++j) t += cols[j];
    truth[kb] = t;
  }
  // Mean of the representative queries (row order), times scale / n.
  const T* q = static_cast<const T*>(p.q);
  const float factor = __fdiv_rn(p.scale, static_cast<float>(n));
  for (int c = tid; c < d; c += kDecideThreads) {
    float acc = 0.f;
    int i = 0;
    if constexpr (kSmem) {  // 16 rows' loads before their adds (the same adds in order)
      for (; i + 16 <= n; i += 16) {
        float v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          v[j] = LoadAsFloat(q, static_cast<int64_t>(es.q_row0) + i + j, p.q_token_stride, qh,
                             p.q_head_stride, c);
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) acc = __fadd_rn(acc, v[j]);
      }
    }
    for (; i < n; ++i) {
      acc = __fadd_rn(acc, LoadAsFloat(q, static_cast<int64_t>(es.q_row0) + i, p.q_token_stride, qh,
                                       p.q_head_stride, c));
    }
    mq[c] = __fmul_rn(acc, factor);
  }
  __syncthreads();
  // Estimated distribution: softmax of the mean query against every pooled key block (the last
  // row sees all of them).
  double local_max = -CUDART_INF;
  const bool pk16 = reinterpret_cast<uintptr_t>(pk) % 16 == 0 && d % 4 == 0;
  for (int kb = tid; kb < nk; kb += kDecideThreads) {
    float acc = 0.f;
    const float* row = pk + static_cast<int64_t>(kb) * d;
    int c = 0;
    if (pk16) {  // (session 31: 16-byte loads, the same FMA chain)
      for (; c + 8 <= d; c += 8) {
        const float4 x = *reinterpret_cast<const float4*>(row + c);
        const float4 y = *reinterpret_cast<const float4*>(row + c + 4);
        acc = fmaf(mq[c], x.x, acc);
        acc = fmaf(mq[c + 1], x.y, acc);
        acc = fmaf(mq[c + 2], x.z, acc);
        acc = fmaf(mq[c + 3], x.w, acc);
        acc = fmaf(mq[c + 4], y.x, acc);
        acc = fmaf(mq[c + 5], y.y, acc);
        acc = fmaf(mq[c + 6], y.z, acc);
        acc = fmaf(mq[c + 7], y.w, acc);
      }
    }
    for (; c < d; ++c) acc = fmaf(mq[c], row[c], acc);
    const double l = static_cast<double>(SanitizeLogit(acc));
    est[kb] = l;
    local_max = fmax(local_max, l);
  }
  const double mx = Reduce(reduce).Reduce(local_max, [](double a, double b) { return fmax(a, b); });
  if (tid == 0) scalars[0] = mx;
  __syncthreads();
  const double m = scalars[0];
  for (int kb = tid; kb < nk; kb += kDecideThreads) {
    est[kb] = m == -CUDART_INF ? 0.0 : exp(est[kb] - m);
  }
  __syncthreads();
  if (tid == 0) {
    double sum = 0;
#pragma unroll 8
    for (int kb = 0; kb < nk; ++kb) sum += est[kb];
    scalars[1] = sum;
  } else if (kSmem && tid == 32) {  // the truth total does not wait for the estimate
    double sq = 0;
#pragma unroll 8
    for (int kb = 0; kb < nk; ++kb) sq += truth[kb];
    scalars[3] = sq;
  }
  __syncthreads();
  if (m != -CUDART_INF) {
    const double sum = scalars[1];
    for (int kb = tid; kb < nk; kb += kDecideThreads) est[kb] = est[kb] / sum;
  }
  __syncthreads();
  if (tid == 0) {
    double sp = 0, sq = 0;
    if (kSmem) {
#pragma unroll 8
      for (int kb = 0; kb < nk; ++kb) sp += est[kb];
    } else {
      for (int kb = 0; kb < nk; ++kb) {
        sp += est[kb];
        sq += truth[kb];
      }
      scalars[3] = sq;
    }
    scalars[2] = sp;
  }
  __syncthreads();
  const double sp = scalars[2], sq = scalars[3];
  const bool degenerate = !(sp > 0) || !(sq > 0);
  if (!degenerate) {
    for (int kb = tid; kb < nk; kb += kDecideThreads) {
      const double a = est[kb] / sp, b = truth[kb] / sq, mid = 0.5 * (a + b);
      terms[2 * kb] = a > 0 ? 0.5 * a * log(a / mid) : 0.0;
      terms[2 * kb + 1] = b > 0 ? 0.5 * b * log(b / mid) : 0.0;
    }
  }
  __syncthreads();
  if (tid == 0) {
    double js;
    if (degenerate) {
      js = sqrt(log(2.0));
    } else {
      double acc = 0;
#pragma unroll 8
      for (int kb = 0; kb < nk; ++kb) {
        acc += terms[2 * kb];
        acc += terms[2 * kb + 1];
      }
      js = sqrt(fmax(0.0, acc));
    }
    p.unit_is_vs[unit] = js < static_cast<double>(p.tau) ? 0 : 1;
  }
}

struct QaSmem {
  int64_t qs, ks, pv, sel, mem, total;
};

__host__ __device__ inline int64_t Al16(int64_t x) { return (x + 15) / 16 * 16; }

// Shared memory: pooled queries, a chunk of pooled keys, then (unless `global`) the rows'
// probabilities and each warp's two flag arrays. `global`: the last three at the same offsets in
// a per-CTA global slot instead (QaSlotBytes).
__host__ __device__ inline QaSmem QaLayout(int d, int max_rows, int nk_max, bool global) {
  QaSmem l;
  l.qs = 0;
  l.ks = Al16(static_cast<int64_t>(max_rows) * d * 4);
  const int64_t head = l.ks + Al16(static_cast<int64_t>(64) * PooledKeyPitch(d) * 4);
  l.pv = global ? 0 : head;
  l.sel = l.pv + Al16(static_cast<int64_t>(max_rows) * nk_max * 8);
  l.mem = l.sel + Al16(static_cast<int64_t>(kQaThreads / 32) * nk_max);
  const int64_t end = l.mem + Al16(static_cast<int64_t>(kQaThreads / 32) * nk_max);
  l.total = global ? head : end;
  return l;
}

__host__ __device__ inline int64_t QaSlotBytes(int max_rows, int nk_max) {
  const QaSmem l = QaLayout(0, max_rows, nk_max, true);
  return l.mem + Al16(static_cast<int64_t>(kQaThreads / 32) * nk_max);
}

// One group of rows of the query-aware heads in `mode` (see LaunchFlexQaRows). qs / ks in shared
// memory; pv (the rows' probabilities) and the flags in shared or global memory.
template <typename T>
__device__ __forceinline__ void FlexQaGroup(const FlexParams& p, int mode, int level,
                                            const RowGroup grp, float* qs, float* ks, double* pv,
                                            uint8_t* sel_all, uint8_t* mem_all) {
  __shared__ int warp_hist[kQaThreads / 32][256];
  __shared__ double warp_mass[kQaThreads / 32][256];
  __shared__ int hc[256];
  __shared__ double hm[256];
  __shared__ double rmx[kMaxGroupRows], rsum[kMaxGroupRows];
  const int tid = threadIdx.x;

  const int unit = grp.slot * p.batch + grp.seq;
  if (p.unit_is_vs[unit] != 0) return;
  const FlexUnitState st = p.state[unit];
  if (mode == kHist && st.resolved) return;
  if (mode == kTies && !st.needs_ties) return;
  const PooledSeq s = p.seqs[grp.seq];
  const int qh = p.slot_head[grp.slot], kvh = qh / p.group;
  const int bs = p.block, d = p.head_dim, nk = s.nk;
  auto geometry = [&](int r, int* first_pos, int* last_pos, int* key_end) {
    const int q_begin = (grp.first_block + r) * bs;
    const int q_end = min(q_begin + bs, s.ql);
    *first_pos = s.kl - s.ql + q_begin;
    *last_pos = s.kl - s.ql + q_end - 1;
    *key_end = p.causal ? *last_pos + 1 : s.kl;
    return p.causal ? min(nk, *last_pos / bs + 1) : nk;
  };
  auto row_of = [&](int r) {
    return static_cast<int64_t>(grp.slot) * p.num_blocks + s.block_base + grp.first_block + r;
  };

  PoolQueries<T, kQaThreads>(static_cast<const T*>(p.q), p.q_token_stride, qh, p.q_head_stride,
                             s.q_begin, s.ql, grp.first_block, grp.rows, bs, d, p.scale, qs);
  int fp, lp, ke;
  const int vis_max = geometry(grp.rows - 1, &fp, &lp, &ke);
  const float* pk = p.pooled_k + (static_cast<int64_t>(kvh) * p.total_kb + s.kb_base) * d;
  PooledDots<kQaThreads>(qs, grp.rows, d, pk, vis_max, ks,
                         [&](int r, int kb, float l) { pv[r * nk + kb] = static_cast<double>(l); });

  // Row softmax in double (SoftmaxInPlace): max, exp, sequential sum, divide.
  const int warp = tid >> 5, lane = tid & 31;
  if (mode == kStats) {
    for (int r = warp; r < grp.rows; r += kQaThreads / 32) {
      const int vis = geometry(r, &fp, &lp, &ke);
      double m = -CUDART_INF;
      for (int kb = lane; kb < vis; kb += 32) m = fmax(m, pv[r * nk + kb]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(kFullMask, m, o));
      if (lane == 0) rmx[r] = m;
    }
  } else if (tid < grp.rows) {
    rmx[tid] = static_cast<double>(p.row_mx[row_of(tid)]);
    rsum[tid] = p.row_sum[row_of(tid)];
  }
  __syncthreads();
  for (int idx = tid; idx < grp.rows * nk; idx += kQaThreads) {
    const int r = idx / nk, kb = idx - r * nk;
    if (kb < geometry(r, &fp, &lp, &ke)) {
      pv[idx] = rmx[r] == -CUDART_INF ? 0.0 : exp(pv[idx] - rmx[r]);
    }
  }
  __syncthreads();
  if (mode == kStats && tid < grp.rows) {
    const int vis = geometry(tid, &fp, &lp, &ke);
    double sum = 0;
    for (int kb = 0; kb < vis; ++kb) sum += pv[tid * nk + kb];
    rsum[tid] = sum;
    p.row_mx[row_of(tid)] = static_cast<float>(rmx[tid]);
    p.row_sum[row_of(tid)] = sum;
  }
  __syncthreads();
  for (int idx = tid; idx < grp.rows * nk; idx += kQaThreads) {
    const int r = idx / nk, kb = idx - r * nk;
    if (kb < geometry(r, &fp, &lp, &ke) && rmx[r] != -CUDART_INF) pv[idx] = pv[idx] / rsum[r];
  }
  __syncthreads();

  if (mode == kStats || mode == kHist) {
    if (mode == kStats && tid < grp.rows) {
      const int vis = geometry(tid, &fp, &lp, &ke);
      double total = 0;
      for (int kb = 0; kb < vis; ++kb) {
        const double v = pv[tid * nk + kb];
        if (v > 0) total += v;
      }
      p.row_total[row_of(tid)] = total;
    }
    if (!p.flatten) return;
    for (int b = tid; b < 256; b += kQaThreads) {
      hc[b] = 0;
      hm[b] = 0;
    }
    __syncthreads();
    const int shift = 56 - 8 * level;
    const unsigned long long mask = mode == kStats ? 0ull : st.mask;
    const unsigned long long prefix = mode == kStats ? 0ull : st.prefix;
    const int n_all = grp.rows * nk;
    for (int base = tid & ~31; base < n_all; base += kQaThreads) {  // warp-uniform trip count
      const int idx = base + (tid & 31);
      int b = -1;
      double v = 0;
      if (idx < n_all) {
        const int r = idx / nk, kb = idx - r * nk;
        v = kb < geometry(r, &fp, &lp, &ke) ? pv[idx] : 0.0;
        const unsigned long long key = DoubleKey(v);
        if (v > 0 && (key & mask) == prefix) b = static_cast<int>((key >> shift) & 255);
      }
      WarpHistMassAdd(hc, hm, b, v);
    }
    __syncthreads();
    int* gc = p.hist_count + static_cast<int64_t>(unit) * 256;
    double* gm = p.hist_mass + static_cast<int64_t>(unit) * 256;
    for (int b = tid; b < 256; b += kQaThreads) {
      if (hc[b] != 0) {
        atomicAdd(gc + b, hc[b]);
        atomicAdd(gm + b, hm[b]);
      }
    }
    return;
  }

  // One warp per row from here on (no CTA barriers): gamma selection, kept blocks, budgets,
  // runs of blocks.
  constexpr int kWarps = kQaThreads / 32;
  uint8_t* sel = sel_all + static_cast<int64_t>(warp) * p.nk_max;
  uint8_t* mem = mem_all + static_cast<int64_t>(warp) * p.nk_max;
  int* hist = warp_hist[warp];
  double* mass = warp_mass[warp];
  for (int r = warp; r < grp.rows; r += kWarps) {
    int first_pos, last_pos, key_end;
    const int vis = geometry(r, &first_pos, &last_pos, &key_end);
    const double* pr = pv + r * nk;
    const int64_t row = row_of(r);
    if (mode == kTies) {
      int local = 0;
      for (int kb = lane; kb < vis; kb += 32) {
        local += (pr[kb] > 0 && DoubleKey(pr[kb]) == st.prefix) ? 1 : 0;
      }
      const int ties = WarpSum(local);
      if (lane == 0) p.row_ties[row] = ties;
      continue;
    }
    for (int kb = lane; kb < vis; kb += 32) {
      sel[kb] = 0;
      mem[kb] = 0;
    }
    __syncwarp();
    auto key_all = [&](int i, unsigned long long* key) {
      *key = DoubleKey(pr[i]);
      return true;
    };
    if (p.flatten) {
      auto key_pos = [&](int i, unsigned long long* key) {
        if (!(pr[i] > 0)) return false;
        *key = DoubleKey(pr[i]);
        return true;
      };
      const TopKRule rule{st.prefix, st.mask, st.take_eq};
      const int before = st.needs_ties ? p.row_ties[row] : 0;
      WarpApplyRule(
          vis, rule, key_pos, [&](int i, int) { sel[i] = 1; }, before);
    } else {
      auto key_mass = [&](int i, unsigned long long* key, double* m) {
        *key = DoubleKey(pr[i]);
        *m = pr[i];
        return true;
      };
      // The count pass finds k and keeps it for the fill pass: the mass sums use shared-memory
      // atomics, whose order (last bit) may vary between launches.
      int k;
      if (mode == kCount) {
        const double target = static_cast<double>(p.gamma) * p.row_total[row];
        k = WarpMassCount(vis, target, key_mass, hist, mass);
        if (lane == 0) p.row_ties[row] = k;
      } else {
        k = p.row_ties[row];
      }
      const TopKRule rule = WarpTopKRule(vis, k, key_all, hist);
      WarpApplyRule(vis, rule, key_all, [&](int i, int) { sel[i] = 1; });
    }
    __syncwarp();
    // Kept blocks: key block 0 and the blocks holding the row's own positions.
    const int diag_first = first_pos / bs, diag_last = last_pos / bs;
    auto kept = [&](int j) { return j == 0 || (j >= diag_first && j <= diag_last); };
    int local = 0;
    for (int kb = lane; kb < vis; kb += 32) {
      mem[kb] = (sel[kb] != 0 || kept(kb)) ? 1 : 0;
      local += mem[kb];
    }
    int count = WarpSum(local);
    __syncwarp();
    if (count < p.min_blocks) {
      // Best-ranked non-members until the minimum.
      auto key_out = [&](int i, unsigned long long* key) {
        if (mem[i] != 0) return false;
        *key = DoubleKey(pr[i]);
        return true;
      };
      const TopKRule rule = WarpTopKRule(vis, p.min_blocks - count, key_out, hist);
      count += WarpApplyRule(vis, rule, key_out, [&](int i, int) { mem[i] = 1; });
      __syncwarp();
    }
    if (p.max_blocks > 0 && count > p.max_blocks) {
      // Drop the worst-ranked members that are not kept blocks until the maximum.
      local = 0;
      for (int kb = lane; kb < vis; kb += 32) {
        sel[kb] = (mem[kb] != 0 && !kept(kb)) ? 1 : 0;
        local += sel[kb];
      }
      const int removable = WarpSum(local);
      __syncwarp();
      const int keep = max(0, removable - (count - p.max_blocks));
      auto key_rem = [&](int i, unsigned long long* key) {
        if (sel[i] == 0) return false;
        *key = DoubleKey(pr[i]);
        return true;
      };
      const TopKRule rule = WarpTopKRule(vis, keep, key_rem, hist);
      for (int kb = lane; kb < vis; kb += 32) {
        if (sel[kb] != 0) mem[kb] = 0;
      }
      __syncwarp();
      WarpApplyRule(vis, rule, key_rem, [&](int i, int) { mem[i] = 1; });
      __syncwarp();
    }
    const int32_t base = mode == kFill ? p.range_indptr[row] : 0;
    const int n = WarpBlockRuns(mem, vis, bs, key_end,
                                [&](int ri, bool starts, bool ends, int start, int end) {
                                  if (mode != kFill) return;
                                  if (starts) p.range_start[base + ri] = start;
                                  if (ends) p.range_len[base + ri] = end;  // a length below
                                });
    __syncwarp();
    if (mode == kFill) {
      for (int ri = lane; ri < n; ri += 32) {
        p.range_len[base + ri] -= p.range_start[base + ri];
      }
    } else if (lane == 0) {
      p.range_count[row] = n;
      p.col_count[row] = 0;
    }
    __syncwarp();  // sel / mem are reused by the warp's next row
  }
}

// kGlobal = false: one CTA per group, all in shared memory. kGlobal: pv and the flags in the
// CTA's global slot (sequences of more key blocks than shared memory holds), the CTAs walking
// the groups; the same arithmetic and selection either way.
template <typename T, bool kGlobal>
__global__ void __launch_bounds__(kQaThreads) FlexQaRowsKernel(FlexParams p, int mode, int level) {
  extern __shared__ __align__(16) unsigned char smem[];
  const QaSmem lay = QaLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal);
  float* qs = reinterpret_cast<float*>(smem + lay.qs);
  float* ks = reinterpret_cast<float*>(smem + lay.ks);
  // The big arrays: pv, then per warp nk_max selection flags and nk_max membership flags.
  ForEachRowGroup<kGlobal>(
      p.groups, p.num_groups, smem, p.scratch, QaSlotBytes(p.max_rows, p.nk_max),
      [&](const RowGroup grp, unsigned char* big) {
        FlexQaGroup<T>(p, mode, level, grp, qs, ks, reinterpret_cast<double*>(big + lay.pv),
                       big + lay.sel, big + lay.mem);
      });
}

__global__ void FlexQaScanKernel(FlexParams p, int level) {
  const int unit = blockIdx.x;
  const int slot = unit / p.batch, seq = unit - slot * p.batch;
  if (p.est[seq].n == 0 || p.unit_is_vs[unit] != 0) return;
  const int lane = threadIdx.x;
  FlexUnitState* st = p.state + unit;
  int* hc = p.hist_count + static_cast<int64_t>(unit) * 256;
  double* hm = p.hist_mass + static_cast<int64_t>(unit) * 256;
  if (level == 0 && lane == 0) {
    const PooledSeq s = p.seqs[seq];
    const int nq = (s.ql + p.block - 1) / p.block;
    const int64_t row0 = static_cast<int64_t>(slot) * p.num_blocks + s.block_base;
    double total = 0;
    for (int b = 0; b < nq; ++b) total += p.row_total[row0 + b];
    FlexUnitState init;
    init.target = static_cast<double>(p.gamma) * total;
    init.t_rem = init.target;
    init.prefix = 0;
    init.mask = 0;
    init.take_eq = INT_MAX;
    init.resolved = 0;
    init.needs_ties = 0;
    if (!(init.target > 0)) {  // nothing is needed: select none
      init.prefix = ~0ull;
      init.mask = ~0ull;
      init.take_eq = 0;
      init.resolved = 1;
    }
    *st = init;
  }
  __syncwarp();
  if (!st->resolved) {
    const int shift = 56 - 8 * level;
    const MassBin mb = WarpFindMassBin(hc, hm, st->t_rem);
    if (lane == 0) {
      FlexUnitState u = *st;
      if (!mb.found) {
        u.take_eq = INT_MAX;  // falls short: the whole prefix group
        u.resolved = 1;
      } else {
        u.t_rem -= mb.mass_above;
        u.prefix |= static_cast<unsigned long long>(mb.bin) << shift;
        u.mask |= 0xffull << shift;
        if (mb.bin_count == 1) {
          u.take_eq = INT_MAX;
          u.resolved = 1;
        } else if (shift == 0) {
          const double t = KeyToDouble(u.prefix);
          double cum = 0;
          int m = 0;
          while (m < mb.bin_count && cum < u.t_rem) {
            cum += t;
            ++m;
          }
          u.take_eq = m;
          u.resolved = 1;
          u.needs_ties = m < mb.bin_count ? 1 : 0;
        }
      }
      *st = u;
    }
  }
  __syncwarp();
  for (int b = lane; b < 256; b += 32) {
    hc[b] = 0;
    hm[b] = 0;
  }
}

__global__ void FlexTieScanKernel(FlexParams p) {
  const int unit = blockIdx.x * blockDim.x + threadIdx.x;
  if (unit >= p.num_slots * p.batch) return;
  const int slot = unit / p.batch, seq = unit - slot * p.batch;
  if (p.est[seq].n == 0 || p.unit_is_vs[unit] != 0 || !p.state[unit].needs_ties) return;
  const PooledSeq s = p.seqs[seq];
  const int nq = (s.ql + p.block - 1) / p.block;
  const int64_t row0 = static_cast<int64_t>(slot) * p.num_blocks + s.block_base;
  int32_t acc = 0;
  for (int b = 0; b < nq; ++b) {
    const int32_t t = p.row_ties[row0 + b];
    p.row_ties[row0 + b] = acc;
    acc += t;
  }
}

template <typename K>
cudaError_t LaunchWithSmem(K kernel, int grid, int threads, int64_t bytes, cudaStream_t stream,
                           const FlexParams& p, int mode, int level) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  kernel<<<grid, threads, bytes, stream>>>(p, mode, level);
  return cudaGetLastError();
}

template <bool kGlobal>
cudaError_t LaunchQaRows(const FlexParams& p, int mode, int level, cudaStream_t stream) {
  const int64_t bytes = QaLayout(p.head_dim, p.max_rows, p.nk_max, kGlobal).total;
  const int grid = kGlobal ? std::min(p.num_groups, std::max(p.scratch_ctas, 1)) : p.num_groups;
  switch (p.dtype) {
    case DType::kBF16:
      return LaunchWithSmem(FlexQaRowsKernel<__nv_bfloat16, kGlobal>, grid, kQaThreads, bytes,
                            stream, p, mode, level);
    case DType::kF16:
      return LaunchWithSmem(FlexQaRowsKernel<__half, kGlobal>, grid, kQaThreads, bytes, stream, p,
                            mode, level);
    case DType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

// ---- flex_prefill's pooled keys (session 31, s31-flex) ----
// PoolKeysKernel's means (each channel's rows added in row order in float, times 1 / rows: the
// same bits) with two channels a thread (a 4-byte load a row: a warp reads 128 contiguous bytes
// of a key row where PoolKeysKernel's read 64) and kPoolBatch rows' loads issued before their
// adds. Needs even head_dim and strides and a 4-byte aligned K (LaunchFlexPoolKeys falls back to
// LaunchPoolKeys otherwise).
constexpr int kPoolBatch = 16;

template <typename T>
struct PairOf;
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <>
struct PairOf<__half> {
  using type = __half2;
};

template <typename T>
__global__ void __launch_bounds__(256) PoolKeysPairsKernel(PoolKeysParams p) {
  using P2 = typename PairOf<T>::type;
  const T* k = static_cast<const T*>(p.k);
  const int half = p.head_dim / 2;
  const int64_t total = static_cast<int64_t>(p.num_kv_heads) * p.total_kb * half;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = 2 * static_cast<int>(u % half);
    const int64_t hb = u / half;
    const int kb_global = static_cast<int>(hb % p.total_kb);
    const int h = static_cast<int>(hb / p.total_kb);
    int lo = 0, hi = p.batch - 1;  // last sequence whose first key block is <= kb_global
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (p.kb_offsets[mid] <= kb_global) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int seq = lo;
    const int kl = p.cu_k[seq + 1] - p.cu_k[seq];
    const int r0 = (kb_global - p.kb_offsets[seq]) * p.block;
    const int r1 = min(kl, r0 + p.block);
    const T* base = k + (static_cast<int64_t>(p.cu_k[seq]) + r0) * p.k_token_stride +
                    static_cast<int64_t>(h) * p.k_head_stride + c;
    float a0 = 0.f, a1 = 0.f;
    int r = r0;
    for (; r + kPoolBatch <= r1; r += kPoolBatch) {
      P2 v[kPoolBatch];
#pragma unroll
      for (int j = 0; j < kPoolBatch; ++j) {
        v[j] = *reinterpret_cast<const P2*>(base +
                                            static_cast<int64_t>(r - r0 + j) * p.k_token_stride);
      }
#pragma unroll
      for (int j = 0; j < kPoolBatch; ++j) {
        a0 = __fadd_rn(a0, __low2float(v[j]));
        a1 = __fadd_rn(a1, __high2float(v[j]));
      }
    }
    for (; r < r1; ++r) {
      const P2 v =
          *reinterpret_cast<const P2*>(base + static_cast<int64_t>(r - r0) * p.k_token_stride);
      a0 = __fadd_rn(a0, __low2float(v));
      a1 = __fadd_rn(a1, __high2float(v));
    }
    const float inv = __fdiv_rn(1.f, static_cast<float>(r1 - r0));
    p.out[hb * p.head_dim + c] = __fmul_rn(a0, inv);
    p.out[hb * p.head_dim + c + 1] = __fmul_rn(a1, inv);
  }
}

// ---- flex_prefill's CSR scan (session 35, s35-flex) ----
// The exclusive scans of the merge's row counts (range and column, n = rows + 1 entries, the last
// 0) in one launch of one CTA, the two totals (indptr[n - 1]) also written to `totals` (mapped
// pinned host memory): one launch and no copy where main's ScanAndSize ran two device scans and
// two copies to pageable memory, each of which waited for the stream. Integer adds: the same
// indptr whatever the order.
constexpr int kCsrScanThreads = 1024;
constexpr int kCsrScanItems = 8;  // a thread's consecutive entries (one 32-byte sector)

__global__ void __launch_bounds__(kCsrScanThreads)
    FlexCsrScanKernel(const int32_t* __restrict__ rc, const int32_t* __restrict__ cc,
                      int32_t* __restrict__ ri, int32_t* __restrict__ ci, int64_t n,
                      int32_t* totals) {
  using Scan = cub::BlockScan<int, kCsrScanThreads>;
  __shared__ typename Scan::TempStorage tmp_r, tmp_c;
  constexpr int64_t kChunk = static_cast<int64_t>(kCsrScanThreads) * kCsrScanItems;
  const int tid = threadIdx.x;
  int carry_r = 0, carry_c = 0;
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t i0 = base + static_cast<int64_t>(tid) * kCsrScanItems;
    int vr[kCsrScanItems], vc[kCsrScanItems];
    int sr = 0, sc = 0;
#pragma unroll
    for (int j = 0; j < kCsrScanItems; ++j) {
      const bool in = i0 + j < n;
      vr[j] = in ? rc[i0 + j] : 0;
      vc[j] = in ? cc[i0 + j] : 0;
    }
#pragma unroll
    for (int j = 0; j < kCsrScanItems; ++j) {
      sr += vr[j];
      sc += vc[j];
    }
    int er, ec, tr, tc;
    Scan(tmp_r).ExclusiveSum(sr, er, tr);
    Scan(tmp_c).ExclusiveSum(sc, ec, tc);
    int ar = carry_r + er, ac = carry_c + ec;
#pragma unroll
    for (int j = 0; j < kCsrScanItems; ++j) {
      if (i0 + j < n) {
        ri[i0 + j] = ar;
        ci[i0 + j] = ac;
      }
      ar += vr[j];
      ac += vc[j];
    }
    carry_r += tr;
    carry_c += tc;
    __syncthreads();  // the temp storage is reused by the next chunk
  }
  if (tid == 0) {
    // The last entry's exclusive prefix: the totals (the last count is 0).
    totals[0] = carry_r - (n > 0 ? rc[n - 1] : 0);
    totals[1] = carry_c - (n > 0 ? cc[n - 1] : 0);
    __threadfence_system();
  }
}

}  // namespace

cudaError_t LaunchFlexCsrScan(const int32_t* range_count, const int32_t* col_count,
                              int32_t* range_indptr, int32_t* col_indptr, int64_t n,
                              int32_t* totals, cudaStream_t stream) {
  FlexCsrScanKernel<<<1, kCsrScanThreads, 0, stream>>>(range_count, col_count, range_indptr,
                                                       col_indptr, n, totals);
  return cudaGetLastError();
}

int64_t FlexQaSmemBytes(int head_dim, int max_rows, int nk_max, bool global_scratch) {
  return QaLayout(head_dim, max_rows, nk_max, global_scratch).total;
}

int64_t FlexQaScratchBytes(int max_rows, int nk_max) { return QaSlotBytes(max_rows, nk_max); }

cudaError_t LaunchFlexDecide(const FlexParams& p, cudaStream_t stream) {
  const int units = p.num_slots * p.batch;
  if (units == 0) return cudaSuccess;
  if (p.head_dim > 256) return cudaErrorInvalidValue;
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
  // Truth, estimate and two terms per key block: 32 bytes each.
  const int64_t bytes = int64_t{32} * std::max(p.decide_nk, 1);
  if (p.decide_smem && p.decide_nk > 0 && bytes <= kDecideSmemMax) {
    auto kernel = bf16 ? FlexDecideKernel<__nv_bfloat16, true> : FlexDecideKernel<__half, true>;
    if (bytes > 48 * 1024) {
      const cudaError_t err = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
      if (err != cudaSuccess) return err;
    }
    kernel<<<units, kDecideThreads, static_cast<size_t>(bytes), stream>>>(p);
    return cudaGetLastError();
  }
  auto kernel = bf16 ? FlexDecideKernel<__nv_bfloat16, false> : FlexDecideKernel<__half, false>;
  kernel<<<units, kDecideThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchFlexPoolKeys(const PoolKeysParams& p, cudaStream_t stream) {
  const bool pairs = p.head_dim % 2 == 0 && p.k_token_stride % 2 == 0 &&
                     p.k_head_stride % 2 == 0 && reinterpret_cast<uintptr_t>(p.k) % 4 == 0 &&
                     p.dtype != DType::kF32;
  if (!pairs || !EstimateKnobs().flex_pool) return LaunchPoolKeys(p, stream);
  const int64_t n = static_cast<int64_t>(p.num_kv_heads) * p.total_kb * (p.head_dim / 2);
  if (n == 0) return cudaSuccess;
  const int grid =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65535)));
  if (p.dtype == DType::kBF16) {
    PoolKeysPairsKernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(p);
  } else {
    PoolKeysPairsKernel<__half><<<grid, 256, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t LaunchFlexQaRows(const FlexParams& p, int mode, int level, cudaStream_t stream) {
  if (p.num_groups == 0) return cudaSuccess;
  if (p.max_rows > kMaxGroupRows) return cudaErrorInvalidValue;
  return p.scratch != nullptr ? LaunchQaRows<true>(p, mode, level, stream)
                              : LaunchQaRows<false>(p, mode, level, stream);
}

cudaError_t LaunchFlexQaScan(const FlexParams& p, int level, cudaStream_t stream) {
  const int units = p.num_slots * p.batch;
  if (units == 0) return cudaSuccess;
  FlexQaScanKernel<<<units, 32, 0, stream>>>(p, level);
  return cudaGetLastError();
}

cudaError_t LaunchFlexTieScan(const FlexParams& p, cudaStream_t stream) {
  const int units = p.num_slots * p.batch;
  if (units == 0) return cudaSuccess;
  FlexTieScanKernel<<<(units + 127) / 128, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn
