// Plain structs that carry one attention request through the worker after validation: what each
// tensor handle names, the kernel problem, the overrides, and the result. No protobuf in here;
// server/convert.{h,cc} fills them from the wire messages and writes the response back.
#ifndef SPATTN_SERVER_REQUEST_H_
#define SPATTN_SERVER_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/method_config.h"
#include "kernels/problem.h"

namespace spattn {

// Where a tensor's bytes travel. Label values of spattn_transfer_bytes_total{handle_kind}.
enum class HandleKind {
  kInline,        // In the gRPC message.
  kSystemRegion,  // A registered POSIX shared-memory region.
  kCudaRegion,    // A registered CUDA IPC region.
  kCudaIpc,       // A raw cudaIpcMemHandle in the request.
};
const char* HandleKindName(HandleKind kind);  // "inline", "system", "cuda", "cuda_ipc"

// A validated tensor reference. Shapes and strides are already checked against the request's
// head counts, head_dim and cu_seqlens; `bytes` is the exact span the strided view covers.
struct TensorSpec {
  std::string field;  // "q", "k", "v" or "output": prefixes error messages.
  DType dtype = DType::kBF16;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t token_stride = 0;  // Elements.
  int64_t head_stride = 0;   // Elements.
  int64_t bytes = 0;         // Bytes from the first to one past the last element.
  HandleKind kind = HandleKind::kInline;
  // kInline: the bytes inside the request message (valid while the request lives).
  const std::string* inline_bytes = nullptr;
  // kSystemRegion / kCudaRegion: a registered region's name; offset into it.
  std::string region_name;
  uint64_t offset = 0;
  // kCudaIpc: the raw handle (64 bytes) and the device it lives on.
  std::string ipc_handle;
  std::string device_uuid;
  int device_id = 0;
};

// One request after validation and conversion.
struct ParsedRequest {
  std::string request_id;
  // The caller's region namespace (RegionCaller::owner): regions are resolved in it.
  std::string region_owner;
  std::string model_id;  // Empty: no model config (overrides or the worker default).
  uint64_t config_version = 0;
  int layer = 0;
  // Sizes, cu_seqlens, dtype, scale and strides set; data pointers are null until resolved.
  AttentionProblem problem;
  TensorSpec q, k, v;
  // Where the output goes; nullopt = returned inline with Q's dtype.
  std::optional<TensorSpec> output;
  std::optional<MethodConfig> method_override;
  std::vector<std::pair<int, MethodConfig>> head_overrides;  // (q head, config), heads unique.
  bool return_stats = false;
  bool estimate_recall = false;
  bool return_lse = false;
};

// A model's per-head methods for one config version (from the index service).
struct ModelConfig {
  std::string model_id;
  uint64_t version = 0;  // 0: the model has no published version (default method everywhere).
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rope_theta = 10000.0;
  MethodConfig default_method;
  // Per layer, per q head: the head's own config, or nullopt for the model default.
  std::vector<std::vector<std::optional<MethodConfig>>> heads;
  // Length buckets (HeadConfig.min_tokens > 0): per layer, per q head, configs for prompts of
  // at least `min_tokens` keys, sorted by min_tokens. Empty for heads without buckets.
  struct Bucket {
    int64_t min_tokens = 0;
    MethodConfig config;
    int64_t calibrated_tokens = 0;  // HeadConfig.calibrated_tokens (0: not recorded)
  };
  std::vector<std::vector<std::vector<Bucket>>> buckets;
  // Per layer, per q head: HeadConfig.calibrated_tokens of the head's own config (0: not
  // recorded, or no own config). Empty when no config records it.
  std::vector<std::vector<int64_t>> calibrated_tokens;

  // The method of (layer, head): its own config or the model default.
  const MethodConfig& For(int layer, int head) const;
  // The same for a prompt whose longest sequence has `tokens` keys: the bucket with the largest
  // min_tokens <= tokens, else For(layer, head).
  const MethodConfig& For(int layer, int head, int64_t tokens) const;
  // The calibration length of the config For(layer, head, tokens) picks; 0 when not recorded
  // (the model default, or a config written before HeadConfig.calibrated_tokens).
  int64_t CalibratedTokens(int layer, int head, int64_t tokens) const;
  // True when some head of `layer` uses `method`.
  bool LayerUses(int layer, Method method) const;
};

struct HeadResult {
  int head = 0;
  MethodConfig config;
  double density = 0;  // Computed pairs / allowed pairs.
  // Recall estimate: the recall guard's (server/recall_guard.h) on its probe rows, or the exact
  // estimate_recall when the request asked for it; 1 for dense; -1: not estimated.
  double recall = -1;
};

struct StageSeconds {
  double resolve = 0, config = 0, index_build = 0, recall = 0, kernel = 0, output = 0, total = 0;
  // Host <-> GPU copies inside the stages above, as the device measured them (0 on the CPU).
  double transfer = 0;
};

// What the pipeline produced besides the output bytes (those are written in place).
struct AttentionResult {
  uint64_t config_version_used = 0;
  std::string device;  // "cpu" or "cuda"
  StageSeconds seconds;
  std::vector<HeadResult> heads;  // Ordered by head.
  double density = 0;             // Over all heads.
};

}  // namespace spattn

#endif  // SPATTN_SERVER_REQUEST_H_
