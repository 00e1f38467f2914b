#include "tests/bench/backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/status_macros.h"
#include "tests/bench/worker_path.h"

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

// The CUDA backend: Q/K/V copied to the device once in Prepare, then each head group runs as
// one request of the worker's CUDA path (WorkerCudaPath: GPU index builders planning into the
// workspace, the sparse kernel on the kept index, computed pairs counted on the device). Index
// time = wall time of the worker's build (BackendCall::BuildIndex, which synchronizes); the
// computed-pairs count the worker takes for its stats is timed apart (last_pairs_ms: the worker
// counts it after the kernel, outside its index_build stage); kernel time = wall time of its
// Attend (synchronizes). The host copy of the index the fidelity metrics read is made outside the timed
// calls.
//
// With host_index (--device=cuda-host-index), the path the worker had before plan / run: GPU
// builds copied to the host (BuildIndexOnGpu + DownloadIndex, then released), stats counted there,
// the index validated and uploaded again by RunSparse; a_shape built on the CPU for the stats and
// again on the GPU next to the kernel; Saap on the CPU builder from Q/K copied to the host. For
// before / after comparisons in one run.
class CudaBackend : public AttentionBackend {
 public:
  CudaBackend(std::unique_ptr<CudaAttentionEngine> engine, std::unique_ptr<WorkerCudaPath> path,
              std::string name)
      : engine_(std::move(engine)), path_(std::move(path)), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  absl::Status Prepare(AttentionProblem* host_problem) override {
    problem_ = host_problem;
    const AttentionProblem& p = *host_problem;
    const int es = DTypeSize(p.dtype);
    dp_ = p;
    dp_.space = MemorySpace::kCuda;
    SetContiguousStrides(&dp_);
    std::vector<uint8_t> packed;
    const int device = engine_ != nullptr ? engine_->device() : 0;
    auto upload = [&](const TokenTensor& t, int heads, int64_t tokens,
                      std::unique_ptr<CudaDeviceBuffer>* buf) -> absl::Status {
      PackTokens(p, t, heads, tokens, &packed);
      SPATTN_ASSIGN_OR_RETURN(*buf, CudaDeviceBuffer::Allocate(device, packed.size()));
      return (*buf)->CopyFromHost(packed.data(), packed.size());
    };
    SPATTN_RETURN_IF_ERROR(upload(p.q, p.num_q_heads, p.total_q(), &q_));
    SPATTN_RETURN_IF_ERROR(upload(p.k, p.num_kv_heads, p.total_k(), &k_));
    SPATTN_RETURN_IF_ERROR(upload(p.v, p.num_kv_heads, p.total_k(), &v_));
    SPATTN_ASSIGN_OR_RETURN(
        o_,
        CudaDeviceBuffer::Allocate(device, int64_t{p.total_q()} * p.num_q_heads * p.head_dim * es));
    SPATTN_ASSIGN_OR_RETURN(
        lse_, CudaDeviceBuffer::Allocate(device, int64_t{p.total_q()} * p.num_q_heads * 4));
    dp_.q.data = q_->data();
    dp_.k.data = k_->data();
    dp_.v.data = v_->data();
    dp_.o = o_->data();
    dp_.maybe_lse = static_cast<float*>(lse_->data());
    return absl::OkStatus();
  }

  absl::StatusOr<double> BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                    const BuildOptions& options, SparseIndex* index) override {
    last_config_ = config;
    if (path_ != nullptr) {
      // One request per head group (the worker would build every group, then attend each).
      AttentionProblem request = dp_;
      request.maybe_lse = nullptr;
      SPATTN_RETURN_IF_ERROR(path_->Begin(request));
      SPATTN_ASSIGN_OR_RETURN(const double ms,
                              path_->BuildIndex(config, heads, options, index, &last_pairs_ms_));
      SPATTN_RETURN_IF_ERROR(path_->CompleteHostIndex(index));
      return ms;
    }
    return BuildHostIndex(config, heads, options, index);
  }

  double last_pairs_ms() const override { return path_ != nullptr ? last_pairs_ms_ : 0; }

  void SetGuardAdaptive(const MethodConfig& adaptive, const MethodConfig& adaptive_also,
                        bool adaptive_auto) override {
    if (path_ != nullptr) path_->SetGuardAdaptive(adaptive, adaptive_also, adaptive_auto);
  }

  absl::StatusOr<GuardOutcome> GuardOnDevice(const std::vector<MethodConfig>& config_of_head,
                                             double target, int probe_rows,
                                             const BuildOptions& options, bool again) override {
    if (path_ == nullptr) {
      return AttentionBackend::GuardOnDevice(config_of_head, target, probe_rows, options, again);
    }
    AttentionProblem request = dp_;
    request.maybe_lse = nullptr;
    SPATTN_RETURN_IF_ERROR(path_->Begin(request));
    GuardOutcome g;
    auto ms = path_->Guard(config_of_head, target, probe_rows, options, &g.configs, &g.estimates,
                           &g.widened, &g.build_ms);
    path_->End();
    if (!ms.ok()) return ms.status();
    g.recall_ms = *ms;
    if (!again) return g;
    // Again, from what the first call learned.
    SPATTN_RETURN_IF_ERROR(path_->Begin(request));
    GuardOutcome warm;
    auto warm_ms = path_->Guard(config_of_head, target, probe_rows, options, &warm.configs,
                                &warm.estimates, &warm.widened, &warm.build_ms);
    path_->End();
    if (!warm_ms.ok()) return warm_ms.status();
    g.warm_recall_ms = *warm_ms;
    return g;
  }

  absl::StatusOr<double> RunKernel(const SparseIndex& index) override {
    last_heads_ = index.heads;
    if (path_ != nullptr) {
      double device_ms = 0;
      SPATTN_ASSIGN_OR_RETURN(const double ms, path_->Attend(last_config_, index, &device_ms));
      path_->End();
      return ms;
    }
    const auto start = std::chrono::steady_clock::now();
    CudaStageTimes t;
    if (last_config_.method == Method::kDense && index.num_heads() == problem_->num_q_heads) {
      SPATTN_RETURN_IF_ERROR(engine_->RunDense(dp_, &t));
    } else if (last_config_.method == Method::kDense || last_config_.method == Method::kAShape) {
      // Built again next to the kernel, as the worker did before plan / run.
      std::vector<int> heads(index.heads.begin(), index.heads.end());
      GpuBuildOptions o;
      o.block_m = index.block_m;
      absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(*engine_, dp_, last_config_, heads, o);
      absl::Status s = built.status();
      if (s.ok()) s = engine_->RunSparseDeviceIndex(dp_, built->view, &t);
      engine_->ReleaseIndexes();
      SPATTN_RETURN_IF_ERROR(s);
    } else {
      SPATTN_RETURN_IF_ERROR(engine_->RunSparse(dp_, index, &t));
    }
    return MillisSince(start);
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
  // The worker's path before plan / run (see the class comment); wall milliseconds of the build
  // and the stats.
  absl::StatusOr<double> BuildHostIndex(const MethodConfig& config, const std::vector<int>& heads,
                                        const BuildOptions& options, SparseIndex* index) {
    const auto start = std::chrono::steady_clock::now();
    if (config.method == Method::kDense || config.method == Method::kAShape) {
      AttentionProblem sizes = *problem_;
      SPATTN_RETURN_IF_ERROR(BuildSparseIndex(sizes, config, heads, options, index));
    } else if (config.method == Method::kSaap) {
      // Q and K mirrored to the host (the bench's host problem is the mirror), then the CPU
      // builder.
      std::vector<uint8_t> mirror(std::max(q_->bytes(), k_->bytes()));
      SPATTN_RETURN_IF_ERROR(q_->CopyToHost(mirror.data(), q_->bytes()));
      SPATTN_RETURN_IF_ERROR(k_->CopyToHost(mirror.data(), k_->bytes()));
      SPATTN_RETURN_IF_ERROR(BuildSparseIndex(*problem_, config, heads, options, index));
    } else {
      GpuBuildOptions o;
      o.block_m = options.BlockRowsFor(config.method);
      o.sampled_lines_gammas = options.sampled_lines_gammas;
      absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(*engine_, dp_, config, heads, o);
      absl::Status s = built.status();
      if (s.ok()) s = DownloadIndex(*engine_, *built, index);
      engine_->ReleaseIndexes();
      SPATTN_RETURN_IF_ERROR(s);
    }
    for (int slot = 0; slot < index->num_heads(); ++slot) {
      (void)ComputedPairs(*problem_, *index, slot);  // the stats the worker took
    }
    return MillisSince(start);
  }

  std::unique_ptr<CudaAttentionEngine> engine_;  // host-index mode only
  std::unique_ptr<WorkerCudaPath> path_;         // worker mode only
  std::string name_;
  AttentionProblem* problem_ = nullptr;
  AttentionProblem dp_;
  std::unique_ptr<CudaDeviceBuffer> q_, k_, v_, o_, lse_;
  std::vector<int32_t> last_heads_;
  MethodConfig last_config_;
  double last_pairs_ms_ = 0;  // worker mode: the last build's pairs count (timed apart)
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

absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeBackend(const std::string& device,
                                                              int64_t gpu_workspace_bytes) {
  if (device == "cpu") return std::unique_ptr<AttentionBackend>(new CpuBackend());
  if (device == "cuda" || device == "cuda-host-index") {
    std::string why;
    const std::vector<CudaDeviceInfo> devices = ListCudaDevices(&why);
    if (devices.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device cuda: no CUDA device (", why, "); run with --device=cpu"));
    }
    // Workspace: sequence offsets, the index (GPU-built or uploaded: Saap's is ~0.6 GB at 128K
    // x 32 heads), the builders' scratch and the kernel's work list. 8 GiB when the device has
    // 32 GiB or more, else 1 GiB, unless `gpu_workspace_bytes` says otherwise.
    const int64_t workspace = gpu_workspace_bytes > 0 ? gpu_workspace_bytes
                              : devices[0].memory_bytes >= (uint64_t{32} << 30) ? int64_t{8} << 30
                                                                                : int64_t{1} << 30;
    const std::string name = absl::StrCat("cuda:0 (", devices[0].name, ")");
    if (device == "cuda") {
      SPATTN_ASSIGN_OR_RETURN(std::unique_ptr<WorkerCudaPath> path,
                              WorkerCudaPath::Create(0, workspace));
      return std::unique_ptr<AttentionBackend>(new CudaBackend(nullptr, std::move(path), name));
    }
    SPATTN_ASSIGN_OR_RETURN(std::unique_ptr<CudaAttentionEngine> engine,
                            CudaAttentionEngine::Create(0, workspace));
    return std::unique_ptr<AttentionBackend>(
        new CudaBackend(std::move(engine), nullptr, absl::StrCat(name, " host-index")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device: unknown '", device, "' (expected cpu, cuda or cuda-host-index)"));
}

}  // namespace spattn
