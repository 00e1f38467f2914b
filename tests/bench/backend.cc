#include "tests/bench/backend.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

class CpuBackend : public AttentionBackend {
 public:
  std::string name() const override { return "cpu"; }

  absl::Status Prepare(AttentionProblem* host_problem) override {
    problem_ = host_problem;
    return absl::OkStatus();
  }

  absl::StatusOr<double> BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                    const BuildOptions& options, SparseIndex* index) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = BuildSparseIndex(*problem_, config, heads, options, index);
    if (!s.ok()) return s;
    return MillisSince(start);
  }

  absl::StatusOr<double> RunKernel(const SparseIndex& index) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = SparseAttentionCpu(*problem_, index);
    if (!s.ok()) return s;
    return MillisSince(start);
  }

  absl::Status FetchOutput() override { return absl::OkStatus(); }

 private:
  AttentionProblem* problem_ = nullptr;
};

// Copies a host tensor [tokens, heads, d] with any strides to or from a contiguous buffer.
void PackTokens(const AttentionProblem& p, const TokenTensor& t, int heads, int64_t tokens,
                std::vector<uint8_t>* packed) {
  const int es = DTypeSize(p.dtype), d = p.head_dim;
  packed->resize(static_cast<size_t>(tokens) * heads * d * es);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int h = 0; h < heads; ++h) {
      std::memcpy(
          packed->data() + (tok * heads + h) * d * es,
          static_cast<const uint8_t*>(t.data) + (tok * t.token_stride + h * t.head_stride) * es,
          static_cast<size_t>(d) * es);
    }
  }
}

// The CUDA engine: Q/K/V copied to the device once in Prepare; indexes of methods with a GPU
// builder are built on the GPU (index time = the build's GPU time from CUDA events; the copy
// back for the fidelity metrics is not counted), the others by the CPU builders. The kernel
// time is the sparse kernel's (work schedule included) from CUDA events: for a GPU-built index
// RunBuiltIndex builds it again in the workspace and runs the kernel on it (no host round trip
// of a large index), else RunSparse uploads the host index. Saap's assets are uploaded once
// per LayerAssets object.
class CudaBackend : public AttentionBackend {
 public:
  CudaBackend(std::unique_ptr<CudaAttentionEngine> engine, std::string name)
      : engine_(std::move(engine)), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  absl::Status Prepare(AttentionProblem* host_problem) override {
    problem_ = host_problem;
    const AttentionProblem& p = *host_problem;
    const int es = DTypeSize(p.dtype);
    dp_ = p;
    dp_.space = MemorySpace::kCuda;
    SetContiguousStrides(&dp_);
    std::vector<uint8_t> packed;
    auto upload = [&](const TokenTensor& t, int heads, int64_t tokens,
                      std::unique_ptr<CudaDeviceBuffer>* buf) -> absl::Status {
      PackTokens(p, t, heads, tokens, &packed);
      SPATTN_ASSIGN_OR_RETURN(*buf, CudaDeviceBuffer::Allocate(engine_->device(), packed.size()));
      return (*buf)->CopyFromHost(packed.data(), packed.size());
    };
    SPATTN_RETURN_IF_ERROR(upload(p.q, p.num_q_heads, p.total_q(), &q_));
    SPATTN_RETURN_IF_ERROR(upload(p.k, p.num_kv_heads, p.total_k(), &k_));
    SPATTN_RETURN_IF_ERROR(upload(p.v, p.num_kv_heads, p.total_k(), &v_));
    SPATTN_ASSIGN_OR_RETURN(
        o_, CudaDeviceBuffer::Allocate(engine_->device(),
                                       int64_t{p.total_q()} * p.num_q_heads * p.head_dim * es));
    SPATTN_ASSIGN_OR_RETURN(lse_, CudaDeviceBuffer::Allocate(
                                      engine_->device(), int64_t{p.total_q()} * p.num_q_heads * 4));
    dp_.q.data = q_->data();
    dp_.k.data = k_->data();
    dp_.v.data = v_->data();
    dp_.o = o_->data();
    dp_.maybe_lse = static_cast<float*>(lse_->data());
    return absl::OkStatus();
  }

  absl::StatusOr<double> BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                    const BuildOptions& options, SparseIndex* index) override {
    gpu_built_ = false;
    if (!CudaAttentionEngine::GpuBuilderAvailable(config.method)) {
      const auto start = std::chrono::steady_clock::now();
      SPATTN_RETURN_IF_ERROR(BuildSparseIndex(*problem_, config, heads, options, index));
      return MillisSince(start);
    }
    const CudaLayerAssets* assets = nullptr;
    if (config.method == Method::kSaap && options.maybe_assets != nullptr) {
      if (assets_source_ != options.maybe_assets) {
        SPATTN_ASSIGN_OR_RETURN(
            assets_, engine_->UploadLayerAssets(*options.maybe_assets, problem_->head_dim));
        assets_source_ = options.maybe_assets;
      }
      assets = assets_.get();
    }
    CudaStageTimes t;
    SPATTN_RETURN_IF_ERROR(
        engine_->BuildIndexOnDevice(dp_, config, heads, options.block_m, index, assets, &t));
    gpu_built_ = true;
    last_config_ = config;
    last_heads_in_ = heads;
    last_block_m_ = options.block_m;
    last_assets_ = assets;
    return t.index_seconds * 1e3;
  }

  absl::StatusOr<double> RunKernel(const SparseIndex& index) override {
    CudaStageTimes t;
    if (IsFullDenseIndex(*problem_, index)) {
      // What the worker serves for dense over every head: no index, the dense kernel.
      SPATTN_RETURN_IF_ERROR(engine_->RunDense(dp_, &t));
    } else if (gpu_built_ &&
               index.heads == std::vector<int32_t>(last_heads_in_.begin(), last_heads_in_.end())) {
      SPATTN_RETURN_IF_ERROR(engine_->RunBuiltIndex(dp_, last_config_, last_heads_in_,
                                                    last_block_m_, &t, last_assets_));
    } else {
      SPATTN_RETURN_IF_ERROR(engine_->RunSparse(dp_, index, &t));
    }
    last_heads_ = index.heads;
    return (t.schedule_seconds + t.kernel_seconds) * 1e3;
  }

  absl::Status FetchOutput() override {
    const AttentionProblem& p = *problem_;
    const int es = DTypeSize(p.dtype), d = p.head_dim;
    std::vector<uint8_t> o(o_->bytes());
    SPATTN_RETURN_IF_ERROR(o_->CopyToHost(o.data(), o.size()));
    for (int64_t tok = 0; tok < p.total_q(); ++tok) {
      for (int h : last_heads_) {
        std::memcpy(
            static_cast<uint8_t*>(p.o) + (tok * p.o_token_stride + h * p.o_head_stride) * es,
            o.data() + (tok * p.num_q_heads + h) * d * es, static_cast<size_t>(d) * es);
      }
    }
    if (p.maybe_lse != nullptr) {
      std::vector<float> lse(lse_->bytes() / 4);
      SPATTN_RETURN_IF_ERROR(lse_->CopyToHost(lse.data(), lse_->bytes()));
      for (int h : last_heads_) {
        std::memcpy(p.maybe_lse + int64_t{h} * p.total_q(), lse.data() + int64_t{h} * p.total_q(),
                    sizeof(float) * p.total_q());
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<CudaAttentionEngine> engine_;
  std::string name_;
  AttentionProblem* problem_ = nullptr;
  AttentionProblem dp_;
  std::unique_ptr<CudaDeviceBuffer> q_, k_, v_, o_, lse_;
  std::vector<int32_t> last_heads_;
  // The last GPU build (RunKernel rebuilds it on the device).
  bool gpu_built_ = false;
  MethodConfig last_config_;
  std::vector<int> last_heads_in_;
  int last_block_m_ = 64;
  const CudaLayerAssets* last_assets_ = nullptr;
  // Saap assets on the device and the host object they came from.
  const LayerAssets* assets_source_ = nullptr;
  std::unique_ptr<CudaLayerAssets> assets_;
};

}  // namespace

bool IsFullDenseIndex(const AttentionProblem& problem, const SparseIndex& index) {
  if (index.num_heads() != problem.num_q_heads) return false;
  std::vector<bool> seen(problem.num_q_heads, false);
  for (int32_t h : index.heads) {
    if (h < 0 || h >= problem.num_q_heads || seen[h]) return false;
    seen[h] = true;
  }
  if (index.block_offsets.size() != static_cast<size_t>(problem.batch()) + 1 ||
      index.range_indptr.size() != static_cast<size_t>(index.num_rows()) + 1 ||
      index.col_indptr.size() != static_cast<size_t>(index.num_rows()) + 1) {
    return false;
  }
  std::vector<int> key_end(index.num_blocks());
  for (int b = 0; b < index.num_blocks(); ++b) {
    key_end[b] = GetBlockGeometry(problem, index, b).key_end;
  }
  for (int slot = 0; slot < index.num_heads(); ++slot) {
    for (int b = 0; b < index.num_blocks(); ++b) {
      const int64_t r = index.row(slot, b);
      if (index.col_indptr[r + 1] != index.col_indptr[r]) return false;
      const int32_t first = index.range_indptr[r];
      if (index.range_indptr[r + 1] - first != 1) return false;
      if (index.range_start[first] != 0 || index.range_len[first] != key_end[b]) return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return std::unique_ptr<AttentionBackend>(new CpuBackend());
  if (device == "cuda") {
    std::string why;
    const std::vector<CudaDeviceInfo> devices = ListCudaDevices(&why);
    if (devices.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device cuda: no CUDA device (", why, "); run with --device=cpu"));
    }
    // Workspace: sequence offsets, the index (GPU-built or uploaded: Saap's is ~0.6 GB at 128K
    // x 32 heads), the builders' scratch and the kernel's work list. 8 GiB when the device has
    // 32 GiB or more, else 1 GiB.
    const int64_t workspace =
        devices[0].memory_bytes >= (uint64_t{32} << 30) ? int64_t{8} << 30 : int64_t{1} << 30;
    SPATTN_ASSIGN_OR_RETURN(std::unique_ptr<CudaAttentionEngine> engine,
                            CudaAttentionEngine::Create(0, workspace));
    return std::unique_ptr<AttentionBackend>(
        new CudaBackend(std::move(engine), absl::StrCat("cuda:0 (", devices[0].name, ")")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device: unknown '", device, "' (expected cpu or cuda)"));
}

}  // namespace spattn
