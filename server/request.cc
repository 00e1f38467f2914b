#include "server/request.h"

namespace spattn {

const char* HandleKindName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kInline:
      return "inline";
    case HandleKind::kSystemRegion:
      return "system";
    case HandleKind::kCudaRegion:
      return "cuda";
    case HandleKind::kCudaIpc:
      return "cuda_ipc";
  }
  return "unknown";
}

const MethodConfig& ModelConfig::For(int layer, int head) const {
  if (layer >= 0 && layer < static_cast<int>(heads.size()) && head >= 0 &&
      head < static_cast<int>(heads[layer].size()) && heads[layer][head].has_value()) {
    return *heads[layer][head];
  }
  return default_method;
}

const MethodConfig& ModelConfig::For(int layer, int head, int64_t tokens) const {
  if (layer >= 0 && layer < static_cast<int>(buckets.size()) && head >= 0 &&
      head < static_cast<int>(buckets[layer].size())) {
    const std::vector<Bucket>& b = buckets[layer][head];
    for (auto it = b.rbegin(); it != b.rend(); ++it) {
      if (it->min_tokens <= tokens) return it->config;
    }
  }
  return For(layer, head);
}

int64_t ModelConfig::CalibratedTokens(int layer, int head, int64_t tokens) const {
  if (layer >= 0 && layer < static_cast<int>(buckets.size()) && head >= 0 &&
      head < static_cast<int>(buckets[layer].size())) {
    const std::vector<Bucket>& b = buckets[layer][head];
    for (auto it = b.rbegin(); it != b.rend(); ++it) {
      if (it->min_tokens <= tokens) return it->calibrated_tokens;
    }
  }
  if (layer >= 0 && layer < static_cast<int>(calibrated_tokens.size()) && head >= 0 &&
      head < static_cast<int>(calibrated_tokens[layer].size()) &&
      layer < static_cast<int>(heads.size()) && heads[layer][head].has_value()) {
    return calibrated_tokens[layer][head];
  }
  return 0;
}

bool ModelConfig::LayerUses(int layer, Method method) const {
  for (int h = 0; h < num_q_heads; ++h) {
    if (For(layer, h).method == method) return true;
    if (layer >= 0 && layer < static_cast<int>(buckets.size()) &&
        h < static_cast<int>(buckets[layer].size())) {
      for (const Bucket& b : buckets[layer][h]) {
        if (b.config.method == method) return true;
      }
    }
  }
  return false;
}

}  // namespace spattn
