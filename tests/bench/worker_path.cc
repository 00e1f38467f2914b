#include "tests/bench/worker_path.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "kernels/status_macros.h"
#include "server/backend.h"
#include "server/cuda_backend.h"
#include "server/recall_guard.h"

namespace spattn {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

BoundTensor Device(const void* data, int device) {
  BoundTensor t;
  t.data = const_cast<void*>(data);
  t.space = MemorySpace::kCuda;
  t.device = device;
  t.kind = HandleKind::kCudaIpc;
  return t;
}

// Hands `call` the layer's assets in options.maybe_assets (Saap's centroids and classifiers), if
// any: the worker holds them in a shared_ptr (its config cache); here the caller keeps them alive.
void UseCallerAssets(const BuildOptions& options, BackendCall& call) {
  if (options.maybe_assets != nullptr) {
    call.UseLayerAssets(
        std::shared_ptr<const LayerAssets>(options.maybe_assets, [](const LayerAssets*) {}));
  }
}

}  // namespace

struct WorkerCudaPath::Rep {
  int device = 0;
  std::unique_ptr<AttentionBackend> backend;
  std::unique_ptr<BackendCall> call;
  AttentionProblem problem;
  GuardMemory memory;  // Guard: what it learned on earlier calls (as the worker's pipeline)
};

WorkerCudaPath::WorkerCudaPath(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
WorkerCudaPath::~WorkerCudaPath() { End(); }

absl::StatusOr<std::unique_ptr<WorkerCudaPath>> WorkerCudaPath::Create(int device,
                                                                       int64_t workspace_bytes) {
  CudaBackendOptions o;
  o.device = device;
  o.workspace_bytes = workspace_bytes;
  o.staging_bytes = 0;
  auto rep = std::make_unique<Rep>();
  rep->device = device;
  SPATTN_ASSIGN_OR_RETURN(rep->backend, MakeCudaBackend(o));
  return std::unique_ptr<WorkerCudaPath>(new WorkerCudaPath(std::move(rep)));
}

absl::Status WorkerCudaPath::Begin(const AttentionProblem& device_problem) {
  End();
  rep_->problem = device_problem;
  RequestTensors t;
  t.q = Device(device_problem.q.data, rep_->device);
  t.k = Device(device_problem.k.data, rep_->device);
  t.v = Device(device_problem.v.data, rep_->device);
  t.o = Device(device_problem.o, rep_->device);
  SPATTN_ASSIGN_OR_RETURN(rep_->call, rep_->backend->Begin(device_problem, t));
  return absl::OkStatus();
}

absl::StatusOr<double> WorkerCudaPath::BuildIndex(const MethodConfig& config,
                                                  const std::vector<int>& heads,
                                                  const BuildOptions& options, SparseIndex* index,
                                                  double* pairs_ms) {
  if (rep_->call == nullptr) return absl::FailedPreconditionError("BuildIndex before Begin");
  const auto start = std::chrono::steady_clock::now();
  UseCallerAssets(options, *rep_->call);
  SPATTN_RETURN_IF_ERROR(rep_->call->BuildIndex(config, heads, options, index));
  const double build_ms = MillisSince(start);
  const auto pairs_start = std::chrono::steady_clock::now();
  SPATTN_RETURN_IF_ERROR(rep_->call->ComputedPairsPerSlot(rep_->problem, config, *index).status());
  if (pairs_ms != nullptr) *pairs_ms = MillisSince(pairs_start);
  return build_ms;
}

absl::Status WorkerCudaPath::CompleteHostIndex(SparseIndex* index) {
  if (rep_->call == nullptr) return absl::FailedPreconditionError("no request");
  return rep_->call->CompleteHostIndex(index);
}

absl::StatusOr<double> WorkerCudaPath::Attend(const MethodConfig& config, const SparseIndex& index,
                                              double* device_ms) {
  if (rep_->call == nullptr) return absl::FailedPreconditionError("Attend before Begin");
  const double before = rep_->call->device_seconds().kernel;
  const auto start = std::chrono::steady_clock::now();
  SPATTN_RETURN_IF_ERROR(rep_->call->Attend(config, index));
  const double wall = MillisSince(start);
  if (device_ms != nullptr) *device_ms = (rep_->call->device_seconds().kernel - before) * 1e3;
  return wall;
}

absl::StatusOr<double> WorkerCudaPath::Guard(const std::vector<MethodConfig>& config_of_head,
                                             double target, int probe_rows,
                                             const BuildOptions& options,
                                             std::vector<MethodConfig>* guarded,
                                             std::vector<double>* estimates,
                                             std::vector<int>* widened, double* build_ms) {
  if (rep_->call == nullptr) return absl::FailedPreconditionError("Guard before Begin");
  BackendCall& call = *rep_->call;
  UseCallerAssets(options, call);  // as BuildIndex: the guard's builds go to the call
  const int hq = static_cast<int>(config_of_head.size());
  // As the worker: each head starts from what the guard learned on earlier calls of this length
  // class (GuardMemory), else from its config.
  int64_t max_k_len = 0;
  for (int b = 0; b < rep_->problem.batch(); ++b) {
    max_k_len = std::max<int64_t>(max_k_len, rep_->problem.k_len(b));
  }
  std::vector<std::string> key(hq);
  std::vector<MethodConfig> first(config_of_head.begin(), config_of_head.end());
  for (int h = 0; h < hq; ++h) {
    key[h] = GuardMemory::Key("", 0, 0, h, config_of_head[h], max_k_len);
    rep_->memory.Lookup(key[h], &first[h]);
  }
  guarded->assign(first.begin(), first.end());
  estimates->assign(hq, 1.0);
  widened->assign(hq, 0);
  // Groups of heads with equal configs but for per-head parameters (as the worker's planner
  // groups them: sampled_lines heads of different gammas share a build).
  std::map<std::string, std::vector<int>> by_config;
  for (int h = 0; h < hq; ++h) by_config[BuildGroupKey(first[h])].push_back(h);
  std::vector<std::unique_ptr<SparseIndex>> indexes;
  std::vector<MethodConfig> configs;
  auto start = std::chrono::steady_clock::now();
  for (const auto& g : by_config) {
    std::vector<MethodConfig> own;
    for (int h : g.second) own.push_back(first[h]);
    configs.push_back(own[0]);
    indexes.push_back(std::make_unique<SparseIndex>());
    SPATTN_RETURN_IF_ERROR(call.BuildIndex(configs.back(), g.second,
                                           BuildOptionsForHeads(options, own),
                                           indexes.back().get()));
  }
  *build_ms = MillisSince(start);
  start = std::chrono::steady_clock::now();
  RecallGuardOptions go;
  go.target = target;
  go.probe_rows = probe_rows;
  go.adaptive = adaptive_;
  go.adaptive_also = adaptive_also_;
  go.adaptive_auto = adaptive_auto_;
  // As the worker: the short heads widened together (GuardHeads).
  GuardBatchOps ops;
  ops.build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
    return call.BuildIndex(c, hs, options, out);
  };
  ops.build_heads = [&](const std::vector<MethodConfig>& cs, const std::vector<int>& hs,
                        SparseIndex* out) {
    return call.BuildIndex(cs[0], hs, BuildOptionsForHeads(options, cs), out);
  };
  ops.estimate = [&](SparseIndex* index) { return call.MassRecall(index, go.probe_rows, go.seed); };
  ops.pairs = [&](const MethodConfig& c, SparseIndex* index) {
    return call.ComputedPairsPerSlot(rep_->problem, c, *index);
  };
  std::vector<GuardInput> inputs;
  for (size_t g = 0; g < indexes.size(); ++g) {
    std::vector<double> est(indexes[g]->num_heads(), 1.0);
    if (configs[g].method != Method::kDense) {
      SPATTN_ASSIGN_OR_RETURN(est, call.MassRecall(indexes[g].get(), go.probe_rows, go.seed));
    }
    for (int slot = 0; slot < indexes[g]->num_heads(); ++slot) {
      GuardInput in;
      in.head = indexes[g]->heads[slot];
      in.estimate = est[slot];
      in.config = first[in.head];
      in.configured = config_of_head[in.head].method;  // as published (auto's tries follow it)
      inputs.push_back(in);
    }
  }
  // Replacement indexes stay alive while the request runs.
  SPATTN_ASSIGN_OR_RETURN(std::vector<GuardedHead> kept, GuardHeads(inputs, ops, go));
  for (const GuardedHead& gh : kept) {
    const int h = gh.head;
    if (gh.replaced) rep_->memory.Remember(key[h], gh.config);
    (*guarded)[h] = gh.config;
    (*estimates)[h] = gh.estimate;
    (*widened)[h] = gh.widened;
  }
  return MillisSince(start);
}

void WorkerCudaPath::End() {
  if (rep_ != nullptr && rep_->call != nullptr) {
    (void)rep_->call->Finish();
    rep_->call.reset();
  }
}

}  // namespace spattn
