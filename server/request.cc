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

bool ModelConfig::LayerUses(int layer, Method method) const {
  for (int h = 0; h < num_q_heads; ++h) {
    if (For(layer, h).method == method) return true;
  }
  return false;
}

}  // namespace spattn
