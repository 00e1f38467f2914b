#include "kernels/cuda/builders/builder_steps.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

namespace spattn {
namespace cuda {

absl::StatusOr<const int32_t*> UploadHeads(const BuildScope& scope, const std::vector<int>& heads) {
  const std::vector<int32_t> heads32(heads.begin(), heads.end());
  SPATTN_ASSIGN_OR_RETURN(int32_t * d, CarveKept<int32_t>(scope, heads32.size(), "index.heads"));
  if (!heads32.empty()) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d, heads32.data(), heads32.size() * 4,
                                                cudaMemcpyHostToDevice, scope.stream),
                                "index.heads");
  }
  return d;
}

MappedWords::~MappedWords() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

bool MappedWords::Get(void** host, void** dev) {
  if (host_ == nullptr && !failed_) {
    if (cudaHostAlloc(&host_, 64, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
        cudaHostGetDevicePointer(&dev_, host_, 0) != cudaSuccess) {
      if (host_ != nullptr) cudaFreeHost(host_);
      host_ = nullptr;
      dev_ = nullptr;
      failed_ = true;
      (void)cudaGetLastError();
    }
  }
  *host = host_;
  *dev = dev_;
  return host_ != nullptr;
}

PinnedBuffer::~PinnedBuffer() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

char* PinnedBuffer::Get(size_t bytes, size_t min_bytes) {
  if (bytes > cap_) {
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = nullptr;
    cap_ = 0;
    const size_t cap = std::max(min_bytes, bytes + bytes / 2);
    void* h = nullptr;
    if (cudaHostAlloc(&h, cap, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    host_ = static_cast<char*>(h);
    cap_ = cap;
  }
  return host_;
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

namespace merged {

int GlobalScratchCtas(int64_t groups) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    sms = 32;
  }
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, 2 * int64_t{sms})));
}

absl::Status CarveRowScratch(const BuildScope& ws, int num_groups, int64_t slot_bytes,
                             const char* what, unsigned char** scratch, int* ctas) {
  *ctas = GlobalScratchCtas(num_groups);
  SPATTN_ASSIGN_OR_RETURN(*scratch, Carve<unsigned char>(ws, *ctas * slot_bytes, what));
  return absl::OkStatus();
}

}  // namespace merged

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

absl::Status StartAssembly(const BuildScope& env, const Layout& l, SparseIndexView* v,
                           AsmOut* out) {
  const int64_t rows = static_cast<int64_t>(l.host.num_heads()) * l.host.num_blocks();
  v->block_m = l.host.block_m;
  v->num_heads = l.host.num_heads();
  v->num_blocks = l.host.num_blocks();
  MetaBlob blob;  // one pageable copy instead of two, where the index is kept
  const size_t o_heads = blob.Add(l.host.heads), o_offsets = blob.Add(l.host.block_offsets);
  SPATTN_RETURN_IF_ERROR(blob.Upload(env, env.stream, /*kept=*/true));
  v->heads = blob.At<int32_t>(o_heads);
  v->block_offsets = blob.At<int32_t>(o_offsets);
  out->num_blocks = l.host.num_blocks();
  SPATTN_ASSIGN_OR_RETURN(out->count_ranges, Carve<int64_t>(env, rows + 1, "range counts"));
  SPATTN_ASSIGN_OR_RETURN(out->count_cols, Carve<int64_t>(env, rows + 1, "column counts"));
  return absl::OkStatus();
}

// Kept words (row_assembly.h AsmOut::keep): the count pass stores each row's final words and
// the fill pass reads them instead of building the row's bitmaps again, for as many units as
// SPATTN_ASM_KEEP_MB (default 1024; 0: off) holds, and at most an eighth of what the workspace
// has left (the index arrays and the fill's scratch come after: a build that fitted without
// the kept words keeps fitting unless it needed more than 7/8 of that); the other rows (all of
// them where the workspace has no room) take the bitmaps as before. The same index either way.
void CarveKeptWords(const BuildScope& env, const Layout& l, int64_t rows, AsmOut* out) {
  int64_t keep_mb = 1024;
  if (const char* e = std::getenv("SPATTN_ASM_KEEP_MB"); e != nullptr && *e != '\0') {
    keep_mb = std::max<int64_t>(0, std::atoll(e));
  }
  int64_t max_key_end = 0;
  for (const BlockGeoDev& g : l.geo) max_key_end = std::max<int64_t>(max_key_end, g.key_end);
  const int64_t stride = row_assembly::AsmKeepStride(max_key_end);
  const int64_t unit_bytes = 4 * row_assembly::AsmKeepUnitWords(stride);
  int64_t keep_bytes = keep_mb << 20;
  if (env.available) keep_bytes = std::min<int64_t>(keep_bytes, env.available() / 8);
  const int64_t units = std::min<int64_t>(rows, keep_bytes / unit_bytes);
  if (units > 0) {
    absl::StatusOr<uint32_t*> k =
        Carve<uint32_t>(env, units * (unit_bytes / 4), "row assembly kept words");
    if (k.ok()) {
      out->keep = *k;
      out->keep_units = units;
      out->keep_stride = stride;
    }
  }
  if (std::getenv("SPATTN_GPU_BUILDER_PROFILE") != nullptr) {
    std::fprintf(stderr, "row assembly: kept words for %lld of %lld rows (stride %lld words)\n",
                 static_cast<long long>(out->keep_units), static_cast<long long>(rows),
                 static_cast<long long>(stride));
  }
}

absl::Status CheckIndexTotals(const BuildScope& env, const int64_t totals[2]) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (totals[0] > kMax || totals[1] > kMax) {
    return absl::ResourceExhaustedError(
        absl::StrCat("index has ", totals[0], " ranges and ", totals[1],
                     " columns: more than the int32 offsets of SparseIndex hold"));
  }
  ReportTotals(env, totals[0], totals[1]);
  return absl::OkStatus();
}

absl::Status CarveIndexEntries(const BuildScope& env, const int64_t totals[2], AsmOut* out,
                               SparseIndexView* v) {
  int32_t *range_start, *range_len, *col_idx;
  SPATTN_ASSIGN_OR_RETURN(range_start, CarveKept<int32_t>(env, totals[0], "range_start"));
  SPATTN_ASSIGN_OR_RETURN(range_len, CarveKept<int32_t>(env, totals[0], "range_len"));
  SPATTN_ASSIGN_OR_RETURN(col_idx, CarveKept<int32_t>(env, totals[1], "col_idx"));
  out->off_ranges = out->count_ranges;  // scanned in place by the count step
  out->off_cols = out->count_cols;
  out->count_ranges = nullptr;
  out->count_cols = nullptr;
  out->range_start = range_start;
  out->range_len = range_len;
  out->col_idx = col_idx;
  v->range_start = range_start;
  v->range_len = range_len;
  v->col_idx = col_idx;
  return absl::OkStatus();
}

// Count pass, scan, the entry totals (the build's one host round trip), fill pass.
absl::StatusOr<SparseIndexView> Assemble(
    const BuildScope& env, const Layout& l,
    const std::function<cudaError_t(const AsmOut&, bool)>& launch, StageTimer* timer,
    const char* select_stage) {
  const int num_slots = l.host.num_heads(), num_blocks = l.host.num_blocks();
  const int64_t rows = static_cast<int64_t>(num_slots) * num_blocks;
  SparseIndexView v;
  AsmOut out;
  SPATTN_RETURN_IF_ERROR(StartAssembly(env, l, &v, &out));
  CarveKeptWords(env, l, rows, &out);
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
  SPATTN_RETURN_IF_ERROR(CheckIndexTotals(env, totals));
  int32_t *range_indptr, *col_indptr;
  SPATTN_ASSIGN_OR_RETURN(range_indptr, CarveKept<int32_t>(env, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(col_indptr, CarveKept<int32_t>(env, rows + 1, "col_indptr"));
  v.range_indptr = range_indptr;
  v.col_indptr = col_indptr;
  SPATTN_RETURN_IF_ERROR(CarveIndexEntries(env, totals, &out, &v));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchNarrow64(out.off_ranges, rows + 1, range_indptr, env.stream),
                              "range_indptr");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchNarrow64(out.off_cols, rows + 1, col_indptr, env.stream),
                              "col_indptr");
  timer->Mark("sync+alloc");
  SPATTN_CUDA_RETURN_IF_ERROR(launch(out, true), "index assembly (fill)");
  timer->Mark("fill");
  return v;
}

namespace merged {

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
                                           const int32_t* d_heads, int slots, const BuildScope& ws,
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
  SPATTN_ASSIGN_OR_RETURN(ep.row_part, Carve<double>(ws, slots * e.rowpart_stride, "row sums"));
  SPATTN_ASSIGN_OR_RETURN(ep.row_inv, Carve<float>(ws, slots * e.rows_stride, "row inv"));
  SPATTN_ASSIGN_OR_RETURN(ep.col_sums, Carve<double>(ws, slots * ep.col_stride, "column sums"));
  SPATTN_ASSIGN_OR_RETURN(ep.dpart, Carve<double>(ws, slots * e.dpart_stride, "diagonal partials"));
  SPATTN_ASSIGN_OR_RETURN(ep.diag_sums, Carve<double>(ws, slots * e.diag_stride, "diagonal sums"));
  if (e.total_ctas == 0 || slots == 0) return ep;
  timer.Mark("est_setup");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 1, stream), "estimate pass 1");
  timer.Mark("est_max");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 2, stream), "estimate pass 2");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimateRowInv(ep, stream), "estimate row sums");
  timer.Mark("est_sum");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimatePass(ep, 3, stream), "estimate pass 3");
  timer.Mark("est_probs");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchEstimateDiagCombine(ep, stream), "estimate diagonals");
  timer.Mark("est_diag");
  return ep;
}

absl::StatusOr<Csr> CarveCounts(int64_t rows, const BuildScope& ws, cudaStream_t stream) {
  Csr c;
  SPATTN_ASSIGN_OR_RETURN(c.range_count,
                          CarveZeroed<int32_t>(ws, rows + 1, "range counts", stream));
  SPATTN_ASSIGN_OR_RETURN(c.col_count, CarveZeroed<int32_t>(ws, rows + 1, "column counts", stream));
  SPATTN_ASSIGN_OR_RETURN(c.range_indptr, CarveKept<int32_t>(ws, rows + 1, "range_indptr"));
  SPATTN_ASSIGN_OR_RETURN(c.col_indptr, CarveKept<int32_t>(ws, rows + 1, "col_indptr"));
  return c;
}

absl::Status ScanAndSize(int64_t rows, Csr* c, const BuildScope& ws, cudaStream_t stream,
                         bool with_cols) {
  const size_t temp_bytes = DeviceScanTempBytes(rows + 1);
  SPATTN_ASSIGN_OR_RETURN(void* temp, ws.alloc(static_cast<int64_t>(temp_bytes) + 1, "scan"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchDeviceExclusiveScan32(c->range_count, c->range_indptr, rows + 1,
                                                          temp, temp_bytes, stream),
                              "range scan");
  SPATTN_CUDA_RETURN_IF_ERROR(
      LaunchDeviceExclusiveScan32(c->col_count, c->col_indptr, rows + 1, temp, temp_bytes, stream),
      "column scan");
  int32_t totals[2] = {0, 0};
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[0], c->range_indptr + rows, 4, cudaMemcpyDeviceToHost, stream),
      "range total");
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&totals[1], c->col_indptr + rows, 4, cudaMemcpyDeviceToHost, stream),
      "column total");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "index count pass");
  return SizeFromTotals(totals, c, ws, with_cols);
}

absl::Status SizeFromTotals(const int32_t totals[2], Csr* c, const BuildScope& ws,
                            bool with_cols) {
  if (totals[0] < 0 || totals[1] < 0) {
    return absl::InternalError("index builder: negative entry count");
  }
  c->total_ranges = totals[0];
  c->total_cols = totals[1];
  ReportTotals(ws, totals[0], totals[1]);
  SPATTN_ASSIGN_OR_RETURN(c->range_start, CarveKept<int32_t>(ws, totals[0], "range_start"));
  SPATTN_ASSIGN_OR_RETURN(c->range_len, CarveKept<int32_t>(ws, totals[0], "range_len"));
  SPATTN_ASSIGN_OR_RETURN(c->col_idx, CarveKept<int32_t>(ws, with_cols ? totals[1] : 1, "col_idx"));
  return absl::OkStatus();
}

// Column runs and offset clusters of the selected lines (MergeParams' groups).
absl::Status GroupLines(MergeParams* mp, int slots, int64_t cols_stride, int64_t offs_stride,
                        const BuildScope& ws, cudaStream_t stream) {
  const int64_t units = static_cast<int64_t>(slots) * mp->batch;
  SPATTN_ASSIGN_OR_RETURN(int32_t * runs,
                          Carve<int32_t>(ws, 2 * slots * cols_stride, "column runs"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * full,
                          Carve<int32_t>(ws, 2 * slots * offs_stride, "offset clusters"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * last,
                          Carve<int32_t>(ws, 2 * slots * offs_stride, "offset clusters"));
  SPATTN_ASSIGN_OR_RETURN(int32_t * counts, Carve<int32_t>(ws, 3 * units, "group counts"));
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

MergeParams LineMergeParams(const AttentionProblem& p, const AttnParams& a, const Plan& plan,
                            const int32_t* d_offsets, const LineSelectParams& lp,
                            const int64_t* d_unit_col_base, const int64_t* d_unit_off_base) {
  MergeParams mp;
  mp.num_slots = plan.slots;
  mp.batch = plan.batch;
  mp.num_blocks = plan.num_blocks;
  mp.block_m = plan.block_m;
  mp.causal = p.causal;
  mp.cu_q = a.cu_seqlens_q;
  mp.cu_k = a.cu_seqlens_k;
  mp.block_offsets = d_offsets;
  mp.line_cols = lp.line_cols;
  mp.line_offs = lp.line_offs;
  mp.unit_col_base = d_unit_col_base;
  mp.unit_off_base = d_unit_off_base;
  mp.unit_ncols = lp.unit_ncols;
  mp.unit_noffs = lp.unit_noffs;
  return mp;
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

LineMeta AddLineMeta(const Plan& plan, const EstimatePlan& e, const std::vector<LineSeq>& lines,
                     int64_t cols_stride, int64_t offs_stride, MetaBlob* blob) {
  std::vector<int64_t> unit_col_base(static_cast<size_t>(plan.slots) * plan.batch);
  std::vector<int64_t> unit_off_base(unit_col_base.size());
  for (int slot = 0; slot < plan.slots; ++slot) {
    for (int b = 0; b < plan.batch; ++b) {
      unit_col_base[slot * plan.batch + b] = slot * cols_stride + lines[b].col_base;
      unit_off_base[slot * plan.batch + b] = slot * offs_stride + lines[b].off_base;
    }
  }
  LineMeta m;
  m.seqs = blob->Add(e.seqs);
  m.lines = blob->Add(lines);
  m.unit_col_base = blob->Add(unit_col_base);
  m.unit_off_base = blob->Add(unit_off_base);
  return m;
}

absl::StatusOr<LineSelectParams> CarveLineSelect(const Plan& plan, const EstimateParams& ep,
                                                 const LineSeq* d_lines, int64_t cols_stride,
                                                 int64_t offs_stride, const BuildScope& ws) {
  LineSelectParams lp;
  lp.num_slots = plan.slots;
  lp.batch = plan.batch;
  lp.seqs = ep.seqs;
  lp.lines = d_lines;
  lp.col_sums = ep.col_sums;
  lp.diag_sums = ep.diag_sums;
  lp.col_stride = ep.col_stride;
  lp.diag_stride = ep.diag_stride;
  lp.cols_stride = cols_stride;
  lp.offs_stride = offs_stride;
  SPATTN_ASSIGN_OR_RETURN(lp.line_cols,
                          Carve<int32_t>(ws, plan.slots * cols_stride, "selected columns"));
  SPATTN_ASSIGN_OR_RETURN(lp.line_offs,
                          Carve<int32_t>(ws, plan.slots * offs_stride, "selected diagonals"));
  const int64_t units = static_cast<int64_t>(plan.slots) * plan.batch;
  SPATTN_ASSIGN_OR_RETURN(lp.unit_ncols, Carve<int32_t>(ws, units, "column counts"));
  SPATTN_ASSIGN_OR_RETURN(lp.unit_noffs, Carve<int32_t>(ws, units, "diagonal counts"));
  return lp;
}

absl::StatusOr<Csr> MergeLines(MergeParams mp, int64_t rows, int64_t cols_stride,
                               int64_t offs_stride, const BuildScope& ws, cudaStream_t stream,
                               StageTimer& timer,
                               const std::function<absl::Status(const Csr&, bool fill)>& also,
                               const MergeLinesOptions& opt) {
  Csr csr;
  if (opt.zeroed_counts == nullptr) {
    SPATTN_ASSIGN_OR_RETURN(csr, CarveCounts(rows, ws, stream));
  } else {  // CarveCounts' arrays, the counts zeroed by the caller
    csr.range_count = opt.zeroed_counts;
    csr.col_count = opt.zeroed_counts + RoundUp(rows + 1, 64);
    SPATTN_ASSIGN_OR_RETURN(csr.range_indptr, CarveKept<int32_t>(ws, rows + 1, "range_indptr"));
    SPATTN_ASSIGN_OR_RETURN(csr.col_indptr, CarveKept<int32_t>(ws, rows + 1, "col_indptr"));
  }
  mp.range_count = csr.range_count;
  mp.col_count = csr.col_count;
  // 64 prefixes a row, then (SPATTN_MERGE_STORE_CUTS) 32 window starts a row.
  SPATTN_ASSIGN_OR_RETURN(mp.lane_prefix, Carve<int32_t>(ws, rows * 96, "merge lane prefixes"));
  SPATTN_RETURN_IF_ERROR(GroupLines(&mp, mp.num_slots, cols_stride, offs_stride, ws, stream));
  timer.Mark("group");
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/false, stream), "merge rows (count)");
  timer.Mark("merge_count");
  if (also) SPATTN_RETURN_IF_ERROR(also(csr, /*fill=*/false));
  SPATTN_RETURN_IF_ERROR(opt.scan ? opt.scan(rows, &csr)
                                   : ScanAndSize(rows, &csr, ws, stream, /*with_cols=*/true));
  timer.Mark("scan_sync");
  mp.range_indptr = csr.range_indptr;
  mp.col_indptr = csr.col_indptr;
  mp.range_start = csr.range_start;
  mp.range_len = csr.range_len;
  mp.col_idx = csr.col_idx;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMergeRows(mp, /*fill=*/true, stream), "merge rows (fill)");
  timer.Mark("merge_fill");
  if (also) SPATTN_RETURN_IF_ERROR(also(csr, /*fill=*/true));
  return csr;
}

PooledMeta AddPooledMeta(const PooledPlan& pp, const std::vector<RowGroup>& groups,
                         MetaBlob* blob) {
  PooledMeta m;
  m.seqs = blob->Add(pp.seqs);
  m.kb_offsets = blob->Add(pp.kb_offsets);
  m.groups = blob->Add(groups);
  return m;
}

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

absl::StatusOr<float*> PoolKeysOnDevice(const AttentionProblem& p, const AttnParams& a,
                                        const PooledPlan& pp, const int32_t* d_kb_offsets,
                                        int block, const BuildScope& ws, cudaStream_t stream,
                                        cudaError_t (*launch)(const PoolKeysParams&,
                                                              cudaStream_t)) {
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
      k.out, Carve<float>(ws, static_cast<int64_t>(p.num_kv_heads) * pp.total_kb * p.head_dim,
                          "pooled keys"));
  SPATTN_CUDA_RETURN_IF_ERROR(launch(k, stream), "pool keys");
  return k.out;
}

}  // namespace merged
}  // namespace cuda
}  // namespace spattn
