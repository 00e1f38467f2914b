#include "server/pipeline.h"

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/fidelity.h"
#include "kernels/status_macros.h"
#include "server/cuda_ipc.h"
#include "server/planner.h"

namespace spattn {
namespace {

// Keeps what the resolved pointers of one request point into.
struct Bindings {
  std::vector<std::shared_ptr<void>> keepalive;
  uint64_t cuda_devices = 0;  // Bit d: a tensor lives on CUDA device d.
};

class Stopwatch {
 public:
  Stopwatch() : start_(absl::Now()) {}
  double Lap() {
    const absl::Time now = absl::Now();
    const double s = absl::ToDoubleSeconds(now - start_);
    start_ = now;
    return s;
  }

 private:
  absl::Time start_;
};

absl::Status CheckControl(const CallControl& control, const char* before) {
  // The deadline first: gRPC also marks a call cancelled once its deadline passes.
  if (absl::Now() > control.deadline) {
    return absl::DeadlineExceededError(absl::StrCat("deadline passed before ", before));
  }
  if (control.cancelled && control.cancelled()) {
    return absl::CancelledError(absl::StrCat("cancelled by the client before ", before));
  }
  return absl::OkStatus();
}

absl::StatusOr<RegionSlice> ResolveSlice(const std::string& owner, const TensorSpec& t,
                                         RegionManager* regions) {
  const RegionCaller caller{owner};
  if (t.kind == HandleKind::kCudaIpc) {
    return regions->ResolveIpc(caller, t.field + ".cuda_ipc", t.ipc_handle, t.device_id,
                               t.device_uuid, t.offset, static_cast<uint64_t>(t.bytes));
  }
  return regions->Resolve(caller, t.field + ".region", t.region_name, t.offset,
                          static_cast<uint64_t>(t.bytes));
}

BoundTensor FromSlice(const RegionSlice& slice, int64_t bytes, Bindings* b) {
  b->keepalive.push_back(slice.keepalive);
  if (slice.space == MemorySpace::kCuda && slice.device < 64) {
    b->cuda_devices |= uint64_t{1} << slice.device;
  }
  BoundTensor t;
  t.data = slice.data;
  t.space = slice.space;
  t.device = slice.device;
  t.kind = slice.kind;
  t.bytes = bytes;
  return t;
}

// Where the bytes of input `t` are (host or device memory, as the handle says).
absl::StatusOr<BoundTensor> BindInput(const std::string& owner, const TensorSpec& t,
                                      RegionManager* regions, WorkerMetrics* metrics, Bindings* b) {
  if (metrics) metrics->Transfer(true, t.kind, t.bytes);
  if (t.kind == HandleKind::kInline) {
    BoundTensor bound;
    bound.data = const_cast<char*>(t.inline_bytes->data());
    bound.kind = HandleKind::kInline;
    bound.bytes = t.bytes;
    return bound;
  }
  SPATTN_ASSIGN_OR_RETURN(RegionSlice slice, ResolveSlice(owner, t, regions));
  return FromSlice(slice, t.bytes, b);
}

// Where the kernel's output goes.
absl::StatusOr<BoundTensor> BindOutput(ParsedRequest& req, RegionManager* regions,
                                       WorkerMetrics* metrics, Bindings* b,
                                       v1::AttentionResponse* response) {
  if (!req.output.has_value()) {
    const AttentionProblem& p = req.problem;
    BoundTensor bound;
    bound.data = PrepareInlineOutput(req, response);
    bound.kind = HandleKind::kInline;
    bound.bytes = int64_t{p.total_q()} * p.num_q_heads * p.head_dim * DTypeSize(p.dtype);
    if (metrics) metrics->Transfer(false, HandleKind::kInline, bound.bytes);
    return bound;
  }
  const TensorSpec& t = *req.output;
  SPATTN_ASSIGN_OR_RETURN(RegionSlice slice, ResolveSlice(req.region_owner, t, regions));
  if (!slice.writable) {
    return absl::FailedPreconditionError(
        absl::StrCat("output.region: region '", t.region_name, "' is read-only for the worker"));
  }
  if (metrics) metrics->Transfer(false, slice.kind, t.bytes);
  return FromSlice(slice, t.bytes, b);
}

absl::Status CheckAgainstModel(const ParsedRequest& req, const ModelConfig& m) {
  const AttentionProblem& p = req.problem;
  auto differ = [&](const char* field, int got, int want) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", got, " differs from model '", m.model_id, "' (", want, ")"));
  };
  if (p.num_q_heads != m.num_q_heads) return differ("num_q_heads", p.num_q_heads, m.num_q_heads);
  if (p.num_kv_heads != m.num_kv_heads) {
    return differ("num_kv_heads", p.num_kv_heads, m.num_kv_heads);
  }
  if (m.head_dim > 0 && p.head_dim != m.head_dim) return differ("head_dim", p.head_dim, m.head_dim);
  if (req.layer >= m.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer: ", req.layer,
                                                   " is not a layer of model '", m.model_id, "' (",
                                                   m.num_layers, " layers)"));
  }
  return absl::OkStatus();
}

}  // namespace

AttentionPipeline::AttentionPipeline(const PipelineOptions& options, RegionManager* regions,
                                     ConfigCache* maybe_cache, WorkerMetrics* maybe_metrics)
    : options_(options), regions_(regions), cache_(maybe_cache), metrics_(maybe_metrics) {}

void AttentionPipeline::UpdateGpuMemory(uint64_t devices_now) {
  const uint64_t touched = touched_devices_.fetch_or(devices_now) | devices_now;
  if (metrics_ == nullptr) return;
  uint64_t used = 0;
  for (int d = 0; d < 64; ++d) {
    if (touched & (uint64_t{1} << d)) used += CudaMemoryUsed(d);
  }
  metrics_->GpuMemoryUsed(used);
}

absl::Status AttentionPipeline::Run(ParsedRequest& req, AttentionBackend& backend,
                                    const CallControl& control, double parse_seconds,
                                    v1::AttentionResponse* response) {
  const absl::Time start = absl::Now();
  AttentionResult result;
  result.device = backend.kind();
  Stopwatch watch;
  auto stage_done = [&](Stage stage, double* slot) {
    *slot += watch.Lap();
    if (metrics_) metrics_->StageDone(stage, *slot);
  };
  AttentionProblem& p = req.problem;

  // Resolve handles.
  SPATTN_RETURN_IF_ERROR(CheckControl(control, "resolve"));
  SPATTN_RETURN_IF_ERROR(backend.CheckDType(p.dtype));
  InitAttentionResponse(req, response);
  Bindings bindings;
  RequestTensors tensors;
  SPATTN_ASSIGN_OR_RETURN(tensors.q,
                          BindInput(req.region_owner, req.q, regions_, metrics_, &bindings));
  SPATTN_ASSIGN_OR_RETURN(tensors.k,
                          BindInput(req.region_owner, req.k, regions_, metrics_, &bindings));
  SPATTN_ASSIGN_OR_RETURN(tensors.v,
                          BindInput(req.region_owner, req.v, regions_, metrics_, &bindings));
  SPATTN_ASSIGN_OR_RETURN(tensors.o, BindOutput(req, regions_, metrics_, &bindings, response));
  tensors.maybe_lse = req.return_lse ? PrepareInlineLse(req, response) : nullptr;
  if (backend.kind() == "cuda" && backend.ordinal() < 64) {
    bindings.cuda_devices |= uint64_t{1} << backend.ordinal();
  }
  SPATTN_ASSIGN_OR_RETURN(std::unique_ptr<BackendCall> call, backend.Begin(p, tensors));
  result.seconds.resolve = parse_seconds;
  stage_done(Stage::kResolve, &result.seconds.resolve);

  // Head configs.
  SPATTN_RETURN_IF_ERROR(CheckControl(control, "config"));
  std::shared_ptr<const ModelConfig> model;
  if (!req.model_id.empty()) {
    if (cache_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("model_id: '", req.model_id,
                       "' needs head configs, but this worker has no index service configured"));
    }
    SPATTN_ASSIGN_OR_RETURN(model, cache_->Get(req.model_id, req.config_version, control.deadline));
    SPATTN_RETURN_IF_ERROR(CheckAgainstModel(req, *model));
    result.config_version_used = model->version;
  } else if (req.config_version != 0) {
    return absl::InvalidArgumentError("config_version: set without a model_id");
  }
  PlanInput plan_in;
  plan_in.num_q_heads = p.num_q_heads;
  plan_in.layer = req.layer;
  plan_in.maybe_model = model.get();
  plan_in.maybe_method_override = req.method_override ? &*req.method_override : nullptr;
  plan_in.maybe_head_overrides = &req.head_overrides;
  plan_in.worker_default = options_.default_method;
  plan_in.dense_below_tokens = options_.dense_below_tokens;
  for (int b = 0; b < p.batch(); ++b) plan_in.max_k_len = std::max(plan_in.max_k_len, p.k_len(b));
  // The recall guard (below) starts each head from what it learned on earlier requests of this
  // length class (GuardMemory); `start_key[h]` names the head's entry (empty: not guarded).
  RecallGuardOptions guard = options_.guard;
  if (guard.probe_rows < 0) guard.probe_rows = backend.kind() == "cpu" ? 32 : 64;
  const bool learning = guard.probe_rows > 0 && guard.target > 0;
  // Published configs that record their calibration length start from their budgets scaled to
  // this length (before the guard's first estimate).
  plan_in.length_exponent = guard.length_exponent;
  std::vector<std::string> start_key(p.num_q_heads);
  // The published method of each head the guard may start from a learned config (its adaptive
  // tries follow it: RecallGuardOptions::adaptive_auto).
  std::vector<std::optional<Method>> configured(p.num_q_heads);
  std::deque<MethodConfig> learned;  // what plan_in.maybe_learned hands out
  if (learning) {
    plan_in.maybe_learned = [&](int h, const MethodConfig& c) -> const MethodConfig* {
      configured[h] = c.method;
      start_key[h] = GuardMemory::Key(req.model_id, model ? model->version : 0, req.layer, h, c,
                                      plan_in.max_k_len);
      MethodConfig m;
      if (!guard_memory_.Lookup(start_key[h], &m)) return nullptr;
      learned.push_back(m);
      return &learned.back();
    };
  }
  SPATTN_ASSIGN_OR_RETURN(
      Plan plan,
      MakePlan(
          plan_in, [&](Method m) { return backend.MethodAvailable(m); }, backend.kind()));
  std::shared_ptr<const LayerAssets> assets;
  BuildOptions build;
  build.block_m = options_.block_m;
  build.sampled_lines_block_m = options_.sampled_lines_block_m;  // sampled_lines: its own
  for (const HeadGroup& g : plan.groups) {
    if (g.config.method == Method::kSaap && model != nullptr && assets == nullptr) {
      SPATTN_ASSIGN_OR_RETURN(assets, cache_->GetAssets(*model, req.layer, control.deadline));
    }
  }
  build.maybe_assets = assets.get();
  if (assets != nullptr) call->UseLayerAssets(assets);
  stage_done(Stage::kConfig, &result.seconds.config);

  // Index builders: one per head group.
  std::vector<SparseIndex> indexes(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    SPATTN_RETURN_IF_ERROR(CheckControl(control, "index_build"));
    const absl::Status s = call->BuildIndex(plan.groups[g].config, plan.groups[g].heads,
                                            plan.groups[g].BuildOptionsFor(build), &indexes[g]);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("index build (", MethodName(plan.groups[g].config.method),
                                       ", layer ", req.layer, "): ", s.message()));
    }
  }
  stage_done(Stage::kIndexBuild, &result.seconds.index_build);

  // Recall guard: estimate every head (where the tensors are: BackendCall::MassRecall); widen
  // (or make dense) heads short of the target whose config the request did not force.
  // Replacement indexes run after their groups' (overwriting those heads' outputs).
  std::vector<GuardedHead> guarded;
  SPATTN_RETURN_IF_ERROR(CheckControl(control, "recall"));
  if (guard.probe_rows > 0) {
    // The heads short of the target are widened together: one build, estimate and count per
    // config group and ladder step (GuardHeads), not per head and try.
    GuardBatchOps ops;
    ops.build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
      return call->BuildIndex(c, hs, build, out);
    };
    // Heads whose tries differ only in per-head parameters (sampled_lines' gamma) share a build.
    ops.build_heads = [&](const std::vector<MethodConfig>& cs, const std::vector<int>& hs,
                          SparseIndex* out) {
      return call->BuildIndex(cs[0], hs, BuildOptionsForHeads(build, cs), out);
    };
    ops.estimate = [&](SparseIndex* index) {
      return call->MassRecall(index, guard.probe_rows, guard.seed);
    };
    ops.pairs = [&](const MethodConfig& c, SparseIndex* index) {
      return call->ComputedPairsPerSlot(p, c, *index);
    };
    std::vector<GuardInput> inputs;
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      std::vector<double> estimates(indexes[g].num_heads(), 1.0);
      if (plan.groups[g].config.method != Method::kDense) {
        SPATTN_ASSIGN_OR_RETURN(estimates,
                                call->MassRecall(&indexes[g], guard.probe_rows, guard.seed));
      }
      for (int slot = 0; slot < indexes[g].num_heads(); ++slot) {
        const int h = indexes[g].heads[slot];
        bool forced = req.method_override.has_value();
        for (const auto& ho : req.head_overrides) forced = forced || ho.first == h;
        GuardInput in;
        in.head = h;
        in.estimate = estimates[slot];
        in.config = plan.groups[g].head_configs[slot];
        in.configured = configured[h];
        in.widen = !forced;
        inputs.push_back(in);
      }
    }
    SPATTN_ASSIGN_OR_RETURN(guarded, GuardHeads(inputs, ops, guard));
    for (size_t i = 0; i < guarded.size(); ++i) {
      const int h = guarded[i].head;
      if (guarded[i].replaced && inputs[i].widen && !start_key[h].empty()) {
        guard_memory_.Remember(start_key[h], guarded[i].config);
      }
    }
  }
  const double guard_seconds = watch.Lap();
  result.seconds.recall += guard_seconds;

  // Kernel.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    SPATTN_RETURN_IF_ERROR(CheckControl(control, "kernel"));
    SPATTN_RETURN_IF_ERROR(call->Attend(plan.groups[g].config, indexes[g]));
  }
  // Replacement indexes (each shared by the heads widened together): once each.
  std::vector<const GuardedHead*> replacements;  // the first head of every distinct index
  for (const GuardedHead& gh : guarded) {
    if (!gh.replaced) continue;
    bool seen = false;
    for (const GuardedHead* r : replacements) seen = seen || r->index == gh.index;
    if (!seen) replacements.push_back(&gh);
  }
  for (const GuardedHead* gh : replacements) {
    SPATTN_RETURN_IF_ERROR(CheckControl(control, "kernel"));
    SPATTN_RETURN_IF_ERROR(call->Attend(gh->config, *gh->index));
  }
  const double kernel_wall = watch.Lap();
  const DeviceSeconds device = call->device_seconds();
  // A device's own measure of the kernel replaces the wall time (which includes launches and
  // index uploads); the difference stays in the total.
  result.seconds.kernel = device.kernel >= 0 ? device.kernel : kernel_wall;
  if (metrics_) metrics_->StageDone(Stage::kKernel, result.seconds.kernel);

  // Output and stats.
  SPATTN_RETURN_IF_ERROR(call->Finish());
  const int64_t allowed = AllowedPairs(p);
  int64_t computed_total = 0;
  result.heads.resize(p.num_q_heads);
  // Index and slot of every head (its guard replacement when it has one).
  std::vector<std::pair<const SparseIndex*, int>> where(p.num_q_heads);
  std::map<const SparseIndex*, std::vector<int64_t>> replaced_pairs;
  for (const GuardedHead* gh : replacements) {
    SPATTN_ASSIGN_OR_RETURN(replaced_pairs[gh->index.get()],
                            call->ComputedPairsPerSlot(p, gh->config, *gh->index));
  }
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const SparseIndex& index = indexes[g];
    // Counted where the index is (a device backend copies one number per head, not the index).
    SPATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> computed_per_slot,
                            call->ComputedPairsPerSlot(p, plan.groups[g].config, index));
    for (int slot = 0; slot < index.num_heads(); ++slot) {
      const int h = index.heads[slot];
      where[h] = {&index, slot};
      HeadResult& hr = result.heads[h];
      hr.head = h;
      hr.config = plan.groups[g].head_configs[slot];
      hr.recall = hr.config.method == Method::kDense ? 1.0 : -1.0;
      int64_t computed = computed_per_slot[slot];
      for (const GuardedHead& gh : guarded) {
        if (gh.head != h) continue;
        hr.recall = gh.estimate;
        if (gh.replaced) {
          where[h] = {gh.index.get(), gh.slot};
          hr.config = gh.config;
          computed = replaced_pairs.at(gh.index.get()).at(gh.slot);
        }
      }
      computed_total += computed;
      hr.density = allowed > 0 ? static_cast<double>(computed) / allowed : 0.0;
      if (metrics_) metrics_->HeadDone(hr.config.method, hr.density);
    }
  }
  result.seconds.output += watch.Lap();
  if (req.estimate_recall) {
    // Exact over all allowed keys for a fixed sample of rows, where the tensors are (on the GPU
    // for a device backend); its own stage (recall).
    auto exact = [&](SparseIndex* index) -> absl::StatusOr<std::vector<double>> {
      auto r = call->MassRecall(index, options_.recall_sample_rows, options_.recall_seed);
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("estimate_recall: ", r.status().message()));
      }
      return r;
    };
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      SPATTN_RETURN_IF_ERROR(CheckControl(control, "recall"));
      bool any = false;  // a slot that still runs this group's index
      for (int slot = 0; slot < indexes[g].num_heads(); ++slot) {
        any = any || where[indexes[g].heads[slot]].first == &indexes[g];
      }
      if (!any || plan.groups[g].config.method == Method::kDense) continue;
      SPATTN_ASSIGN_OR_RETURN(std::vector<double> r, exact(&indexes[g]));
      for (int slot = 0; slot < indexes[g].num_heads(); ++slot) {
        const int h = indexes[g].heads[slot];
        if (where[h].first == &indexes[g]) result.heads[h].recall = r[slot];
      }
    }
    for (const GuardedHead* gh : replacements) {
      if (gh->config.method == Method::kDense) continue;
      SPATTN_RETURN_IF_ERROR(CheckControl(control, "recall"));
      SPATTN_ASSIGN_OR_RETURN(std::vector<double> r, exact(gh->index.get()));
      for (int slot = 0; slot < gh->index->num_heads(); ++slot) {
        result.heads[gh->index->heads[slot]].recall = r[slot];
      }
    }
  }
  result.seconds.recall += watch.Lap();
  if (metrics_) {
    metrics_->StageDone(Stage::kRecall, result.seconds.recall);
    for (const HeadResult& hr : result.heads) {
      if (hr.recall >= 0) metrics_->Recall(hr.config.method, hr.recall);
    }
  }
  result.density = allowed > 0 ? static_cast<double>(computed_total) /
                                     (static_cast<double>(allowed) * p.num_q_heads)
                               : 0.0;
  if (metrics_) {
    metrics_->PrefillTokens(p.total_q());
    for (const CopiedBytes& c : call->copies()) metrics_->Copy(c.to_device, c.kind, c.bytes);
  }
  if (bindings.cuda_devices != 0) UpdateGpuMemory(bindings.cuda_devices);
  const DeviceSeconds final_device = call->device_seconds();
  result.seconds.transfer = final_device.transfer >= 0 ? final_device.transfer : 0;
  stage_done(Stage::kOutput, &result.seconds.output);
  result.seconds.total = parse_seconds + absl::ToDoubleSeconds(absl::Now() - start);
  FillAttentionResult(req, result, response);
  return absl::OkStatus();
}

}  // namespace spattn
