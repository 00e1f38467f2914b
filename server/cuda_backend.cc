#include "server/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <list>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/fidelity.h"
#include "kernels/status_macros.h"
#include "server/cuda_ipc.h"

namespace spattn {
namespace {

constexpr int64_t kAlign = 256;

// A tensor [tokens, heads, head_dim] with element strides, on one side of a copy.
struct Layout {
  int64_t tokens = 0;
  int heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

class CudaBackend;

// One request on the GPU. Holds the backend's call lock for its whole life.
class CudaCall : public BackendCall {
 public:
  CudaCall(CudaBackend* backend, std::unique_lock<std::mutex> lock, const AttentionProblem& p);
  ~CudaCall() override;

  absl::Status Bind(const RequestTensors& t);

  absl::Status BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                          const BuildOptions& options, SparseIndex* index) override;
  absl::Status Attend(const MethodConfig& config, const SparseIndex& index) override;
  absl::StatusOr<std::vector<int64_t>> ComputedPairsPerSlot(const AttentionProblem& problem,
                                                            const MethodConfig& config,
                                                            const SparseIndex& index) override;
  absl::Status CompleteHostIndex(SparseIndex* index) override;
  absl::StatusOr<std::vector<double>> MassRecall(SparseIndex* index, int rows,
                                                 uint64_t seed) override;
  void UseLayerAssets(std::shared_ptr<const LayerAssets> assets) override {
    assets_ = std::move(assets);
  }
  absl::Status Finish() override;
  absl::StatusOr<const AttentionProblem*> HostView() override;
  std::vector<CopiedBytes> copies() const override { return copies_; }
  DeviceSeconds device_seconds() const override {
    DeviceSeconds d;
    d.kernel = kernel_seconds_;
    d.transfer = transfer_seconds_;
    return d;
  }

 private:
  absl::StatusOr<void*> Stage(const char* name, int64_t bytes);
  // Copies a host tensor into staging, packed contiguously; returns the device pointer.
  absl::StatusOr<const void*> Upload(const char* name, const BoundTensor& t, const Layout& host);
  // Makes host copies of the Q rows and K heads a CPU builder of `config` reads for `heads`.
  absl::Status EnsureHost(const MethodConfig& config, const std::vector<int>& heads);
  absl::Status SyncCopies();
  // Engine errors: hints for a full workspace, and device health after internal errors.
  absl::Status Engine(const absl::Status& s);

  // Where the index of one head group lives.
  struct GroupIndex {
    bool dense_all = false;  // Dense over every head: the dense kernel, no index.
    bool on_device = false;  // Built on the GPU and kept there (`gpu`).
    bool host_complete = false;
    MethodConfig config;
    GpuSparseIndex gpu;
  };

  CudaBackend* const backend_;
  std::unique_lock<std::mutex> lock_;
  // By the host SparseIndex the pipeline holds for the group (stable for the call).
  std::map<const SparseIndex*, GroupIndex> groups_;
  std::shared_ptr<const LayerAssets> assets_;
  const int es_;
  AttentionProblem dp_;  // Device pointers (in place or staged), contiguous where staged.
  AttentionProblem hp_;  // Host view for CPU builders and recall (pointers set as copies arrive).
  int64_t staged_ = 0;   // Bytes of the staging pool in use.
  // Host Q/K given by the request (used in place) or mirrors filled from the device on demand.
  bool q_on_host_ = false, k_on_host_ = false;
  HandleKind q_kind_ = HandleKind::kInline, k_kind_ = HandleKind::kInline;
  std::unique_ptr<uint8_t[]> q_mirror_, k_mirror_;
  std::vector<int> q_rows_have_;  // Per q head: rows per sequence mirrored (INT_MAX = all).
  std::vector<bool> k_have_;      // Per kv head.
  // A host output: staged on the device, copied back by Finish.
  bool out_on_host_ = false;
  void* host_out_ = nullptr;
  int64_t out_token_stride_ = 0, out_head_stride_ = 0;  // Of the request's output (elements).
  HandleKind out_kind_ = HandleKind::kInline;
  float* host_lse_ = nullptr;
  std::vector<CopiedBytes> copies_;
  double kernel_seconds_ = 0;
  double transfer_seconds_ = 0;
};

class CudaBackend : public AttentionBackend {
 public:
  CudaBackend(const CudaBackendOptions& options, std::unique_ptr<CudaAttentionEngine> engine,
              std::unique_ptr<CudaDeviceBuffer> staging, std::unique_ptr<CudaCopyStream> copier)
      : options_(options),
        engine_(std::move(engine)),
        staging_(std::move(staging)),
        copier_(std::move(copier)) {}

  std::string kind() const override { return "cuda"; }
  int ordinal() const override { return options_.device; }
  bool MethodAvailable(Method method) const override {
    return CudaAttentionEngine::GpuBuilderAvailable(method) || CpuBuilderAvailable(method);
  }
  bool DeviceBuilder(Method method) const override { return GpuBuilderAvailable(method); }
  absl::Status CheckDType(DType dtype) const override {
    if (dtype == DType::kBF16 || dtype == DType::kF16) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("dtype: ", DTypeName(dtype), " is not computed on ", name(),
                     " (the CUDA kernels take bf16 and fp16); send bf16/fp16, or use a worker "
                     "with --devices=cpu"));
  }
  absl::Status Health() const override {
    std::lock_guard<std::mutex> lock(health_mu_);
    return failed_;
  }

  absl::StatusOr<std::unique_ptr<BackendCall>> Begin(const AttentionProblem& problem,
                                                     const RequestTensors& tensors) override {
    SPATTN_RETURN_IF_ERROR(Usable());
    SPATTN_RETURN_IF_ERROR(CheckDType(problem.dtype));
    if (problem.head_dim != 64 && problem.head_dim != 128) {
      return absl::FailedPreconditionError(
          absl::StrCat("head_dim: ", problem.head_dim, " is not computed on ", name(),
                       " (the CUDA kernels take 64 and 128); use a worker with --devices=cpu"));
    }
    std::unique_lock<std::mutex> lock(call_mu_);
    auto call = std::make_unique<CudaCall>(this, std::move(lock), problem);
    SPATTN_RETURN_IF_ERROR(call->Bind(tensors));
    return std::unique_ptr<BackendCall>(std::move(call));
  }

  // After an error that may come from the device: marks the backend failed when the GPU no
  // longer works (sticky CUDA error), so that health turns NOT_SERVING.
  void CheckDevice() {
    const absl::Status s = CudaDeviceCheck(options_.device);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(health_mu_);
    if (failed_.ok()) failed_ = s;
  }

  absl::Status Usable() const {
    const absl::Status h = Health();
    if (h.ok()) return h;
    return absl::UnavailableError(absl::StrCat(name(),
                                               " failed earlier and serves no more "
                                               "requests (",
                                               h.message(), "); restart the worker"));
  }

  // Saap's assets of a layer on this GPU: uploaded on first use and kept (least recently used
  // evicted first, within options.saap_assets_bytes). UNIMPLEMENTED (remembered) when the GPU
  // builder cannot run the layer's classifier. Called under the call lock.
  absl::StatusOr<const CudaLayerAssets*> DeviceAssets(
      const std::shared_ptr<const LayerAssets>& assets, int head_dim) {
    for (auto it = assets_cache_.begin(); it != assets_cache_.end(); ++it) {
      if (it->host != assets || it->head_dim != head_dim) continue;
      assets_cache_.splice(assets_cache_.begin(), assets_cache_, it);
      if (!it->status.ok()) return it->status;
      return it->dev.get();
    }
    CachedAssets c;
    c.host = assets;
    c.head_dim = head_dim;
    auto dev = engine_->UploadLayerAssets(*assets, head_dim);
    if (dev.ok()) {
      c.dev = std::move(*dev);
      c.bytes = c.dev->bytes();
    } else if (dev.status().code() == absl::StatusCode::kUnimplemented) {
      c.status = dev.status();
    } else {
      return dev.status();
    }
    assets_cache_.push_front(std::move(c));
    cached_bytes_ += assets_cache_.front().bytes;
    while (cached_bytes_ > options_.saap_assets_bytes && assets_cache_.size() > 1) {
      cached_bytes_ -= assets_cache_.back().bytes;
      assets_cache_.pop_back();
    }
    if (!assets_cache_.front().status.ok()) return assets_cache_.front().status;
    return assets_cache_.front().dev.get();
  }

  const CudaBackendOptions& options() const { return options_; }
  CudaAttentionEngine& engine() { return *engine_; }
  CudaDeviceBuffer* staging() { return staging_.get(); }
  CudaCopyStream& copier() { return *copier_; }

 private:
  const CudaBackendOptions options_;
  std::unique_ptr<CudaAttentionEngine> engine_;
  std::unique_ptr<CudaDeviceBuffer> staging_;  // Null when staging_bytes is 0.
  std::unique_ptr<CudaCopyStream> copier_;
  struct CachedAssets {
    std::shared_ptr<const LayerAssets> host;  // Held: its address is the key.
    int head_dim = 0;
    std::unique_ptr<CudaLayerAssets> dev;
    absl::Status status;  // UNIMPLEMENTED: the GPU builder cannot take these assets.
    int64_t bytes = 0;
  };
  std::list<CachedAssets> assets_cache_;  // Most recently used first; guarded by call_mu_.
  int64_t cached_bytes_ = 0;
  std::mutex call_mu_;  // One request at a time owns the stream, the pools and the copier.
  mutable std::mutex health_mu_;
  absl::Status failed_;  // Guarded by health_mu_.
};

CudaCall::CudaCall(CudaBackend* backend, std::unique_lock<std::mutex> lock,
                   const AttentionProblem& p)
    : backend_(backend), lock_(std::move(lock)), es_(DTypeSize(p.dtype)), dp_(p), hp_(p) {
  dp_.space = MemorySpace::kCuda;
  hp_.space = MemorySpace::kHost;
  hp_.q.data = hp_.k.data = hp_.v.data = nullptr;
  hp_.o = nullptr;
  hp_.maybe_lse = nullptr;
  backend_->engine().ReleaseIndexes();  // Indexes of an earlier request (normally none).
}

CudaCall::~CudaCall() {
  // A call that failed half way may leave copies in flight: they read request memory and write
  // the staging pool, neither of which may change under them.
  (void)backend_->copier().Sync();
  backend_->engine().ReleaseIndexes();
}

absl::StatusOr<void*> CudaCall::Stage(const char* name, int64_t bytes) {
  const int64_t start = (staged_ + kAlign - 1) / kAlign * kAlign;
  CudaDeviceBuffer* pool = backend_->staging();
  const int64_t capacity = pool == nullptr ? 0 : pool->bytes();
  if (start + bytes > capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": the GPU staging pool of ", backend_->name(),
                     " is too small for this request's "
                     "host tensors: needs ",
                     start + bytes, " bytes, has ", capacity,
                     " (raise --gpu_staging_bytes, or pass the tensors in GPU memory)"));
  }
  staged_ = start + bytes;
  return static_cast<uint8_t*>(pool->data()) + start;
}

absl::StatusOr<const void*> CudaCall::Upload(const char* name, const BoundTensor& t,
                                             const Layout& host) {
  const int64_t row = int64_t{dp_.head_dim} * es_;
  const int64_t packed_token = row * host.heads;
  SPATTN_ASSIGN_OR_RETURN(void* dev, Stage(name, host.tokens * packed_token));
  CudaCopyStream& c = backend_->copier();
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  if (host.head_stride == dp_.head_dim || host.heads == 1) {
    // Whole tokens are contiguous on the host (the usual case: one copy).
    SPATTN_RETURN_IF_ERROR(
        c.ToDevice(dev, packed_token, src, host.token_stride * es_, packed_token, host.tokens));
  } else {
    for (int h = 0; h < host.heads; ++h) {
      SPATTN_RETURN_IF_ERROR(c.ToDevice(static_cast<uint8_t*>(dev) + h * row, packed_token,
                                        src + h * host.head_stride * es_, host.token_stride * es_,
                                        row, host.tokens));
    }
  }
  copies_.push_back({true, t.kind, host.tokens * packed_token});
  return static_cast<const void*>(dev);
}

absl::Status CudaCall::SyncCopies() {
  auto s = backend_->copier().Sync();
  if (!s.ok()) {
    backend_->CheckDevice();
    return s.status();
  }
  transfer_seconds_ += *s;
  return absl::OkStatus();
}

absl::Status CudaCall::Bind(const RequestTensors& t) {
  const int device = backend_->ordinal();
  const int hq = dp_.num_q_heads, hk = dp_.num_kv_heads;
  const int64_t tq = dp_.total_q(), tk = dp_.total_k();
  struct Input {
    const char* name;
    const BoundTensor* bound;
    TokenTensor* dev;
    TokenTensor* host;
    int heads;
    int64_t tokens;
  };
  for (const Input& in :
       {Input{"q", &t.q, &dp_.q, &hp_.q, hq, tq}, Input{"k", &t.k, &dp_.k, &hp_.k, hk, tk},
        Input{"v", &t.v, &dp_.v, &hp_.v, hk, tk}}) {
    const BoundTensor& b = *in.bound;
    if (b.space == MemorySpace::kCuda) {
      if (b.device != device) {
        return absl::FailedPreconditionError(
            absl::StrCat(in.name, ": the tensor is in the memory of GPU ", b.device,
                         ", and this request "
                         "runs on ",
                         backend_->name(), " (the worker serves no GPU ", b.device, ")"));
      }
      in.dev->data = b.data;
      continue;
    }
    // Host memory: the builders may read it in place; the kernel reads a packed device copy.
    in.host->data = b.data;
    const Layout host{in.tokens, in.heads, in.dev->token_stride, in.dev->head_stride};
    SPATTN_ASSIGN_OR_RETURN(in.dev->data, Upload(in.name, b, host));
    in.dev->head_stride = dp_.head_dim;
    in.dev->token_stride = int64_t{in.heads} * dp_.head_dim;
  }
  q_on_host_ = t.q.space == MemorySpace::kHost;
  k_on_host_ = t.k.space == MemorySpace::kHost;
  q_kind_ = t.q.kind;
  k_kind_ = t.k.kind;
  if (t.o.space == MemorySpace::kCuda) {
    if (t.o.device != device) {
      return absl::FailedPreconditionError(
          absl::StrCat("output: the tensor is in the memory of GPU ", t.o.device,
                       ", and this request runs "
                       "on ",
                       backend_->name(), " (the worker serves no GPU ", t.o.device, ")"));
    }
    dp_.o = t.o.data;
  } else {
    out_on_host_ = true;
    host_out_ = t.o.data;
    out_token_stride_ = dp_.o_token_stride;
    out_head_stride_ = dp_.o_head_stride;
    out_kind_ = t.o.kind;
    SPATTN_ASSIGN_OR_RETURN(dp_.o, Stage("output", tq * hq * dp_.head_dim * es_));
    dp_.o_head_stride = dp_.head_dim;
    dp_.o_token_stride = int64_t{hq} * dp_.head_dim;
  }
  if (t.maybe_lse != nullptr) {
    host_lse_ = t.maybe_lse;
    SPATTN_ASSIGN_OR_RETURN(void* lse, Stage("lse", tq * hq * int64_t{sizeof(float)}));
    dp_.maybe_lse = static_cast<float*>(lse);
  }
  SPATTN_RETURN_IF_ERROR(SyncCopies());
  return dp_.Validate();
}

absl::Status CudaCall::Engine(const absl::Status& s) {
  if (s.ok()) return s;
  if (s.code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(
        absl::StrCat(backend_->name(), ": ", s.message(), " (raise --gpu_workspace_bytes)"));
  }
  if (s.code() == absl::StatusCode::kInternal) backend_->CheckDevice();
  return absl::Status(s.code(), absl::StrCat(backend_->name(), ": ", s.message()));
}

absl::Status CudaCall::EnsureHost(const MethodConfig& config, const std::vector<int>& heads) {
  const int hq = dp_.num_q_heads, hk = dp_.num_kv_heads, d = dp_.head_dim;
  const int64_t row = int64_t{d} * es_;
  CudaCopyStream& c = backend_->copier();
  int64_t down_q = 0, down_k = 0;
  // Mirrors are packed [tokens, heads, d]; they are filled head by head as builders ask.
  if (!q_on_host_) {
    if (q_mirror_ == nullptr) {
      q_mirror_.reset(new uint8_t[static_cast<size_t>(dp_.total_q()) * hq * row]);
      q_rows_have_.assign(hq, 0);
      hp_.q.data = q_mirror_.get();
      hp_.q.head_stride = d;
      hp_.q.token_stride = int64_t{hq} * d;
    }
    // Vertical-slash reads only the last last_q queries of each sequence; the others all rows.
    const int need =
        config.method == Method::kVerticalSlash ? config.vertical_slash.last_q : INT_MAX;
    const uint8_t* src = static_cast<const uint8_t*>(dp_.q.data);
    for (int h : heads) {
      if (q_rows_have_[h] >= need) continue;
      for (int b = 0; b < dp_.batch(); ++b) {
        const int64_t n = std::min<int64_t>(need, dp_.q_len(b));
        const int64_t first = dp_.cu_seqlens_q[b + 1] - n;
        SPATTN_RETURN_IF_ERROR(
            c.ToHost(q_mirror_.get() + (first * hq + h) * row, hq * row,
                     src + (first * dp_.q.token_stride + int64_t{h} * dp_.q.head_stride) * es_,
                     dp_.q.token_stride * es_, row, n));
        down_q += n * row;
      }
      q_rows_have_[h] = need;
    }
  }
  if (!k_on_host_) {
    if (k_mirror_ == nullptr) {
      k_mirror_.reset(new uint8_t[static_cast<size_t>(dp_.total_k()) * hk * row]);
      k_have_.assign(hk, false);
      hp_.k.data = k_mirror_.get();
      hp_.k.head_stride = d;
      hp_.k.token_stride = int64_t{hk} * d;
    }
    const uint8_t* src = static_cast<const uint8_t*>(dp_.k.data);
    for (int h : heads) {
      const int kv = dp_.kv_head_of(h);
      if (k_have_[kv]) continue;
      SPATTN_RETURN_IF_ERROR(c.ToHost(k_mirror_.get() + kv * row, hk * row,
                                      src + int64_t{kv} * dp_.k.head_stride * es_,
                                      dp_.k.token_stride * es_, row, dp_.total_k()));
      down_k += dp_.total_k() * row;
      k_have_[kv] = true;
    }
  }
  SPATTN_RETURN_IF_ERROR(SyncCopies());
  if (down_q > 0) copies_.push_back({false, q_kind_, down_q});
  if (down_k > 0) copies_.push_back({false, k_kind_, down_k});
  // Builders never read V or O, but the problem must name valid host memory for them: Q and K
  // have the shapes of O and V.
  if (hp_.v.data == nullptr) hp_.v = hp_.k;
  hp_.o = const_cast<void*>(hp_.q.data);
  hp_.o_token_stride = hp_.q.token_stride;
  hp_.o_head_stride = hp_.q.head_stride;
  return absl::OkStatus();
}

absl::Status CudaCall::BuildIndex(const MethodConfig& config, const std::vector<int>& heads,
                                  const BuildOptions& options, SparseIndex* index) {
  GroupIndex& g = groups_[index];
  g = GroupIndex();
  g.config = config;
  AttentionProblem sizes = dp_;  // For what reads only the sizes.
  sizes.space = MemorySpace::kHost;
  if (config.method == Method::kDense && static_cast<int>(heads.size()) == dp_.num_q_heads) {
    // Every head dense: the dense kernel needs no index (the stats count the allowed pairs).
    g.dense_all = true;
    InitSparseIndex(sizes, heads, options.block_m, index);
    return absl::OkStatus();
  }
  if (backend_->DeviceBuilder(config.method)) {
    GpuBuildOptions o;
    o.block_m = options.BlockRowsFor(config.method);
    o.sampled_lines_gammas = options.sampled_lines_gammas;
    bool on_gpu = true;
    if (config.method == Method::kSaap && assets_ != nullptr) {
      auto dev = backend_->DeviceAssets(assets_, dp_.head_dim);
      if (dev.ok()) {
        o.maybe_assets = *dev;
      } else if (GpuBuildGoesToCpu(config.method, dev.status())) {
        on_gpu = false;  // A classifier past the GPU builder's limits: the CPU builder takes it.
      } else {
        return Engine(dev.status());
      }
    }
    if (on_gpu) {
      // Plan: built on the GPU and kept in the engine's workspace for Attend (no host copy).
      auto built = BuildIndexOnGpu(backend_->engine(), dp_, config, heads, o);
      if (built.ok()) {
        g.on_device = true;
        g.gpu = std::move(*built);
        InitSparseIndex(sizes, heads, g.gpu.view.block_m, index);
        return absl::OkStatus();
      }
      // A request past the GPU builder's limits (checked before any launch: e.g. Saap's top_l,
      // sampled_lines' rows per block) is the CPU builder's, as Saap's assets past them are above.
      if (!GpuBuildGoesToCpu(config.method, built.status())) {
        return Engine(built.status());
      }
    }
  }
  // On the host CPU from host Q/K; Attend uploads the index.
  SPATTN_RETURN_IF_ERROR(EnsureHost(config, heads));
  SPATTN_RETURN_IF_ERROR(BuildSparseIndex(hp_, config, heads, options, index));
  g.host_complete = true;
  return absl::OkStatus();
}

absl::Status CudaCall::Attend(const MethodConfig& config, const SparseIndex& index) {
  CudaStageTimes t;
  CudaAttentionEngine& engine = backend_->engine();
  auto it = groups_.find(&index);
  absl::Status s;
  if (it != groups_.end() && it->second.dense_all) {
    s = engine.RunDense(dp_, &t);
  } else if (it != groups_.end() && it->second.on_device) {
    s = engine.RunSparseDeviceIndex(dp_, it->second.gpu.view, &t);  // Run: the kept index.
  } else {
    s = engine.RunSparse(dp_, index, &t);  // A host-built index: validated, uploaded.
  }
  SPATTN_RETURN_IF_ERROR(Engine(s));
  kernel_seconds_ += t.schedule_seconds + t.kernel_seconds;
  transfer_seconds_ += t.upload_seconds + t.download_seconds;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> CudaCall::ComputedPairsPerSlot(const AttentionProblem& problem,
                                                                    const MethodConfig& config,
                                                                    const SparseIndex& index) {
  auto it = groups_.find(&index);
  if (it != groups_.end() && it->second.dense_all) {
    return std::vector<int64_t>(index.num_heads(), AllowedPairs(problem));
  }
  if (it != groups_.end() && it->second.on_device && !it->second.host_complete) {
    auto pairs = ComputedPairsOnGpu(backend_->engine(), dp_, it->second.gpu);
    if (!pairs.ok()) return Engine(pairs.status());
    return pairs;
  }
  return BackendCall::ComputedPairsPerSlot(problem, config, index);
}

absl::Status CudaCall::CompleteHostIndex(SparseIndex* index) {
  auto it = groups_.find(index);
  if (it == groups_.end() || it->second.host_complete) return absl::OkStatus();
  GroupIndex& g = it->second;
  if (g.dense_all) {
    AttentionProblem sizes = dp_;
    sizes.space = MemorySpace::kHost;
    BuildOptions o;
    o.block_m = index->block_m;
    std::vector<int> heads(index->heads.begin(), index->heads.end());
    SPATTN_RETURN_IF_ERROR(BuildSparseIndex(sizes, g.config, heads, o, index));
  } else if (g.on_device) {
    SPATTN_RETURN_IF_ERROR(Engine(DownloadIndex(backend_->engine(), g.gpu, index)));
  }
  g.host_complete = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CudaCall::MassRecall(SparseIndex* index, int rows,
                                                         uint64_t seed) {
  auto it = groups_.find(index);
  if (it != groups_.end() && it->second.dense_all) {
    return std::vector<double>(index->num_heads(), 1.0);
  }
  // On the GPU from the device Q/K and the index where it is (a host-built index is uploaded
  // into the workspace): no host copy of Q/K.
  AttentionProblem sizes = dp_;
  sizes.space = MemorySpace::kHost;
  std::vector<std::pair<int, int>> probe;
  for (const SampledRow& r : SampleQueryRows(sizes, rows, seed)) probe.push_back({r.seq, r.row});
  const SparseIndexView* device =
      it != groups_.end() && it->second.on_device ? &it->second.gpu.view : nullptr;
  auto recall = MassRecallOnGpu(backend_->engine(), dp_, *index, device, probe);
  if (!recall.ok()) return Engine(recall.status());
  return recall;
}

absl::Status CudaCall::Finish() {
  const int hq = dp_.num_q_heads;
  const int64_t tq = dp_.total_q();
  CudaCopyStream& c = backend_->copier();
  if (out_on_host_ && tq > 0) {
    // The request's output layout (strides from the problem), from the packed device copy.
    const int64_t row = int64_t{dp_.head_dim} * es_;
    uint8_t* dst = static_cast<uint8_t*>(host_out_);
    const uint8_t* src = static_cast<const uint8_t*>(dp_.o);
    if (out_head_stride_ == dp_.head_dim || hq == 1) {
      SPATTN_RETURN_IF_ERROR(c.ToHost(dst, out_token_stride_ * es_, src, hq * row, hq * row, tq));
    } else {
      for (int h = 0; h < hq; ++h) {
        SPATTN_RETURN_IF_ERROR(c.ToHost(dst + h * out_head_stride_ * es_, out_token_stride_ * es_,
                                        src + h * row, hq * row, row, tq));
      }
    }
    copies_.push_back({false, out_kind_, tq * hq * row});
  }
  if (host_lse_ != nullptr && tq > 0) {
    const int64_t bytes = tq * hq * int64_t{sizeof(float)};
    SPATTN_RETURN_IF_ERROR(c.ToHost(host_lse_, bytes, dp_.maybe_lse, bytes, bytes, 1));
    copies_.push_back({false, HandleKind::kInline, bytes});
  }
  return SyncCopies();
}

absl::StatusOr<const AttentionProblem*> CudaCall::HostView() {
  std::vector<int> all(dp_.num_q_heads);
  for (int h = 0; h < dp_.num_q_heads; ++h) all[h] = h;
  MethodConfig every_row;  // Dense: all query rows.
  SPATTN_RETURN_IF_ERROR(EnsureHost(every_row, all));
  return &hp_;
}

}  // namespace

bool GpuBuildGoesToCpu(Method method, const absl::Status& gpu_status) {
  return gpu_status.code() == absl::StatusCode::kUnimplemented && CpuBuilderAvailable(method);
}

absl::StatusOr<std::unique_ptr<AttentionBackend>> MakeCudaBackend(
    const CudaBackendOptions& options) {
  if (options.staging_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_staging_bytes must be >= 0, got ", options.staging_bytes));
  }
  CudaEngineOptions eo;
  eo.kernel_variant = options.kernel_variant;
  auto engine = CudaAttentionEngine::Create(options.device, options.workspace_bytes, eo);
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("cuda:", options.device, ": ", engine.status().message()));
  }
  std::unique_ptr<CudaDeviceBuffer> staging;
  if (options.staging_bytes > 0) {
    auto buf = CudaDeviceBuffer::Allocate(options.device, options.staging_bytes);
    if (!buf.ok()) {
      return absl::Status(
          buf.status().code(),
          absl::StrCat("cuda:", options.device, ": cannot reserve a ", options.staging_bytes,
                       "-byte staging pool (", buf.status().message(), ")"));
    }
    staging = std::move(*buf);
  }
  auto copier = CudaCopyStream::Create(options.device);
  if (!copier.ok()) return copier.status();
  return std::unique_ptr<AttentionBackend>(
      new CudaBackend(options, std::move(*engine), std::move(staging), std::move(*copier)));
}

}  // namespace spattn
