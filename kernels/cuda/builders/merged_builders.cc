#include "kernels/cuda/builders/merged_builders.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/merged_kernels.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/line_merge.h"
#include "kernels/cuda/common/stage_timer.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace cuda {
namespace merged {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Small host arrays gathered into one upload.
class MetaBlob {
 public:
  template <typename T>
  size_t Add(const std::vector<T>& v) {
    const size_t at = (bytes_.size() + 255) / 256 * 256;
    bytes_.resize(at + std::max<size_t>(v.size() * sizeof(T), 1));
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size() * sizeof(T));
    return at;
  }
  absl::Status Upload(WorkspaceCarver& ws, cudaStream_t stream) {
    SPATTN_ASSIGN_OR_RETURN(void* dev,
                            ws.Carve(static_cast<int64_t>(bytes_.size()), "builder metadata"));
    base_ = static_cast<char*>(dev);
    return CudaStatus(
        cudaMemcpyAsync(base_, bytes_.data(), bytes_.size(), cudaMemcpyHostToDevice, stream),
        "builder metadata upload");
  }
  template <typename T>
  T* At(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  std::vector<char> bytes_;
  char* base_ = nullptr;
};

template <typename T>
absl::StatusOr<T*> CarveArray(WorkspaceCarver& ws, int64_t count, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(void* p, ws.Carve(std::max<int64_t>(count, 1) * sizeof(T), what));
  return static_cast<T*>(p);
}

template <typename T>
absl::StatusOr<T*> CarveZeroed(WorkspaceCarver& ws, int64_t count, const char* what,
                               cudaStream_t stream) {
  SPATTN_ASSIGN_OR_RETURN(T * p, CarveArray<T>(ws, count, what));
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p, 0, std::max<int64_t>(count, 1) * sizeof(T), stream), what);
  return p;
}

int MaxSmemOptin() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return 48 * 1024;
  }
  return bytes;
}

// Host geometry shared by the three builders.
struct Plan {
  const AttentionProblem* p = nullptr;
  int batch = 0, slots = 0, block_m = 0, num_blocks = 0;
  std::vector<int32_t> block_offsets;  // [batch + 1]
  int64_t rows() const { return static_cast<int64_t>(slots) * num_blocks; }
};

Plan MakePlan(const AttentionProblem& p, int slots, int block_m) {
  Plan plan;
  plan.p = &p;
  plan.batch = p.batch();
  plan.slots = slots;
  plan.block_m = block_m;
  plan.block_offsets.assign(plan.batch + 1, 0);
  for (int b = 0; b < plan.batch; ++b) {
    plan.block_offsets[b + 1] =
        plan.block_offsets[b] + static_cast<int32_t>(CeilDiv(p.q_len(b), block_m));
  }
  plan.num_blocks = plan.block_offsets[plan.batch];
  return plan;
}

// The last-rows estimate plan: `rows` = last_q (vertical_slash) or block_size (flex_prefill).
struct EstimatePlan {
  std::vector<EstimateSeq> seqs;
  int64_t rows_stride = 0, rowpart_stride = 0, diag_stride = 0, dpart_stride = 0;
  int total_ctas = 0, max_n = 0;
};

EstimatePlan MakeEstimatePlan(const AttentionProblem& p, int rows) {
  EstimatePlan e;
  constexpr int W = kEstKeysPerCta;
  e.seqs.resize(p.batch());
  for (int b = 0; b < p.batch(); ++b) {
    EstimateSeq& s = e.seqs[b];
    const int ql = p.q_len(b), kl = p.k_len(b);
    s.col_base = p.cu_seqlens_k[b];
    s.diag_base = e.diag_stride;
    s.dpart_base = e.dpart_stride;
    s.rowpart_base = e.rowpart_stride;
    s.cta_begin = e.total_ctas;
    s.row_base = static_cast<int32_t>(e.rows_stride);
    s.k_begin = p.cu_seqlens_k[b];
    s.kl = kl;
    if (ql == 0 || kl == 0) continue;
    s.n = std::min(rows, ql);
    s.q_row0 = p.cu_seqlens_q[b] + ql - s.n;
    s.first_pos = kl - s.n;  // = query_pos(b, ql - n)
    const int last_pos = kl - 1;
    s.min_offset = p.causal ? 0 : s.first_pos - (kl - 1);
    s.num_offsets = last_pos - s.min_offset + 1;
    s.ctas = static_cast<int32_t>(CeilDiv(kl, W));
    e.total_ctas += s.ctas;
    e.rows_stride += s.n;
    e.rowpart_stride += static_cast<int64_t>(s.n) * s.ctas;
    e.diag_stride += s.num_offsets;
    e.dpart_stride += static_cast<int64_t>(s.ctas) * (s.n + W - 1);
    e.max_n = std::max(e.max_n, s.n);
  }
  return e;
}

// Device buffers and launches of the estimate (shared by vertical_slash and flex_prefill).
absl::StatusOr<EstimateParams> RunEstimate(const AttentionProblem& p, const AttnParams& a,
                                           const EstimatePlan& e, const EstimateSeq* d_seqs,
                                           const int32_t* d_heads, int slots, WorkspaceCarver& ws,
                                           cudaStream_t stream, StageTimer& timer) {
  EstimateParams ep;
  ep.q = a.q;
  ep.k = a.k;
  ep.q_token_stride = a.q_token_stride;
  ep.q_head_stride = a.q_head_stride;
  ep.k_token_stride = a.k_token_stride;
  ep.k_head_stride = a.k_head_stride;
  ep.dtype = p.dtype;
  ep.head_dim = p.head_dim;
  ep.scale = p.softmax_scale;
  ep.causal = p.causal;
  ep.num_slots = slots;
  ep.slot_head = d_heads;
  ep.group = p.group_size();
  ep.batch = p.batch();
  ep.seqs = d_seqs;
  ep.total_ctas = e.total_ctas;
  ep.max_n = e.max_n;
  ep.rows_stride = e.rows_stride;
  ep.rowpart_stride = e.rowpart_stride;
  ep.col_stride = p.total_k();
  ep.diag_stride = e.diag_stride;
  ep.dpart_stride = e.dpart_stride;
  SPATTN_ASSIGN_OR_RETURN(ep.row_max,
                          CarveZeroed<uint32_t>(ws, slots * e.rows_stride, "row maxima", stream));
  SPATTN_ASSIGN_OR_RETURN(ep.row_part,
                          CarveArray<double>(ws, slots * e.rowpart_stride, "row sums"));
  SPATTN_ASSIGN_OR_RETURN(ep.row_inv, CarveArray<float>(ws, slots * e.rows_stride, "row inv"));
  SPATTN_ASSIGN_OR_RETURN(ep.col_sums,
                          CarveArray<double>(ws, slots * ep.col_stride, "column sums"));
  SPATTN_ASSIGN_OR_RETURN(ep.dpart,
                          CarveArray<double>(ws, slots * e.dpart_stride, "diagonal partials"));
  SPATTN_ASSIGN_OR_RETURN(ep.diag_sums,
                          CarveArray<double>(ws, slots * e.diag_stride, "diagonal sums"));
  if (e.total_ctas == 0 || slots == 0) return ep;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 1, stream), "estimate pass 1");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 2, stream), "estimate pass 2");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimateRowInv(ep, stream), "estimate row sums");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 3, stream), "estimate pass 3");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimateDiagCombine(ep, stream), "estimate diagonals");
  timer.Mark("estimate");
  return ep;
}

// CSR arrays: counts (written by the count pass) → indptr by exclusive scans, then one copy of
// the totals to the host to carve the entry arrays.
struct Csr {
  int32_t* range_count = nullptr;
  int32_t* col_count = nullptr;
  int32_t* range_indptr = nullptr;
  int32_t* col_indptr = nullptr;
  int32_t* range_start = nullptr;
  int32_t* range_len = nullptr;
  int32_t* col_idx = nullptr;
  int32_t total_ranges = 0, total_cols = 0;
};

absl::StatusOr<Csr> CarveCounts(int64_t rows, WorkspaceCarver& ws, cudaStream_t stream) {
  Csr c;
  SPATTN_ASSIGN_OR_RETURN(c.range_count,
                          CarveZeroed<int32_t>(ws, rows + 1, "range counts", stream));
  SPATTN_ASSIGN_OR_RETURN(c.col_count, CarveZeroed<int32_t>(ws, rows + 1, "column counts", stream));
  SPATTN_ASSIGN_OR_RETURN(c.range_indptr, CarveArray<int32_t>(ws, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(c.col_indptr, CarveArray<int32_t>(ws, rows + 1, "col_indptr"));
  return c;
}

absl::Status ScanAndSize(int64_t rows, Csr* c, WorkspaceCarver& ws, cudaStream_t stream,
                         bool with_cols) {
  const size_t temp_bytes = ScanTempBytes(rows + 1);
  SPATTN_ASSIGN_OR_RETURN(void* temp, ws.Carve(static_cast<int64_t>(temp_bytes) + 1, "scan"));
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchExclusiveScan(c->range_count, c->range_indptr, rows + 1, temp, temp_bytes, stream),
      "range scan");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchExclusiveScan(c->col_count, c->col_indptr, rows + 1, temp, temp_bytes, stream),
      "column scan");
  int32_t totals[2] = {0, 0};
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[0], c->range_indptr + rows, 4, cudaMemcpyDeviceToHost, stream),
      "range total");
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[1], c->col_indptr + rows, 4, cudaMemcpyDeviceToHost, stream),
      "column total");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "index count pass");
  if (totals[0] < 0 || totals[1] < 0) {
    return absl::InternalError("index builder: negative entry count");
  }
  c->total_ranges = totals[0];
  c->total_cols = totals[1];
  SPATTN_ASSIGN_OR_RETURN(c->range_start, CarveArray<int32_t>(ws, totals[0], "range_start"));
  SPATTN_ASSIGN_OR_RETURN(c->range_len, CarveArray<int32_t>(ws, totals[0], "range_len"));
  if (with_cols) {
    SPATTN_ASSIGN_OR_RETURN(c->col_idx, CarveArray<int32_t>(ws, totals[1], "col_idx"));
  } else {
    SPATTN_ASSIGN_OR_RETURN(c->col_idx, CarveArray<int32_t>(ws, 1, "col_idx"));
  }
  return absl::OkStatus();
}

// Column runs and offset clusters of the selected lines (MergeParams' groups).
absl::Status GroupLines(MergeParams* mp, int slots, int64_t cols_stride, int64_t offs_stride,
                        WorkspaceCarver& ws, cudaStream_t stream) {
  const int64_t units = static_cast<int64_t>(slots) * mp->batch;
  SPATTN_ASSIGN_OR_RETURN(int32_t * runs,
                          CarveArray<int32_t>(ws, 2 * slots * cols_stride, "column runs"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * full,
                          CarveArray<int32_t>(ws, 2 * slots * offs_stride, "offset clusters"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * last,
                          CarveArray<int32_t>(ws, 2 * slots * offs_stride, "offset clusters"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * counts, CarveArray<int32_t>(ws, 3 * units, "group counts"));
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchGroupLines(*mp, runs, full, last, counts, counts + units, counts + 2 * units, stream),
      "group lines");
  mp->col_runs = runs;
  mp->clusters_full = full;
  mp->clusters_last = last;
  mp->unit_nruns = counts;
  mp->unit_ncl_full = counts + units;
  mp->unit_ncl_last = counts + 2 * units;
  return absl::OkStatus();
}

SparseIndexView ViewOf(const Plan& plan, const int32_t* d_heads, const int32_t* d_offsets,
                       const Csr& c) {
  SparseIndexView v;
  v.block_m = plan.block_m;
  v.num_heads = plan.slots;
  v.num_blocks = plan.num_blocks;
  v.heads = d_heads;
  v.block_offsets = d_offsets;
  v.range_indptr = c.range_indptr;
  v.range_start = c.range_start;
  v.range_len = c.range_len;
  v.col_indptr = c.col_indptr;
  v.col_idx = c.col_idx;
  return v;
}

// Pooled geometry (block_sparse, flex_prefill).
struct PooledPlan {
  std::vector<PooledSeq> seqs;
  std::vector<int32_t> kb_offsets;  // [batch + 1]
  int total_kb = 0, nk_max = 0;
};

PooledPlan MakePooledPlan(const AttentionProblem& p, const Plan& plan, int block) {
  PooledPlan pp;
  pp.seqs.resize(plan.batch);
  pp.kb_offsets.assign(plan.batch + 1, 0);
  for (int b = 0; b < plan.batch; ++b) {
    PooledSeq& s = pp.seqs[b];
    s.q_begin = p.cu_seqlens_q[b];
    s.ql = p.q_len(b);
    s.kl = p.k_len(b);
    s.nk = static_cast<int32_t>(CeilDiv(s.kl, block));
    s.kb_base = pp.total_kb;
    s.block_base = plan.block_offsets[b];
    pp.total_kb += s.nk;
    pp.kb_offsets[b + 1] = pp.total_kb;
    if (s.ql > 0) pp.nk_max = std::max(pp.nk_max, static_cast<int>(s.nk));
  }
  return pp;
}

std::vector<RowGroup> MakeGroups(const Plan& plan, const PooledPlan& pp, int rows_per_group) {
  std::vector<RowGroup> groups;
  for (int slot = 0; slot < plan.slots; ++slot) {
    for (int b = 0; b < plan.batch; ++b) {
      const int nq = plan.block_offsets[b + 1] - plan.block_offsets[b];
      for (int first = 0; first < nq; first += rows_per_group) {
        RowGroup g;
        g.slot = slot;
        g.seq = b;
        g.first_block = first;
        g.rows = std::min(rows_per_group, nq - first);
        groups.push_back(g);
      }
    }
  }
  return groups;
}

// The most rows per group whose shared memory fits the device.
template <class Bytes>
absl::StatusOr<int> RowsPerGroup(int nk_max, Bytes bytes, int static_bytes, const char* param) {
  const int64_t budget = MaxSmemOptin() - static_bytes;
  int rows = 0;
  for (int r = kMaxRowsPerGroup; r >= 1; --r) {
    if (bytes(r) <= budget) {
      rows = r;
      break;
    }
  }
  if (rows == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens_k: a sequence of ", nk_max, " key blocks of ", param,
                     " is too long for the GPU index builder's shared memory"));
  }
  return rows;
}

absl::StatusOr<float*> PoolKeysOnDevice(const AttentionProblem& p, const AttnParams& a,
                                        const PooledPlan& pp, const int32_t* d_kb_offsets,
                                        int block, WorkspaceCarver& ws, cudaStream_t stream) {
  PoolKeysParams k;
  k.k = a.k;
  k.k_token_stride = a.k_token_stride;
  k.k_head_stride = a.k_head_stride;
  k.dtype = p.dtype;
  k.head_dim = p.head_dim;
  k.num_kv_heads = p.num_kv_heads;
  k.block = block;
  k.batch = p.batch();
  k.cu_k = a.cu_seqlens_k;
  k.kb_offsets = d_kb_offsets;
  k.total_kb = pp.total_kb;
  SPATTN_ASSIGN_OR_RETURN(
      k.out, CarveArray<float>(ws, static_cast<int64_t>(p.num_kv_heads) * pp.total_kb * p.head_dim,
                               "pooled keys"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchPoolKeys(k, stream), "pool keys");
  return k.out;
}

// ---- vertical_slash

absl::StatusOr<SparseIndexView> BuildVerticalSlash(const AttentionProblem& p, const AttnParams& a,
                                                   const VerticalSlashParams& vs,
                                                   const std::vector<int>& heads,
                                                   const int32_t* d_heads, int block_m,
                                                   WorkspaceCarver& ws, cudaStream_t stream,
                                                   StageTimer& timer) {
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), block_m);
  const EstimatePlan e = MakeEstimatePlan(p, vs.last_q);
  std::vector<LineSeq> lines(plan.batch);
  int64_t cols_stride = 0, offs_stride = 0;
  for (int b = 0; b < plan.batch; ++b) {
    const EstimateSeq& s = e.seqs[b];
    LineSeq& l = lines[b];
    l.col_base = cols_stride;
    l.off_base = offs_stride;
    if (s.n == 0) continue;
    const int forced_cols = std::min(vs.forced_columns, s.kl);
    l.forced_col_end = forced_cols;
    l.col_k = std::min(std::max(vs.vertical_size, forced_cols), s.kl);
    int lo = 0, hi = 0;
    const int forced_offs = line_merge::ForcedOffsets(vs.forced_diagonals, s.min_offset,
                                                      s.min_offset + s.num_offsets - 1, &lo, &hi);
    l.forced_off_lo = lo - s.min_offset;
    l.forced_off_hi = hi - s.min_offset;
    l.off_k = std::min(std::max(vs.slash_size, forced_offs), s.num_offsets);
    cols_stride += l.col_k;
    offs_stride += l.off_k;
  }
  std::vector<int64_t> unit_col_base(static_cast<size_t>(plan.slots) * plan.batch);
  std::vector<int64_t> unit_off_base(unit_col_base.size());
  for (int slot = 0; slot < plan.slots; ++slot) {
    for (int b = 0; b < plan.batch; ++b) {
      unit_col_base[slot * plan.batch + b] = slot * cols_stride + lines[b].col_base;
      unit_off_base[slot * plan.batch + b] = slot * offs_stride + lines[b].off_base;
    }
  }
  MetaBlob blob;
  const size_t o_seqs = blob.Add(e.seqs);
  const size_t o_lines = blob.Add(lines);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  const size_t o_ucol = blob.Add(unit_col_base);
  const size_t o_uoff = blob.Add(unit_off_base);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);

  SPATTN_ASSIGN_OR_RETURN(EstimateParams ep, RunEstimate(p, a, e, blob.At<EstimateSeq>(o_seqs),
                                                         d_heads, plan.slots, ws, stream, timer));
  LineSelectParams lp;
  lp.num_slots = plan.slots;
  lp.batch = plan.batch;
  lp.seqs = ep.seqs;
  lp.lines = blob.At<LineSeq>(o_lines);
  lp.col_sums = ep.col_sums;
  lp.diag_sums = ep.diag_sums;
  lp.col_stride = ep.col_stride;
  lp.diag_stride = ep.diag_stride;
  lp.cols_stride = cols_stride;
  lp.offs_stride = offs_stride;
  SPATTN_ASSIGN_OR_RETURN(lp.line_cols,
                          CarveArray<int32_t>(ws, plan.slots * cols_stride, "selected columns"));
  SPATTN_ASSIGN_OR_RETURN(lp.line_offs,
                          CarveArray<int32_t>(ws, plan.slots * offs_stride, "selected diagonals"));
  const int64_t units = static_cast<int64_t>(plan.slots) * plan.batch;
  SPATTN_ASSIGN_OR_RETURN(lp.unit_ncols, CarveArray<int32_t>(ws, units, "column counts"));
  SPATTN_ASSIGN_OR_RETURN(lp.unit_noffs, CarveArray<int32_t>(ws, units, "diagonal counts"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSelectLines(lp, stream), "select lines");
  timer.Mark("select");

  SPATTN_ASSIGN_OR_RETURN(Csr csr, CarveCounts(plan.rows(), ws, stream));
  MergeParams mp;
  mp.num_slots = plan.slots;
  mp.batch = plan.batch;
  mp.num_blocks = plan.num_blocks;
  mp.block_m = block_m;
  mp.causal = p.causal;
  mp.cu_q = a.cu_seqlens_q;
  mp.cu_k = a.cu_seqlens_k;
  mp.block_offsets = d_offsets;
  mp.line_cols = lp.line_cols;
  mp.line_offs = lp.line_offs;
  mp.unit_col_base = blob.At<int64_t>(o_ucol);
  mp.unit_off_base = blob.At<int64_t>(o_uoff);
  mp.unit_ncols = lp.unit_ncols;
  mp.unit_noffs = lp.unit_noffs;
  mp.range_count = csr.range_count;
  mp.col_count = csr.col_count;
  SPATTN_RETURN_IF_ERROR(GroupLines(&mp, plan.slots, cols_stride, offs_stride, ws, stream));
  timer.Mark("group");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/false, stream), "merge rows (count)");
  timer.Mark("merge_count");
  SPATTN_RETURN_IF_ERROR(ScanAndSize(plan.rows(), &csr, ws, stream, /*with_cols=*/true));
  timer.Mark("scan_sync");
  mp.range_indptr = csr.range_indptr;
  mp.col_indptr = csr.col_indptr;
  mp.range_start = csr.range_start;
  mp.range_len = csr.range_len;
  mp.col_idx = csr.col_idx;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/true, stream), "merge rows (fill)");
  timer.Mark("merge_fill");
  return ViewOf(plan, d_heads, d_offsets, csr);
}

// ---- block_sparse

absl::StatusOr<SparseIndexView> BuildBlockSparse(const AttentionProblem& p, const AttnParams& a,
                                                 const ::spattn::BlockSparseParams& bsp,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, WorkspaceCarver& ws,
                                                 cudaStream_t stream, StageTimer& timer) {
  const int bs = bsp.block_size;
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), bs);
  const PooledPlan pp = MakePooledPlan(p, plan, bs);
  int rows_per_group = 1;
  if (pp.nk_max > 0) {
    SPATTN_ASSIGN_OR_RETURN(
        rows_per_group,
        RowsPerGroup(
            pp.nk_max, [&](int r) { return BlockSparseSmemBytes(p.head_dim, r, pp.nk_max); },
            16 * 1024, "block_sparse.block_size"));
  }
  const std::vector<RowGroup> groups = MakeGroups(plan, pp, rows_per_group);
  MetaBlob blob;
  const size_t o_seqs = blob.Add(pp.seqs);
  const size_t o_kb = blob.Add(pp.kb_offsets);
  const size_t o_groups = blob.Add(groups);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);
  SPATTN_ASSIGN_OR_RETURN(float* pooled_k,
                          PoolKeysOnDevice(p, a, pp, blob.At<int32_t>(o_kb), bs, ws, stream));
  BlockRowsParams k;
  k.q = a.q;
  k.q_token_stride = a.q_token_stride;
  k.q_head_stride = a.q_head_stride;
  k.dtype = p.dtype;
  k.head_dim = p.head_dim;
  k.scale = p.softmax_scale;
  k.causal = p.causal;
  k.block = bs;
  k.top_k = bsp.top_k;
  k.slot_head = d_heads;
  k.group = p.group_size();
  k.batch = plan.batch;
  k.num_blocks = plan.num_blocks;
  k.seqs = blob.At<PooledSeq>(o_seqs);
  k.pooled_k = pooled_k;
  k.total_kb = pp.total_kb;
  k.groups = blob.At<RowGroup>(o_groups);
  k.num_groups = static_cast<int>(groups.size());
  k.max_rows = rows_per_group;
  k.nk_max = std::max(pp.nk_max, 1);
  k.cap = std::max(1, std::min(std::max(bsp.top_k, 2), k.nk_max));
  SPATTN_ASSIGN_OR_RETURN(Csr csr, CarveCounts(plan.rows(), ws, stream));
  SPATTN_ASSIGN_OR_RETURN(k.tmp_start, CarveArray<int32_t>(ws, plan.rows() * k.cap, "range slots"));
  SPATTN_ASSIGN_OR_RETURN(k.tmp_end, CarveArray<int32_t>(ws, plan.rows() * k.cap, "range slots"));
  k.range_count = csr.range_count;
  timer.Mark("pool_keys");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchBlockSparseRows(k, stream), "block_sparse rows");
  timer.Mark("rows");
  SPATTN_RETURN_IF_ERROR(ScanAndSize(plan.rows(), &csr, ws, stream, /*with_cols=*/false));
  timer.Mark("scan_sync");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchCompactRanges(k.tmp_start, k.tmp_end, k.cap, plan.rows(), csr.range_indptr,
                          csr.range_start, csr.range_len, stream),
      "compact ranges");
  timer.Mark("compact");
  return ViewOf(plan, d_heads, d_offsets, csr);
}

// ---- flex_prefill

absl::StatusOr<SparseIndexView> BuildFlexPrefill(const AttentionProblem& p, const AttnParams& a,
                                                 const FlexPrefillParams& fp,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, WorkspaceCarver& ws,
                                                 cudaStream_t stream, StageTimer& timer) {
  const int bs = fp.block_size;
  const Plan plan = MakePlan(p, static_cast<int>(heads.size()), bs);
  const PooledPlan pp = MakePooledPlan(p, plan, bs);
  const EstimatePlan e = MakeEstimatePlan(p, bs);
  int rows_per_group = 1;
  if (pp.nk_max > 0) {
    SPATTN_ASSIGN_OR_RETURN(
        rows_per_group,
        RowsPerGroup(
            pp.nk_max, [&](int r) { return FlexQaSmemBytes(p.head_dim, r, pp.nk_max); }, 32 * 1024,
            "flex_prefill.block_size"));
  }
  const std::vector<RowGroup> groups = MakeGroups(plan, pp, rows_per_group);
  // Lines: every column and offset may be kept (budgets are found on the device).
  std::vector<LineSeq> lines(plan.batch);
  for (int b = 0; b < plan.batch; ++b) {
    lines[b].col_base = e.seqs[b].col_base;
    lines[b].off_base = e.seqs[b].diag_base;
  }
  const int64_t cols_stride = p.total_k(), offs_stride = e.diag_stride;
  std::vector<int64_t> unit_col_base(static_cast<size_t>(plan.slots) * plan.batch);
  std::vector<int64_t> unit_off_base(unit_col_base.size());
  for (int slot = 0; slot < plan.slots; ++slot) {
    for (int b = 0; b < plan.batch; ++b) {
      unit_col_base[slot * plan.batch + b] = slot * cols_stride + lines[b].col_base;
      unit_off_base[slot * plan.batch + b] = slot * offs_stride + lines[b].off_base;
    }
  }
  MetaBlob blob;
  const size_t o_est = blob.Add(e.seqs);
  const size_t o_lines = blob.Add(lines);
  const size_t o_pseqs = blob.Add(pp.seqs);
  const size_t o_kb = blob.Add(pp.kb_offsets);
  const size_t o_groups = blob.Add(groups);
  const size_t o_offsets = blob.Add(plan.block_offsets);
  const size_t o_ucol = blob.Add(unit_col_base);
  const size_t o_uoff = blob.Add(unit_off_base);
  SPATTN_RETURN_IF_ERROR(blob.Upload(ws, stream));
  const int32_t* d_offsets = blob.At<int32_t>(o_offsets);
  const int64_t units = static_cast<int64_t>(plan.slots) * plan.batch;
  const int64_t rows = plan.rows();

  SPATTN_ASSIGN_OR_RETURN(float* pooled_k,
                          PoolKeysOnDevice(p, a, pp, blob.At<int32_t>(o_kb), bs, ws, stream));
  SPATTN_ASSIGN_OR_RETURN(EstimateParams ep, RunEstimate(p, a, e, blob.At<EstimateSeq>(o_est),
                                                         d_heads, plan.slots, ws, stream, timer));
  FlexParams f;
  f.q = a.q;
  f.q_token_stride = a.q_token_stride;
  f.q_head_stride = a.q_head_stride;
  f.dtype = p.dtype;
  f.head_dim = p.head_dim;
  f.scale = p.softmax_scale;
  f.causal = p.causal;
  f.block = bs;
  f.gamma = fp.gamma;
  f.tau = fp.tau;
  f.min_blocks = static_cast<int>(CeilDiv(fp.min_budget, bs));
  f.max_blocks = fp.max_budget > 0 ? static_cast<int>(CeilDiv(fp.max_budget, bs)) : 0;
  f.flatten = fp.flatten;
  f.slot_head = d_heads;
  f.group = p.group_size();
  f.num_slots = plan.slots;
  f.batch = plan.batch;
  f.num_blocks = plan.num_blocks;
  f.seqs = blob.At<PooledSeq>(o_pseqs);
  f.est = ep.seqs;
  f.pooled_k = pooled_k;
  f.total_kb = pp.total_kb;
  f.col_sums = ep.col_sums;
  f.col_stride = ep.col_stride;
  const int64_t kb_all = static_cast<int64_t>(plan.slots) * pp.total_kb;
  SPATTN_ASSIGN_OR_RETURN(f.truth, CarveArray<double>(ws, kb_all, "flex truth"));
  SPATTN_ASSIGN_OR_RETURN(f.estimate, CarveArray<double>(ws, kb_all, "flex estimate"));
  SPATTN_ASSIGN_OR_RETURN(f.terms, CarveArray<double>(ws, 2 * kb_all, "flex js terms"));
  SPATTN_ASSIGN_OR_RETURN(f.unit_is_vs, CarveZeroed<uint8_t>(ws, units, "flex decisions", stream));
  f.groups = blob.At<RowGroup>(o_groups);
  f.num_groups = static_cast<int>(groups.size());
  f.max_rows = rows_per_group;
  f.nk_max = std::max(pp.nk_max, 1);
  SPATTN_ASSIGN_OR_RETURN(f.row_mx, CarveArray<float>(ws, rows, "flex row max"));
  SPATTN_ASSIGN_OR_RETURN(f.row_sum, CarveArray<double>(ws, rows, "flex row sums"));
  SPATTN_ASSIGN_OR_RETURN(f.row_total, CarveArray<double>(ws, rows, "flex row totals"));
  SPATTN_ASSIGN_OR_RETURN(f.row_ties, CarveZeroed<int32_t>(ws, rows, "flex ties", stream));
  SPATTN_ASSIGN_OR_RETURN(f.hist_count,
                          CarveZeroed<int>(ws, units * 256, "flex histogram", stream));
  SPATTN_ASSIGN_OR_RETURN(f.hist_mass,
                          CarveZeroed<double>(ws, units * 256, "flex histogram", stream));
  SPATTN_ASSIGN_OR_RETURN(f.state,
                          CarveZeroed<FlexUnitState>(ws, units, "flex unit state", stream));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexDecide(f, stream), "flex decision");
  timer.Mark("decide");

  LineSelectParams lp;
  lp.num_slots = plan.slots;
  lp.batch = plan.batch;
  lp.seqs = ep.seqs;
  lp.lines = blob.At<LineSeq>(o_lines);
  lp.col_sums = ep.col_sums;
  lp.diag_sums = ep.diag_sums;
  lp.col_stride = ep.col_stride;
  lp.diag_stride = ep.diag_stride;
  lp.cols_stride = cols_stride;
  lp.offs_stride = offs_stride;
  SPATTN_ASSIGN_OR_RETURN(lp.line_cols,
                          CarveArray<int32_t>(ws, plan.slots * cols_stride, "selected columns"));
  SPATTN_ASSIGN_OR_RETURN(lp.line_offs,
                          CarveArray<int32_t>(ws, plan.slots * offs_stride, "selected diagonals"));
  SPATTN_ASSIGN_OR_RETURN(lp.unit_ncols, CarveArray<int32_t>(ws, units, "column counts"));
  SPATTN_ASSIGN_OR_RETURN(lp.unit_noffs, CarveArray<int32_t>(ws, units, "diagonal counts"));
  lp.flex = true;
  lp.gamma = fp.gamma;
  lp.min_budget = fp.min_budget;
  lp.max_budget = fp.max_budget;
  lp.unit_is_vs = f.unit_is_vs;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchSelectLines(lp, stream), "flex lines");
  timer.Mark("select");

  // Query-aware heads: row statistics, then the flattened selection's levels.
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 0, 0, stream), "flex rows (stats)");
  timer.Mark("qa_stats");
  if (fp.flatten) {
    for (int level = 0; level < kFlexLevels; ++level) {
      SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaScan(f, level, stream), "flex scan");
      if (level + 1 < kFlexLevels) {
        SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 1, level + 1, stream),
                                    "flex rows (histogram)");
      }
    }
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 2, 0, stream), "flex rows (ties)");
    SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexTieScan(f, stream), "flex tie ranks");
  }
  timer.Mark("qa_levels");

  SPATTN_ASSIGN_OR_RETURN(Csr csr, CarveCounts(rows, ws, stream));
  MergeParams mp;
  mp.num_slots = plan.slots;
  mp.batch = plan.batch;
  mp.num_blocks = plan.num_blocks;
  mp.block_m = bs;
  mp.causal = p.causal;
  mp.cu_q = a.cu_seqlens_q;
  mp.cu_k = a.cu_seqlens_k;
  mp.block_offsets = d_offsets;
  mp.line_cols = lp.line_cols;
  mp.line_offs = lp.line_offs;
  mp.unit_col_base = blob.At<int64_t>(o_ucol);
  mp.unit_off_base = blob.At<int64_t>(o_uoff);
  mp.unit_ncols = lp.unit_ncols;
  mp.unit_noffs = lp.unit_noffs;
  mp.maybe_unit_is_vs = f.unit_is_vs;
  mp.kept_block = bs;
  mp.range_count = csr.range_count;
  mp.col_count = csr.col_count;
  f.range_count = csr.range_count;
  f.col_count = csr.col_count;
  SPATTN_RETURN_IF_ERROR(GroupLines(&mp, plan.slots, cols_stride, offs_stride, ws, stream));
  timer.Mark("group");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/false, stream),
                              "flex merge rows (count)");
  timer.Mark("merge_count");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 3, 0, stream), "flex rows (count)");
  timer.Mark("qa_count");
  SPATTN_RETURN_IF_ERROR(ScanAndSize(rows, &csr, ws, stream, /*with_cols=*/true));
  timer.Mark("scan_sync");
  mp.range_indptr = csr.range_indptr;
  mp.col_indptr = csr.col_indptr;
  mp.range_start = csr.range_start;
  mp.range_len = csr.range_len;
  mp.col_idx = csr.col_idx;
  f.range_indptr = csr.range_indptr;
  f.range_start = csr.range_start;
  f.range_len = csr.range_len;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/true, stream), "flex merge rows (fill)");
  timer.Mark("merge_fill");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchFlexQaRows(f, 4, 0, stream), "flex rows (fill)");
  timer.Mark("qa_fill");
  return ViewOf(plan, d_heads, d_offsets, csr);
}

}  // namespace

bool IsMergedBuilderMethod(Method method) {
  return method == Method::kVerticalSlash || method == Method::kBlockSparse ||
         method == Method::kFlexPrefill;
}

int IndexBlockM(const MethodConfig& config, int block_m) {
  switch (config.method) {
    case Method::kBlockSparse:
      return config.block_sparse.block_size;
    case Method::kFlexPrefill:
      return config.flex_prefill.block_size;
    default:
      return block_m;
  }
}

absl::Status CheckMergedBuilder(const AttentionProblem& problem, const MethodConfig& config,
                                int block_m) {
  if (problem.dtype != DType::kBF16 && problem.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: the GPU index builders take bf16 or fp16, got ", DTypeName(problem.dtype)));
  }
  if (problem.head_dim != 64 && problem.head_dim != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim: the GPU index builders support 64 and 128, got ", problem.head_dim));
  }
  if (block_m <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_m must be > 0, got ", block_m));
  }
  if (config.method == Method::kVerticalSlash && config.vertical_slash.last_q > kMaxEstimateRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("vertical_slash.last_q: the GPU index builder takes at most ",
                     kMaxEstimateRows, " rows, got ", config.vertical_slash.last_q));
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseIndexView> BuildMergedIndex(const AttentionProblem& problem,
                                                 const AttnParams& a, const MethodConfig& config,
                                                 const std::vector<int>& heads,
                                                 const int32_t* d_heads, int block_m,
                                                 WorkspaceCarver& workspace, cudaStream_t stream) {
  SPATTN_RETURN_IF_ERROR(CheckMergedBuilder(problem, config, block_m));
  StageTimer timer(stream, MethodName(config.method));
  switch (config.method) {
    case Method::kVerticalSlash:
      return BuildVerticalSlash(problem, a, config.vertical_slash, heads, d_heads, block_m,
                                workspace, stream, timer);
    case Method::kBlockSparse:
      return BuildBlockSparse(problem, a, config.block_sparse, heads, d_heads, workspace, stream,
                              timer);
    case Method::kFlexPrefill:
      return BuildFlexPrefill(problem, a, config.flex_prefill, heads, d_heads, workspace, stream,
                              timer);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("method ", MethodName(config.method), " is not built by BuildMergedIndex"));
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn
