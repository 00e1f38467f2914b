// ParseAttentionRequest (the worker's one request conversion) on arbitrary serialized
// AttentionRequest bytes: it must return a status, never crash, overflow or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "server/convert.h"
#include "spattn/v1/attention_service.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spattn::v1::AttentionRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  spattn::ConvertLimits limits;
  limits.max_inline_bytes = 1 << 20;
  auto parsed = spattn::ParseAttentionRequest(request, limits);
  if (parsed.ok()) {
    // Touch what validation promised: inline tensors hold exactly the bytes their shape needs.
    for (const spattn::TensorSpec* t : {&parsed->q, &parsed->k, &parsed->v}) {
      if (t->inline_bytes != nullptr && static_cast<int64_t>(t->inline_bytes->size()) < t->bytes) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
