// Host steps shared by the GPU index builders (each builders/<method>_host.cc): workspace carving
// and uploads, input checks, and the two ways a builder sizes its rows: the line builders
// (vertical_slash, block_sparse, flex_prefill: count -> cub scan -> totals -> fill, in
// namespace `merged`, launch API merged_kernels.h) and the bitmap builders (sample_attention,
// anchor, saap: count -> scan -> totals -> fill through the row assembler, assembled_kernels.h).
// Internal to kernels/cuda; CUDA types appear here.
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_BUILDER_STEPS_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_BUILDER_STEPS_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/engine_internal.h"
#include "kernels/cuda/builders/assembled_kernels.h"
#include "kernels/cuda/builders/merged_kernels.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/scan.h"
#include "kernels/cuda/common/stage_timer.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace cuda {

// ---- Workspace ---------------------------------------------------------------------------------

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int FloorDiv(int64_t a, int64_t b) {
  return static_cast<int>(a >= 0 ? a / b : -((-a + b - 1) / b));
}

// `count` (>= 1 is carved even for 0) elements of T from the build's workspace.
template <typename T>
absl::StatusOr<T*> Carve(const BuildScope& scope, int64_t count, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(
      void* p, scope.alloc(std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T)), what));
  return static_cast<T*>(p);
}

// Carve for an array of the built index itself: where the engine keeps it (BuildScope::keep), so
// that it is not copied after the build; from the workspace when the scope has no `keep`.
template <typename T>
absl::StatusOr<T*> CarveKept(const BuildScope& scope, int64_t count, const char* what) {
  const int64_t bytes = std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T));
  SPATTN_ASSIGN_OR_RETURN(void* p, scope.keep ? scope.keep(bytes, what) : scope.alloc(bytes, what));
  return static_cast<T*>(p);
}

// Tells the engine the built index's CSR totals (BuildScope::maybe_totals).
inline void ReportTotals(const BuildScope& scope, int64_t ranges, int64_t cols) {
  if (scope.maybe_totals != nullptr) {
    scope.maybe_totals[0] = ranges;
    scope.maybe_totals[1] = cols;
  }
}

// Carve, then zero on `stream`.
template <typename T>
absl::StatusOr<T*> CarveZeroed(const BuildScope& ws, int64_t count, const char* what,
                               cudaStream_t stream) {
  SPATTN_ASSIGN_OR_RETURN(T * p, Carve<T>(ws, count, what));
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p, 0, std::max<int64_t>(count, 1) * sizeof(T), stream), what);
  return p;
}

// Copies `v` into the workspace (pageable source: staged before the call returns).
template <typename T>
absl::StatusOr<T*> Upload(const BuildScope& scope, const std::vector<T>& v, const char* what) {
  SPATTN_ASSIGN_OR_RETURN(T * d, Carve<T>(scope, static_cast<int64_t>(v.size()), what));
  if (!v.empty()) {
    SPATTN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, scope.stream),
        what);
  }
  return d;
}

// The q heads of an index as device int32 (index.heads).
absl::StatusOr<const int32_t*> UploadHeads(const BuildScope& scope, const std::vector<int>& heads);

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
  // kept: the blob holds only arrays of the built index (CarveKept's region).
  absl::Status Upload(const BuildScope& ws, cudaStream_t stream, bool kept = false) {
    const int64_t bytes = static_cast<int64_t>(bytes_.size());
    SPATTN_ASSIGN_OR_RETURN(void* dev, kept && ws.keep ? ws.keep(bytes, "index metadata")
                                                       : ws.alloc(bytes, "builder metadata"));
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

// The device's opt-in shared memory per block (48 KB when it cannot be read).
int MaxSmemOptin();

// 64 bytes of mapped, portable pinned host memory and their device address, made at the first
// Get and kept until destruction: totals a kernel writes and the host reads after one wait, with
// no device-to-host copy. Each builder holds its own, `thread_local` (a build reads its words
// before it returns, so a thread's builds never share them in flight).
class MappedWords {
 public:
  MappedWords() = default;
  MappedWords(const MappedWords&) = delete;
  MappedWords& operator=(const MappedWords&) = delete;
  ~MappedWords();
  // False (both nullptr) where the memory cannot be had; the caller copies from device memory.
  bool Get(void** host, void** dev);

 private:
  void* host_ = nullptr;
  void* dev_ = nullptr;
  bool failed_ = false;
};

// A growable portable pinned host buffer, kept until destruction: a builder's small host <-> device
// copies without the driver's pageable staging. Each builder holds its own, `thread_local`, and
// rewrites it only after the copies from the previous build on that thread are done.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  // At least `bytes` bytes (grown to 1.5x, at least `min_bytes`, when smaller: the old contents
  // are not kept); nullptr where pinned memory cannot be had (the caller uses pageable memory).
  char* Get(size_t bytes, size_t min_bytes);

 private:
  char* host_ = nullptr;
  size_t cap_ = 0;
};

// ---- Checks ------------------------------------------------------------------------------------

// What the bitmap builders' kernels need beyond AttentionProblem::Validate(): device Q/K in
// bf16/fp16, head_dim 64 or 128, 16-byte aligned rows.
absl::Status CheckDeviceInputs(const AttentionProblem& p, Method method);

namespace merged {

// Limits of the line builders beyond MethodConfig::Validate (the message names the parameter).
absl::Status CheckMergedBuilder(const AttentionProblem& problem, const MethodConfig& config,
                                int block_m);

// ---- Line builders (vertical_slash, block_sparse, flex_prefill) --------------------------------

// Host geometry shared by the three builders.
struct Plan {
  const AttentionProblem* p = nullptr;
  int batch = 0, slots = 0, block_m = 0, num_blocks = 0;
  std::vector<int32_t> block_offsets;  // [batch + 1]
  int64_t rows() const { return static_cast<int64_t>(slots) * num_blocks; }
};

Plan MakePlan(const AttentionProblem& p, int slots, int block_m);

// The last-rows estimate plan: `rows` = last_q (vertical_slash) or block_size (flex_prefill).
struct EstimatePlan {
  std::vector<EstimateSeq> seqs;
  int64_t rows_stride = 0, rowpart_stride = 0, diag_stride = 0, dpart_stride = 0;
  int total_ctas = 0, max_n = 0;
};

EstimatePlan MakeEstimatePlan(const AttentionProblem& p, int rows);

// Device buffers and launches of the estimate (shared by vertical_slash and flex_prefill).
absl::StatusOr<EstimateParams> RunEstimate(const AttentionProblem& p, const AttnParams& a,
                                           const EstimatePlan& e, const EstimateSeq* d_seqs,
                                           const int32_t* d_heads, int slots, const BuildScope& ws,
                                           cudaStream_t stream, StageTimer& timer);

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

absl::StatusOr<Csr> CarveCounts(int64_t rows, const BuildScope& ws, cudaStream_t stream);

// Scans the counts into indptr, copies the two totals to the host (the build's one round trip)
// and carves the entry arrays at their real size.
absl::Status ScanAndSize(int64_t rows, Csr* c, const BuildScope& ws, cudaStream_t stream,
                         bool with_cols);

// ScanAndSize's last step, once the two totals (ranges, columns) are on the host: checks them
// and carves the entry arrays at their real size (col_idx one entry without columns).
absl::Status SizeFromTotals(const int32_t totals[2], Csr* c, const BuildScope& ws,
                            bool with_cols);

// Column runs and offset clusters of the selected lines (MergeParams' groups).
absl::Status GroupLines(MergeParams* mp, int slots, int64_t cols_stride, int64_t offs_stride,
                        const BuildScope& ws, cudaStream_t stream);

// The merge of the selected lines into rows (LaunchMergeRows) over `plan`, with the lines of
// `lp` and each unit's first column / offset slot; the caller sets counts, groups and outputs.
MergeParams LineMergeParams(const AttentionProblem& p, const AttnParams& a, const Plan& plan,
                            const int32_t* d_offsets, const LineSelectParams& lp,
                            const int64_t* d_unit_col_base, const int64_t* d_unit_off_base);

SparseIndexView ViewOf(const Plan& plan, const int32_t* d_heads, const int32_t* d_offsets,
                       const Csr& c);

// The selected-line metadata of vertical_slash and flex_prefill, added to `blob`: the estimate's
// sequences, the line slots per sequence and each unit's first column / offset slot
// (slot * stride + the sequence's base). Offsets into the blob.
struct LineMeta {
  size_t seqs = 0, lines = 0, unit_col_base = 0, unit_off_base = 0;
};
LineMeta AddLineMeta(const Plan& plan, const EstimatePlan& e, const std::vector<LineSeq>& lines,
                     int64_t cols_stride, int64_t offs_stride, MetaBlob* blob);

// The line selection over the estimate `ep` (LaunchSelectLines), its outputs carved from the
// workspace; flex_prefill sets its own fields on top.
absl::StatusOr<LineSelectParams> CarveLineSelect(const Plan& plan, const EstimateParams& ep,
                                                 const LineSeq* d_lines, int64_t cols_stride,
                                                 int64_t offs_stride, const BuildScope& ws);

// The merge of selected lines into a Csr carved here: groups (GroupLines), count pass, scan and
// sizing (the build's round trip), fill pass, over `mp` from LineMergeParams. `also(csr, fill)`,
// when set, runs right after each merge pass (flex_prefill's query-aware rows). Stages: group,
// merge_count, scan_sync, merge_fill (and what `also` marks).
// `opt` (flex_prefill, session 35): counts the caller zeroed with its other scratch, and its own
// scan and round trip in place of ScanAndSize.
struct MergeLinesOptions {
  // 2 * RoundUp(rows + 1, 64) zeroed int32: the range counts, then the column counts at
  // RoundUp(rows + 1, 64). nullptr: carved and zeroed here (CarveCounts).
  int32_t* zeroed_counts = nullptr;
  // ScanAndSize's contract (indptr, totals, entry arrays carved); unset: ScanAndSize.
  std::function<absl::Status(int64_t rows, Csr* c)> scan;
};
absl::StatusOr<Csr> MergeLines(MergeParams mp, int64_t rows, int64_t cols_stride,
                               int64_t offs_stride, const BuildScope& ws, cudaStream_t stream,
                               StageTimer& timer,
                               const std::function<absl::Status(const Csr&, bool fill)>& also,
                               const MergeLinesOptions& opt = {});

// Pooled geometry (block_sparse, flex_prefill).
struct PooledPlan {
  std::vector<PooledSeq> seqs;
  std::vector<int32_t> kb_offsets;  // [batch + 1]
  int total_kb = 0, nk_max = 0;
};

PooledPlan MakePooledPlan(const AttentionProblem& p, const Plan& plan, int block);

std::vector<RowGroup> MakeGroups(const Plan& plan, const PooledPlan& pp, int rows_per_group);

// The pooled metadata of block_sparse and flex_prefill, added to `blob`: sequences, key-block
// offsets, row groups. Offsets into the blob.
struct PooledMeta {
  size_t seqs = 0, kb_offsets = 0, groups = 0;
};
PooledMeta AddPooledMeta(const PooledPlan& pp, const std::vector<RowGroup>& groups, MetaBlob* blob);

// Rows per group of the pooled row kernels (block_sparse, flex_prefill's query-aware rows):
// the most whose shared memory fits the device, `bytes(r, false)` with every array in shared
// memory; where not even one row fits (sequences of ~10K+ key blocks), kMaxRowsPerGroup with
// the rows' large arrays in per-CTA global slots (`bytes(r, true)`) and *global set.
template <class Bytes>
absl::StatusOr<int> RowsPerGroup(int nk_max, Bytes bytes, int static_bytes, const char* param,
                                 bool* global) {
  const int64_t budget = MaxSmemOptin() - static_bytes;
  *global = false;
  for (int r = kMaxRowsPerGroup; r >= 1; --r) {
    if (bytes(r, false) <= budget) return r;
  }
  *global = true;
  if (bytes(kMaxRowsPerGroup, true) <= budget) return kMaxRowsPerGroup;
  return absl::InvalidArgumentError(
      absl::StrCat("cu_seqlens_k: a sequence of ", nk_max, " key blocks of ", param,
                   " is too long for the GPU index builder's shared memory"));
}

// CTAs of a row kernel with global slots: the groups, at most two per SM.
int GlobalScratchCtas(int64_t groups);

// The global slots of a row kernel whose rows fit no shared memory (RowsPerGroup set *global):
// *ctas = GlobalScratchCtas(num_groups) slots of `slot_bytes` each, carved into *scratch.
absl::Status CarveRowScratch(const BuildScope& ws, int num_groups, int64_t slot_bytes,
                             const char* what, unsigned char** scratch, int* ctas);

// Mean-pooled keys of every kv head in the workspace, by `launch` (LaunchPoolKeys, or
// flex_prefill's LaunchFlexPoolKeys: the same values).
absl::StatusOr<float*> PoolKeysOnDevice(const AttentionProblem& p, const AttnParams& a,
                                        const PooledPlan& pp, const int32_t* d_kb_offsets,
                                        int block, const BuildScope& ws, cudaStream_t stream,
                                        cudaError_t (*launch)(const PoolKeysParams&,
                                                              cudaStream_t) = LaunchPoolKeys);

}  // namespace merged

// ---- Bitmap builders (sample_attention, anchor, saap) ------------------------------------------

// Block table and block offsets of an index with blocks of `block_m` rows.
struct Layout {
  SparseIndex host;  // heads and block_offsets only
  std::vector<BlockGeoDev> geo;
};
Layout MakeLayout(const AttentionProblem& p, const std::vector<int>& heads, int block_m);

// Assemble's steps, shared with builders that assemble with their own launches
// (sample_attention_host.cc's SaAssembleLean): the view's shape, heads and block offsets (one
// upload into the kept workspace) and the count pass's two count arrays; the count pass's kept words (row_assembly.h AsmOut::keep,
// SPATTN_ASM_KEEP_MB; none where the workspace has no room); the entry totals checked against
// SparseIndex's int32 offsets and reported; the entry arrays carved into the view for those
// totals, and `out` turned from the count pass's into the fill pass's (its scanned counts as the
// offsets).
absl::Status StartAssembly(const BuildScope& env, const Layout& l, SparseIndexView* v,
                           AsmOut* out);
void CarveKeptWords(const BuildScope& env, const Layout& l, int64_t rows, AsmOut* out);
absl::Status CheckIndexTotals(const BuildScope& env, const int64_t totals[2]);
absl::Status CarveIndexEntries(const BuildScope& env, const int64_t totals[2], AsmOut* out,
                               SparseIndexView* v);

// Count pass, scan, the entry totals (the build's one host round trip), fill pass.
absl::StatusOr<SparseIndexView> Assemble(
    const BuildScope& env, const Layout& l,
    const std::function<cudaError_t(const AsmOut&, bool)>& launch, StageTimer* timer,
    const char* select_stage);

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_BUILDER_STEPS_H_
