#include "kernels/cuda/attention/attention_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/engine_internal.h"
#include "kernels/cuda/attention/hopper/hopper_launch.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/cuda/builders/method_builders.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/index_stats.h"
#include "kernels/cuda/recall/mass_recall.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

constexpr int64_t kAlign = 256;

// Checks what the CUDA kernels need beyond AttentionProblem::Validate().
absl::Status CheckKernelLimits(const AttentionProblem& p) {
  SPATTN_RETURN_IF_ERROR(p.Validate());
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: the CUDA kernels take bf16 or fp16, got ", DTypeName(p.dtype)));
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim: the CUDA kernels support 64 and 128, got ", p.head_dim));
  }
  struct Named {
    const char* name;
    int64_t v;
  };
  for (const Named& s :
       {Named{"q.token_stride", p.q.token_stride}, Named{"q.head_stride", p.q.head_stride},
        Named{"k.token_stride", p.k.token_stride}, Named{"k.head_stride", p.k.head_stride},
        Named{"v.token_stride", p.v.token_stride}, Named{"v.head_stride", p.v.head_stride},
        Named{"o_token_stride", p.o_token_stride}, Named{"o_head_stride", p.o_head_stride}}) {
    if (s.v % 8 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.name, " must be a multiple of 8 elements (16-byte rows) for CUDA, got ", s.v));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAligned(const void* ptr, const char* name) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": pointer must be 16-byte aligned"));
  }
  return absl::OkStatus();
}

int MaxQLen(const AttentionProblem& p) {
  int m = 0;
  for (int b = 0; b < p.batch(); ++b) m = std::max(m, p.q_len(b));
  return m;
}

int NumBlocks(const AttentionProblem& p, int block_m) {
  int n = 0;
  for (int b = 0; b < p.batch(); ++b) n += (p.q_len(b) + block_m - 1) / block_m;
  return n;
}

}  // namespace

class CudaAttentionEngine::Impl {
 public:
  Impl(int device, int64_t bytes, char* base, cudaStream_t stream, const CudaEngineOptions& o)
      : device_(device), bytes_(bytes), base_(base), stream_(stream), options_(o) {}

  ~Impl() {
    cudaSetDevice(device_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
    cudaFree(base_);
  }

  absl::Status Init() {
    for (cudaEvent_t& e : events_)
      SPATTN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e), "cudaEventCreate");
    return absl::OkStatus();
  }

  int device() const { return device_; }
  int64_t bytes() const { return bytes_; }
  absl::Mutex& mu() { return mu_; }

  // Starts a call: selects the device and empties the workspace.
  absl::Status Begin(CudaStageTimes* times) {
    used_ = 0;
    pending_ = 0;
    marks_ = 0;
    times_ = times;
    if (times_ != nullptr) *times_ = CudaStageTimes();
    return CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
  }

  // Carves `bytes` from the workspace.
  template <typename T>
  absl::StatusOr<T*> Alloc(int64_t count, const char* what) {
    const int64_t bytes = std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T));
    const int64_t start = (used_ + kAlign - 1) / kAlign * kAlign;
    if (start + bytes > bytes_ - resident_ - pending_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "CUDA workspace too small for ", what, ": need ", start + bytes, " bytes, pool has ",
          bytes_ - resident_ - pending_,
          resident_ + pending_ > 0
              ? absl::StrCat(" (", resident_ + pending_, " more hold built indexes)")
              : std::string()));
    }
    used_ = start + bytes;
    return reinterpret_cast<T*>(base_ + start);
  }

  // Carves `bytes` for the index being built from the top of the pool, right below the indexes
  // kept before (Keep makes it resident without copying it).
  absl::StatusOr<char*> AllocKept(int64_t bytes, const char* what) {
    const int64_t size = (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    const int64_t top = (bytes_ - resident_ - pending_ - size) / kAlign * kAlign;
    if (top < used_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "CUDA workspace too small for ", what, " of the built index (", bytes,
          " bytes): the build uses ", used_, " bytes, ", resident_ + pending_,
          " bytes hold built indexes, pool has ", bytes_));
    }
    pending_ = bytes_ - resident_ - top;
    return base_ + top;
  }

  // Whether `ptr` lies in the index being built's part of the resident region (AllocKept).
  bool IsPending(const void* ptr) const {
    const char* c = static_cast<const char*>(ptr);
    return c >= base_ + (bytes_ - resident_ - pending_) && c < base_ + (bytes_ - resident_);
  }

  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host, const char* what) {
    SPATTN_ASSIGN_OR_RETURN(T * dev, Alloc<T>(static_cast<int64_t>(host.size()), what));
    if (!host.empty()) {
      SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(T),
                                                  cudaMemcpyHostToDevice, stream_),
                                  what);
    }
    return dev;
  }

  // Marks the end of a stage; `slot` selects the CudaStageTimes field credited.
  enum Stage { kUpload, kIndex, kSchedule, kKernel, kDownload };
  absl::Status Mark(int stage) {
    if (times_ == nullptr) return absl::OkStatus();
    if (marks_ >= static_cast<int>(events_.size())) {
      return absl::InternalError("too many stage marks");
    }
    SPATTN_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[marks_], stream_), "cudaEventRecord");
    stage_of_[marks_] = stage;
    ++marks_;
    return absl::OkStatus();
  }

  // Waits for the stream and fills the stage times.
  absl::Status Finish() {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "attention on the GPU");
    SPATTN_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "attention on the GPU");
    if (times_ == nullptr) return absl::OkStatus();
    for (int i = 1; i < marks_; ++i) {
      float ms = 0;
      SPATTN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]),
                                  "cudaEventElapsedTime");
      double* field = nullptr;
      switch (stage_of_[i]) {
        case kUpload:
          field = &times_->upload_seconds;
          break;
        case kIndex:
          field = &times_->index_seconds;
          break;
        case kSchedule:
          field = &times_->schedule_seconds;
          break;
        case kKernel:
          field = &times_->kernel_seconds;
          break;
        case kDownload:
          field = &times_->download_seconds;
          break;
      }
      if (field != nullptr) *field += ms * 1e-3;
    }
    return absl::OkStatus();
  }

  cuda::KernelVariant variant() const {
    return static_cast<cuda::KernelVariant>(options_.kernel_variant);
  }
  cudaStream_t stream() const { return stream_; }

  // Device-side problem: the pointers of `p` (device memory), offsets uploaded.
  absl::StatusOr<cuda::AttnParams> Params(const AttentionProblem& p) {
    cuda::AttnParams a;
    a.q = p.q.data;
    a.k = p.k.data;
    a.v = p.v.data;
    a.o = p.o;
    a.maybe_lse = p.maybe_lse;
    a.q_token_stride = p.q.token_stride;
    a.q_head_stride = p.q.head_stride;
    a.k_token_stride = p.k.token_stride;
    a.k_head_stride = p.k.head_stride;
    a.v_token_stride = p.v.token_stride;
    a.v_head_stride = p.v.head_stride;
    a.o_token_stride = p.o_token_stride;
    a.o_head_stride = p.o_head_stride;
    SPATTN_ASSIGN_OR_RETURN(const int32_t* cq, Upload(p.cu_seqlens_q, "cu_seqlens_q"));
    SPATTN_ASSIGN_OR_RETURN(const int32_t* ck, Upload(p.cu_seqlens_k, "cu_seqlens_k"));
    a.cu_seqlens_q = cq;
    a.cu_seqlens_k = ck;
    a.batch = p.batch();
    batch_ = p.batch();
    a.num_q_heads = p.num_q_heads;
    a.group = p.group_size();
    a.total_q = p.total_q();
    a.total_k = p.total_k();
    a.head_dim = p.head_dim;
    a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
    a.causal = p.causal;
    a.dtype = p.dtype;
    return a;
  }

  absl::Status Dense(cuda::AttnParams a, int max_q_len) {
    // The Hopper kernel's tail split, when its workspace fits (else it runs without).
    int64_t zero_bytes = 0;
    const int64_t split_bytes = cuda::DenseWorkspaceBytes(a, max_q_len, variant(), &zero_bytes);
    const int64_t start = (used_ + kAlign - 1) / kAlign * kAlign;
    if (split_bytes > 0 && start + split_bytes <= bytes_ - resident_ - pending_) {
      SPATTN_ASSIGN_OR_RETURN(char* ws, Alloc<char>(split_bytes, "dense tail split"));
      SPATTN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ws, 0, zero_bytes, stream_),
                                  "dense tail split counters");
      a.maybe_dense_workspace = ws;
    }
    SPATTN_CUDA_RETURN_IF_ERROR(cuda::LaunchDenseAttention(a, max_q_len, variant(), stream_),
                                "dense kernel");
    return Mark(kKernel);
  }

  absl::Status Sparse(const cuda::AttnParams& a, const SparseIndexView& idx) {
    const int64_t rows = static_cast<int64_t>(idx.num_heads) * idx.num_blocks;
    SPATTN_ASSIGN_OR_RETURN(int32_t * order, Alloc<int32_t>(rows, "sparse schedule"));
    SPATTN_ASSIGN_OR_RETURN(
        int32_t * scratch,
        Alloc<int32_t>(cuda::SparseScheduleScratchInts(rows, a), "sparse schedule scratch"));
    SPATTN_ASSIGN_OR_RETURN(int* counter, Alloc<int>(1, "sparse schedule counter"));
    // The Hopper kernel's item records (SparseSchedule::items; SPATTN_HOPPER_ITEM_RECORDS=0:
    // none, the kernel reads order and the index as before).
    int32_t* items = nullptr;
    if (cuda::SparseItemRecords()) {
      SPATTN_ASSIGN_OR_RETURN(items, Alloc<int32_t>(8 * rows, "sparse schedule items"));
    }
    SPATTN_CUDA_RETURN_IF_ERROR(
        cuda::LaunchSparseSchedule(idx, a, cuda::SparseTileN(a.head_dim, idx.block_m), scratch,
                                   order, counter, stream_, items),
        "sparse schedule");
    SPATTN_RETURN_IF_ERROR(Mark(kSchedule));
    cuda::SparseSchedule sched;
    sched.order = order;
    sched.num_items = static_cast<int>(rows);
    sched.counter = counter;
    sched.items = items;
    sched.stats = cuda::SparseScheduleStats(scratch, a);
    SPATTN_CUDA_RETURN_IF_ERROR(cuda::LaunchSparseAttention(a, idx, sched, variant(), stream_),
                                "sparse kernel");
    return Mark(kKernel);
  }

  // Uploads a host index (already validated).
  absl::StatusOr<SparseIndexView> UploadIndex(const SparseIndex& index) {
    SparseIndexView v;
    v.block_m = index.block_m;
    v.num_heads = index.num_heads();
    v.num_blocks = index.num_blocks();
    SPATTN_ASSIGN_OR_RETURN(v.heads, Upload(index.heads, "index.heads"));
    SPATTN_ASSIGN_OR_RETURN(v.block_offsets, Upload(index.block_offsets, "index.block_offsets"));
    SPATTN_ASSIGN_OR_RETURN(v.range_indptr, Upload(index.range_indptr, "index.range_indptr"));
    SPATTN_ASSIGN_OR_RETURN(v.range_start, Upload(index.range_start, "index.range_start"));
    SPATTN_ASSIGN_OR_RETURN(v.range_len, Upload(index.range_len, "index.range_len"));
    SPATTN_ASSIGN_OR_RETURN(v.col_indptr, Upload(index.col_indptr, "index.col_indptr"));
    SPATTN_ASSIGN_OR_RETURN(v.col_idx, Upload(index.col_idx, "index.col_idx"));
    return v;
  }

  // Builds an index in the workspace with the method's GPU builder (BuildIndexInWorkspace).
  absl::StatusOr<SparseIndexView> BuildIndex(const AttentionProblem& p, const cuda::AttnParams& a,
                                             const MethodConfig& config,
                                             const std::vector<int>& heads, int block_m,
                                             const CudaLayerAssets* maybe_assets,
                                             const std::vector<float>& sl_gammas) {
    cuda::BuildScope scope;
    scope.stream = stream_;
    scope.device = device_;
    scope.params = &a;
    scope.alloc = [this](int64_t bytes, const char* what) -> absl::StatusOr<void*> {
      SPATTN_ASSIGN_OR_RETURN(char* ptr, Alloc<char>(bytes, what));
      return static_cast<void*>(ptr);
    };
    scope.keep = [this](int64_t bytes, const char* what) -> absl::StatusOr<void*> {
      SPATTN_ASSIGN_OR_RETURN(char* ptr, AllocKept(bytes, what));
      return static_cast<void*>(ptr);
    };
    scope.available = [this]() -> int64_t {
      return std::max<int64_t>(0, bytes_ - resident_ - pending_ - used_);
    };
    totals_[0] = totals_[1] = -1;
    scope.maybe_totals = totals_;
    return cuda::BuildIndexInWorkspace(scope, p, config, heads, block_m, maybe_assets, sl_gammas);
  }

  // Makes a built index resident until ReleaseIndexes: the arrays the builder carved with
  // AllocKept stay where they are; the others (small ones of some builders, or all of a builder
  // that does not use it) are copied device to device next to them. The CSR totals come from
  // the builder (BuildScope::maybe_totals) or, where it did not write them, are read back.
  absl::StatusOr<GpuSparseIndex> Keep(const SparseIndexView& v, const std::vector<int>& heads) {
    const int64_t rows = static_cast<int64_t>(v.num_heads) * v.num_blocks;
    int64_t num_ranges = totals_[0], num_cols = totals_[1];
    if (num_ranges < 0 || num_cols < 0) {
      int32_t totals[2] = {0, 0};
      SPATTN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(&totals[0], v.range_indptr + rows, 4, cudaMemcpyDeviceToHost, stream_),
          "index totals");
      SPATTN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(&totals[1], v.col_indptr + rows, 4, cudaMemcpyDeviceToHost, stream_),
          "index totals");
      SPATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "index build");
      num_ranges = totals[0];
      num_cols = totals[1];
    }
    GpuSparseIndex out;
    out.heads.assign(heads.begin(), heads.end());
    out.num_ranges = num_ranges;
    out.num_cols = num_cols;
    out.batch = batch_;
    struct Array {
      const int32_t* src;
      int64_t count;
      const int32_t** dst;
    };
    out.view = v;
    Array arrays[] = {{v.heads, v.num_heads, &out.view.heads},
                      {v.block_offsets, batch_ + 1, &out.view.block_offsets},
                      {v.range_indptr, rows + 1, &out.view.range_indptr},
                      {v.range_start, out.num_ranges, &out.view.range_start},
                      {v.range_len, out.num_ranges, &out.view.range_len},
                      {v.col_indptr, rows + 1, &out.view.col_indptr},
                      {v.col_idx, out.num_cols, &out.view.col_idx}};
    for (const Array& arr : arrays) {
      if (IsPending(arr.src)) continue;  // already in place (AllocKept)
      SPATTN_ASSIGN_OR_RETURN(char* d, AllocKept(arr.count * 4, "keeping the built index"));
      if (arr.count > 0) {
        SPATTN_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(d, arr.src, arr.count * 4, cudaMemcpyDeviceToDevice, stream_),
            "keep index");
      }
      *arr.dst = reinterpret_cast<const int32_t*>(d);
    }
    resident_ += pending_;
    out.bytes = pending_;
    pending_ = 0;
    return out;
  }

  void ReleaseIndexes() { resident_ = 0; }
  int64_t resident() const { return resident_; }
  void set_batch(int batch) { batch_ = batch; }

  // Host tensor [tokens, heads, d] (any strides) ↔ contiguous device tensor. Only `heads` are
  // copied (all when empty).
  absl::Status CopyTokens(void* dev, const void* host, int64_t tokens, int num_heads, int d,
                          int64_t host_token_stride, int64_t host_head_stride, int es,
                          const std::vector<int32_t>& heads, bool to_device) {
    if (tokens == 0) return absl::OkStatus();
    const size_t dev_pitch = static_cast<size_t>(num_heads) * d * es;
    const size_t host_pitch = static_cast<size_t>(host_token_stride) * es;
    auto copy_head = [&](int h) -> absl::Status {
      char* dp = static_cast<char*>(dev) + static_cast<size_t>(h) * d * es;
      const char* hp =
          static_cast<const char*>(host) + static_cast<size_t>(h) * host_head_stride * es;
      if (to_device) {
        return CudaStatus(cudaMemcpy2DAsync(dp, dev_pitch, hp, host_pitch, d * es, tokens,
                                            cudaMemcpyHostToDevice, stream_),
                          "copy to device");
      }
      return CudaStatus(cudaMemcpy2DAsync(const_cast<char*>(hp), host_pitch, dp, dev_pitch, d * es,
                                          tokens, cudaMemcpyDeviceToHost, stream_),
                        "copy to host");
    };
    if (heads.empty() && host_head_stride == d) {
      // Whole tokens are contiguous on both sides.
      if (to_device) {
        return CudaStatus(cudaMemcpy2DAsync(dev, dev_pitch, host, host_pitch, dev_pitch, tokens,
                                            cudaMemcpyHostToDevice, stream_),
                          "copy to device");
      }
      return CudaStatus(cudaMemcpy2DAsync(const_cast<void*>(host), host_pitch, dev, dev_pitch,
                                          dev_pitch, tokens, cudaMemcpyDeviceToHost, stream_),
                        "copy to host");
    }
    if (heads.empty()) {
      for (int h = 0; h < num_heads; ++h) SPATTN_RETURN_IF_ERROR(copy_head(h));
    } else {
      for (int h : heads) SPATTN_RETURN_IF_ERROR(copy_head(h));
    }
    return absl::OkStatus();
  }

 private:
  const int device_;
  const int64_t bytes_;
  char* const base_;
  cudaStream_t stream_;
  const CudaEngineOptions options_;
  absl::Mutex mu_;
  int64_t used_ = 0;
  int64_t resident_ = 0;  // Bytes at the top of the pool held by kept indexes.
  int64_t pending_ = 0;   // Bytes below those that the index being built carved (AllocKept).
  int64_t totals_[2] = {-1, -1};  // The CSR totals of the index being built, when its builder
                                  // wrote them (BuildScope::maybe_totals).
  int batch_ = 0;         // Of the problem of the current call.
  std::array<cudaEvent_t, 8> events_{};
  std::array<int, 8> stage_of_{};
  int marks_ = 0;
  CudaStageTimes* times_ = nullptr;
};

absl::StatusOr<std::unique_ptr<CudaDeviceBuffer>> CudaDeviceBuffer::Allocate(int device,
                                                                             int64_t bytes) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device));
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, std::max<int64_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<CudaDeviceBuffer>(new CudaDeviceBuffer(device, data, bytes));
}

CudaDeviceBuffer::~CudaDeviceBuffer() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

absl::Status CudaDeviceBuffer::CopyFromHost(const void* src, int64_t bytes, int64_t offset) {
  if (offset < 0 || bytes < 0 || offset + bytes > bytes_) {
    return absl::OutOfRangeError("CopyFromHost: outside the buffer");
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  SPATTN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice),
      "CopyFromHost");
  // From pageable memory cudaMemcpy returns once the bytes are staged, before the DMA into the
  // buffer has landed; that DMA is ordered on the default stream only, and the engines' streams
  // (cudaStreamNonBlocking) do not wait for it. Waiting here makes the copy complete for every
  // reader (session 36: Saap's first build after an asset upload read the pointer tables early).
  return CudaStatus(cudaStreamSynchronize(nullptr), "CopyFromHost");
}

absl::Status CudaDeviceBuffer::CopyToHost(void* dst, int64_t bytes, int64_t offset) const {
  if (offset < 0 || bytes < 0 || offset + bytes > bytes_) {
    return absl::OutOfRangeError("CopyToHost: outside the buffer");
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  return CudaStatus(
      cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
      "CopyToHost");
}

absl::Status CudaDeviceBuffer::Fill(uint8_t value) {
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  SPATTN_CUDA_RETURN_IF_ERROR(cudaMemset(data_, value, bytes_), "Fill");
  return CudaStatus(cudaDeviceSynchronize(), "Fill");
}

absl::StatusOr<SparseIndexView> UploadSparseIndex(const AttentionProblem& problem,
                                                  const SparseIndex& index, int device,
                                                  std::unique_ptr<CudaDeviceBuffer>* storage) {
  SPATTN_RETURN_IF_ERROR(ValidateSparseIndex(problem, index));
  const std::vector<int32_t>* arrays[] = {
      &index.heads,     &index.block_offsets, &index.range_indptr, &index.range_start,
      &index.range_len, &index.col_indptr,    &index.col_idx};
  int64_t offsets[7];
  int64_t total = 0;
  for (int i = 0; i < 7; ++i) {
    offsets[i] = total;
    total += (static_cast<int64_t>(arrays[i]->size()) * 4 + kAlign - 1) / kAlign * kAlign;
  }
  SPATTN_ASSIGN_OR_RETURN(*storage, CudaDeviceBuffer::Allocate(device, total));
  for (int i = 0; i < 7; ++i) {
    SPATTN_RETURN_IF_ERROR(
        (*storage)->CopyFromHost(arrays[i]->data(), arrays[i]->size() * 4, offsets[i]));
  }
  const int32_t* base = static_cast<const int32_t*>((*storage)->data());
  SparseIndexView v;
  v.block_m = index.block_m;
  v.num_heads = index.num_heads();
  v.num_blocks = index.num_blocks();
  v.heads = base + offsets[0] / 4;
  v.block_offsets = base + offsets[1] / 4;
  v.range_indptr = base + offsets[2] / 4;
  v.range_start = base + offsets[3] / 4;
  v.range_len = base + offsets[4] / 4;
  v.col_indptr = base + offsets[5] / 4;
  v.col_idx = base + offsets[6] / 4;
  return v;
}

absl::StatusOr<std::unique_ptr<CudaAttentionEngine>> CudaAttentionEngine::Create(
    int device, int64_t workspace_bytes, const CudaEngineOptions& options) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ", err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device, " does not exist (", count, " devices)"));
  }
  if (workspace_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("workspace_bytes must be > 0, got ", workspace_bytes));
  }
  if (options.kernel_variant < 0 || options.kernel_variant > 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel_variant must be in [0, 6], got ", options.kernel_variant));
  }
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  void* base = nullptr;
  err = cudaMalloc(&base, workspace_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve a ", workspace_bytes, "-byte CUDA workspace: ", cudaGetErrorString(err)));
  }
  cudaStream_t stream;
  err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    cudaFree(base);
    return CudaStatus(err, "cudaStreamCreate");
  }
  auto impl =
      std::make_unique<Impl>(device, workspace_bytes, static_cast<char*>(base), stream, options);
  SPATTN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<CudaAttentionEngine>(new CudaAttentionEngine(std::move(impl)));
}

CudaAttentionEngine::CudaAttentionEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaAttentionEngine::~CudaAttentionEngine() = default;

int CudaAttentionEngine::device() const { return impl_->device(); }
int64_t CudaAttentionEngine::workspace_bytes() const { return impl_->bytes(); }

bool CudaAttentionEngine::GpuBuilderAvailable(Method method) {
  return spattn::GpuBuilderAvailable(method);
}

void CudaAttentionEngine::ReleaseIndexes() {
  absl::MutexLock lock(&impl_->mu());
  impl_->ReleaseIndexes();
}

int64_t CudaAttentionEngine::resident_index_bytes() const {
  absl::MutexLock lock(&impl_->mu());
  return impl_->resident();
}

absl::StatusOr<std::unique_ptr<CudaLayerAssets>> CudaAttentionEngine::UploadLayerAssets(
    const LayerAssets& assets, int head_dim) {
  SPATTN_ASSIGN_OR_RETURN(std::unique_ptr<CudaLayerAssets::Rep> rep,
                          cuda::UploadSaapAssets(assets, head_dim, impl_->device()));
  return std::make_unique<CudaLayerAssets>(std::move(rep));
}

namespace {

absl::Status CheckDeviceProblem(const AttentionProblem& p, int device) {
  if (p.space != MemorySpace::kCuda) {
    return absl::InvalidArgumentError(
        "problem.space must be kCuda on the device-pointer path (RunHost takes host buffers)");
  }
  SPATTN_RETURN_IF_ERROR(CheckKernelLimits(p));
  struct Named {
    const void* ptr;
    const char* name;
  };
  for (const Named& t : {Named{p.q.data, "q"}, Named{p.k.data, "k"}, Named{p.v.data, "v"},
                         Named{p.o, "o"}, Named{p.maybe_lse, "maybe_lse"}}) {
    if (t.ptr == nullptr) continue;
    SPATTN_RETURN_IF_ERROR(CheckAligned(t.ptr, t.name));
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, t.ptr) != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": not a CUDA pointer"));
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": not device memory"));
    }
    if (attr.device != device) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": memory of device ", attr.device,
                                                     ", engine is on device ", device));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckIndexShape(const AttentionProblem& p, const SparseIndexView& v) {
  if (v.block_m != 64 && v.block_m != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("index.block_m: the CUDA kernel supports 64 and 128, got ", v.block_m));
  }
  if (v.num_blocks != NumBlocks(p, v.block_m)) {
    return absl::InvalidArgumentError(absl::StrCat("index.num_blocks is ", v.num_blocks,
                                                   ", the problem has ", NumBlocks(p, v.block_m),
                                                   " blocks"));
  }
  if (v.num_heads < 0 || v.num_heads > p.num_q_heads) {
    return absl::InvalidArgumentError(absl::StrCat("index.num_heads: ", v.num_heads));
  }
  if (static_cast<int64_t>(v.num_heads) * v.num_blocks > (int64_t{1} << 31) - 2) {
    return absl::InvalidArgumentError("index: too many rows for int32 offsets");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaAttentionEngine::RunDense(const AttentionProblem& p, CudaStageTimes* times) {
  absl::MutexLock lock(&impl_->mu());
  SPATTN_RETURN_IF_ERROR(impl_->Begin(times));
  SPATTN_RETURN_IF_ERROR(CheckDeviceProblem(p, impl_->device()));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_ASSIGN_OR_RETURN(cuda::AttnParams a, impl_->Params(p));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_RETURN_IF_ERROR(impl_->Dense(a, MaxQLen(p)));
  return impl_->Finish();
}

absl::Status CudaAttentionEngine::RunSparse(const AttentionProblem& p, const SparseIndex& index,
                                            CudaStageTimes* times) {
  absl::MutexLock lock(&impl_->mu());
  SPATTN_RETURN_IF_ERROR(impl_->Begin(times));
  SPATTN_RETURN_IF_ERROR(CheckDeviceProblem(p, impl_->device()));
  SPATTN_RETURN_IF_ERROR(ValidateSparseIndex(p, index));
  SPATTN_RETURN_IF_ERROR(CheckIndexShape(p, index.view()));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_ASSIGN_OR_RETURN(cuda::AttnParams a, impl_->Params(p));
  SPATTN_ASSIGN_OR_RETURN(SparseIndexView v, impl_->UploadIndex(index));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_RETURN_IF_ERROR(impl_->Sparse(a, v));
  return impl_->Finish();
}

absl::Status CudaAttentionEngine::RunSparseDeviceIndex(const AttentionProblem& p,
                                                       const SparseIndexView& device_index,
                                                       CudaStageTimes* times) {
  absl::MutexLock lock(&impl_->mu());
  SPATTN_RETURN_IF_ERROR(impl_->Begin(times));
  SPATTN_RETURN_IF_ERROR(CheckDeviceProblem(p, impl_->device()));
  SPATTN_RETURN_IF_ERROR(CheckIndexShape(p, device_index));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_ASSIGN_OR_RETURN(cuda::AttnParams a, impl_->Params(p));
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_RETURN_IF_ERROR(impl_->Sparse(a, device_index));
  return impl_->Finish();
}

absl::Status CudaAttentionEngine::RunHost(const AttentionProblem& hp,
                                          const SparseIndex* maybe_index, CudaStageTimes* times) {
  absl::MutexLock lock(&impl_->mu());
  SPATTN_RETURN_IF_ERROR(impl_->Begin(times));
  if (hp.space != MemorySpace::kHost) {
    return absl::InvalidArgumentError("problem.space must be kHost for RunHost");
  }
  SPATTN_RETURN_IF_ERROR(CheckKernelLimits(hp));
  if (maybe_index != nullptr) {
    SPATTN_RETURN_IF_ERROR(ValidateSparseIndex(hp, *maybe_index));
    SPATTN_RETURN_IF_ERROR(CheckIndexShape(hp, maybe_index->view()));
  }
  const int es = DTypeSize(hp.dtype);
  const int d = hp.head_dim;
  const int64_t tq = hp.total_q(), tk = hp.total_k();
  // Device copies, contiguous.
  AttentionProblem p = hp;
  p.space = MemorySpace::kCuda;
  SetContiguousStrides(&p);
  SPATTN_ASSIGN_OR_RETURN(char* dq, impl_->Alloc<char>(tq * hp.num_q_heads * d * es, "q"));
  SPATTN_ASSIGN_OR_RETURN(char* dk, impl_->Alloc<char>(tk * hp.num_kv_heads * d * es, "k"));
  SPATTN_ASSIGN_OR_RETURN(char* dv, impl_->Alloc<char>(tk * hp.num_kv_heads * d * es, "v"));
  SPATTN_ASSIGN_OR_RETURN(char* dout, impl_->Alloc<char>(tq * hp.num_q_heads * d * es, "o"));
  float* dlse = nullptr;
  if (hp.maybe_lse != nullptr) {
    SPATTN_ASSIGN_OR_RETURN(dlse, impl_->Alloc<float>(tq * hp.num_q_heads, "lse"));
  }
  p.q.data = dq;
  p.k.data = dk;
  p.v.data = dv;
  p.o = dout;
  p.maybe_lse = dlse;
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  SPATTN_RETURN_IF_ERROR(impl_->CopyTokens(dq, hp.q.data, tq, hp.num_q_heads, d, hp.q.token_stride,
                                           hp.q.head_stride, es, {}, true));
  SPATTN_RETURN_IF_ERROR(impl_->CopyTokens(dk, hp.k.data, tk, hp.num_kv_heads, d, hp.k.token_stride,
                                           hp.k.head_stride, es, {}, true));
  SPATTN_RETURN_IF_ERROR(impl_->CopyTokens(dv, hp.v.data, tk, hp.num_kv_heads, d, hp.v.token_stride,
                                           hp.v.head_stride, es, {}, true));
  SPATTN_ASSIGN_OR_RETURN(cuda::AttnParams a, impl_->Params(p));
  SparseIndexView v;
  if (maybe_index != nullptr) {
    SPATTN_ASSIGN_OR_RETURN(v, impl_->UploadIndex(*maybe_index));
  }
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kUpload));
  std::vector<int32_t> heads;
  if (maybe_index != nullptr) {
    SPATTN_RETURN_IF_ERROR(impl_->Sparse(a, v));
    heads = maybe_index->heads;
    if (heads.empty()) return impl_->Finish();
  } else {
    SPATTN_RETURN_IF_ERROR(impl_->Dense(a, MaxQLen(p)));
  }
  SPATTN_RETURN_IF_ERROR(impl_->CopyTokens(dout, hp.o, tq, hp.num_q_heads, d, hp.o_token_stride,
                                           hp.o_head_stride, es, heads, false));
  if (hp.maybe_lse != nullptr && tq > 0) {
    auto copy_lse = [&](int h) {
      return CudaStatus(cudaMemcpyAsync(hp.maybe_lse + h * tq, dlse + h * tq, tq * sizeof(float),
                                        cudaMemcpyDeviceToHost, impl_->stream()),
                        "copy lse to host");
    };
    if (heads.empty()) {
      SPATTN_RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(hp.maybe_lse, dlse, tq * hp.num_q_heads * sizeof(float),
                                     cudaMemcpyDeviceToHost, impl_->stream()),
                     "copy lse to host"));
    } else {
      for (int h : heads) SPATTN_RETURN_IF_ERROR(copy_lse(h));
    }
  }
  SPATTN_RETURN_IF_ERROR(impl_->Mark(Impl::kDownload));
  return impl_->Finish();
}

void ReloadCudaKernelKnobs() { cuda::hopper::ReloadKnobs(); }

namespace cuda {

absl::StatusOr<GpuSparseIndex> EngineAccess::Build(CudaAttentionEngine& engine,
                                                   const AttentionProblem& p,
                                                   const MethodConfig& config,
                                                   const std::vector<int>& heads,
                                                   const GpuBuildOptions& options) {
  CudaAttentionEngine::Impl& impl = *engine.impl_;
  absl::MutexLock lock(&impl.mu());
  SPATTN_RETURN_IF_ERROR(impl.Begin(options.maybe_times));
  SPATTN_RETURN_IF_ERROR(p.Validate());
  // The estimating builders read Q/K on the device (sample_attention, anchor and saap check
  // their inputs themselves); dense and a_shape only the sizes.
  if (config.method == Method::kVerticalSlash || config.method == Method::kBlockSparse ||
      config.method == Method::kFlexPrefill) {
    SPATTN_RETURN_IF_ERROR(CheckDeviceProblem(p, impl.device()));
  }
  SPATTN_RETURN_IF_ERROR(impl.Mark(CudaAttentionEngine::Impl::kUpload));
  SPATTN_ASSIGN_OR_RETURN(AttnParams a, impl.Params(p));
  SPATTN_RETURN_IF_ERROR(impl.Mark(CudaAttentionEngine::Impl::kUpload));
  SPATTN_ASSIGN_OR_RETURN(SparseIndexView v,
                          impl.BuildIndex(p, a, config, heads, options.block_m,
                                          options.maybe_assets, options.sampled_lines_gammas));
  SPATTN_RETURN_IF_ERROR(impl.Mark(CudaAttentionEngine::Impl::kIndex));
  // Any block size builds (as on the CPU); the sparse kernel takes 64 and 128 (RunSparseDeviceIndex
  // says so).
  SPATTN_ASSIGN_OR_RETURN(GpuSparseIndex kept, impl.Keep(v, heads));
  SPATTN_RETURN_IF_ERROR(impl.Finish());
  return kept;
}

absl::Status EngineAccess::Download(CudaAttentionEngine& engine, const GpuSparseIndex& index,
                                    SparseIndex* out) {
  CudaAttentionEngine::Impl& impl = *engine.impl_;
  absl::MutexLock lock(&impl.mu());
  SPATTN_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl.device()), "cudaSetDevice");
  const SparseIndexView& v = index.view;
  const int64_t rows = static_cast<int64_t>(v.num_heads) * v.num_blocks;
  out->block_m = v.block_m;
  out->heads = index.heads;
  std::vector<int32_t>* arrays[] = {&out->block_offsets, &out->range_indptr, &out->range_start,
                                    &out->range_len,     &out->col_indptr,   &out->col_idx};
  const int32_t* sources[] = {v.block_offsets, v.range_indptr, v.range_start,
                              v.range_len,     v.col_indptr,   v.col_idx};
  const int64_t counts[] = {-1,       rows + 1,      index.num_ranges, index.num_ranges,
                            rows + 1, index.num_cols};
  for (int i = 0; i < 6; ++i) {
    int64_t n = counts[i];
    if (n < 0) n = index.batch + 1;
    arrays[i]->resize(n);
    if (n > 0) {
      SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(arrays[i]->data(), sources[i], n * 4,
                                                  cudaMemcpyDeviceToHost, impl.stream()),
                                  "download index");
    }
  }
  return CudaStatus(cudaStreamSynchronize(impl.stream()), "download index");
}

absl::StatusOr<std::vector<int64_t>> EngineAccess::ComputedPairs(CudaAttentionEngine& engine,
                                                                 const AttentionProblem& p,
                                                                 const GpuSparseIndex& index) {
  CudaAttentionEngine::Impl& impl = *engine.impl_;
  absl::MutexLock lock(&impl.mu());
  SPATTN_RETURN_IF_ERROR(impl.Begin(nullptr));
  SPATTN_ASSIGN_OR_RETURN(AttnParams a, impl.Params(p));
  const int n = index.view.num_heads;
  SPATTN_ASSIGN_OR_RETURN(unsigned long long* d,
                          impl.Alloc<unsigned long long>(n, "computed pairs"));
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchComputedPairs(index.view, a.cu_seqlens_q, a.cu_seqlens_k,
                                                  a.batch, p.causal, d, impl.stream()),
                              "computed pairs");
  std::vector<unsigned long long> host(n);
  if (n > 0) {
    SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), d, n * sizeof(unsigned long long),
                                                cudaMemcpyDeviceToHost, impl.stream()),
                                "computed pairs");
  }
  SPATTN_RETURN_IF_ERROR(impl.Finish());
  return std::vector<int64_t>(host.begin(), host.end());
}

absl::StatusOr<std::vector<double>> EngineAccess::MassRecall(
    CudaAttentionEngine& engine, const AttentionProblem& p, const SparseIndex& index,
    const SparseIndexView* maybe_device, const std::vector<std::pair<int, int>>& rows) {
  const int slots = index.num_heads();
  std::vector<double> recall(slots, 1.0);
  if (slots == 0 || rows.empty()) return recall;
  if (p.head_dim != 64 && p.head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("recall on the GPU: head_dim ", p.head_dim, " (takes 64 and 128)"));
  }
  CudaAttentionEngine::Impl& impl = *engine.impl_;
  SPATTN_RETURN_IF_ERROR(CheckDeviceProblem(p, impl.device()));
  // Work items: per probe row and kv head, up to kRecallSlotsPerItem slots of that kv head.
  const int num_rows = static_cast<int>(rows.size());
  std::vector<RecallItem> items;
  int max_limit = 0;
  for (int i = 0; i < num_rows; ++i) {
    const int seq = rows[i].first, row = rows[i].second;
    if (seq < 0 || seq >= p.batch() || row < 0 || row >= p.q_len(seq)) {
      return absl::InvalidArgumentError(
          absl::StrCat("recall on the GPU: probe row ", row, " of sequence ", seq, " is outside"));
    }
    RecallItem base;
    base.q_token = p.cu_seqlens_q[seq] + row;
    base.k_base = p.cu_seqlens_k[seq];
    base.limit = p.causal ? p.query_pos(seq, row) + 1 : p.k_len(seq);
    max_limit = std::max(max_limit, base.limit);
    const int block = index.block_offsets[seq] + row / index.block_m;
    for (int kv = 0; kv < p.num_kv_heads; ++kv) {
      RecallItem it = base;
      it.kv_head = kv;
      for (int s = 0; s < slots; ++s) {
        if (p.kv_head_of(index.heads[s]) != kv) continue;
        it.head[it.num_slots] = index.heads[s];
        it.index_row[it.num_slots] = static_cast<int32_t>(index.row(s, block));
        it.out[it.num_slots] = s * num_rows + i;
        if (++it.num_slots == kRecallSlotsPerItem) {
          items.push_back(it);
          it = base;
          it.kv_head = kv;
        }
      }
      if (it.num_slots > 0) items.push_back(it);
    }
  }
  const int chunks = (max_limit + kRecallChunkKeys - 1) / kRecallChunkKeys;
  if (chunks == 0) return recall;
  absl::MutexLock lock(&impl.mu());
  SPATTN_RETURN_IF_ERROR(impl.Begin(nullptr));
  SparseIndexView view;
  if (maybe_device != nullptr) {
    view = *maybe_device;
  } else {
    SPATTN_RETURN_IF_ERROR(ValidateSparseIndex(p, index));
    SPATTN_ASSIGN_OR_RETURN(view, impl.UploadIndex(index));
  }
  SPATTN_ASSIGN_OR_RETURN(RecallItem * d_items, impl.Upload(items, "recall items"));
  const int64_t outs = static_cast<int64_t>(slots) * num_rows;
  SPATTN_ASSIGN_OR_RETURN(float* d_part, impl.Alloc<float>(outs * chunks * 3, "recall partials"));
  RecallTensors t;
  t.q = p.q.data;
  t.k = p.k.data;
  t.q_token_stride = p.q.token_stride;
  t.q_head_stride = p.q.head_stride;
  t.k_token_stride = p.k.token_stride;
  t.k_head_stride = p.k.head_stride;
  t.head_dim = p.head_dim;
  t.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  t.dtype = p.dtype;
  SPATTN_CUDA_RETURN_IF_ERROR(LaunchMassRecall(t, view, d_items, static_cast<int>(items.size()),
                                               chunks, d_part, impl.stream()),
                              "recall estimate");
  std::vector<float> part(static_cast<size_t>(outs * chunks * 3));
  SPATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(part.data(), d_part, part.size() * sizeof(float),
                                              cudaMemcpyDeviceToHost, impl.stream()),
                              "recall estimate");
  SPATTN_RETURN_IF_ERROR(impl.Finish());
  // Per output row: combine the chunks (log-sum-exp in base 2), then average the rows per slot.
  for (int s = 0; s < slots; ++s) {
    double sum = 0;
    for (int i = 0; i < num_rows; ++i) {
      const float* o = part.data() + (static_cast<int64_t>(s) * num_rows + i) * chunks * 3;
      float m = -std::numeric_limits<float>::infinity();
      for (int c = 0; c < chunks; ++c) m = std::max(m, o[c * 3]);
      double all = 0, sel = 0;
      if (m != -std::numeric_limits<float>::infinity()) {
        for (int c = 0; c < chunks; ++c) {
          if (o[c * 3] == -std::numeric_limits<float>::infinity()) continue;
          const double w = std::exp2(static_cast<double>(o[c * 3]) - m);
          all += w * o[c * 3 + 1];
          sel += w * o[c * 3 + 2];
        }
      }
      sum += all > 0 ? std::min(1.0, sel / all) : 1.0;
    }
    recall[s] = sum / num_rows;
  }
  return recall;
}

}  // namespace cuda

}  // namespace spattn
