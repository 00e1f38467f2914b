// Element types of attention tensors and host-side conversions to and from float.
#ifndef SPATTN_KERNELS_DTYPE_H_
#define SPATTN_KERNELS_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spattn {

enum class DType { kF32, kF16, kBF16 };

inline int DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType t);  // "fp32", "fp16", "bf16"
absl::StatusOr<DType> ParseDType(absl::string_view name);

inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Fp16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);

// Converts `n` contiguous elements of type `t` at `src` to float.
void ToFloat(const void* src, DType t, int64_t n, float* dst);
// Converts `n` floats to type `t` at `dst`.
void FromFloat(const float* src, DType t, int64_t n, void* dst);

}  // namespace spattn

#endif  // SPATTN_KERNELS_DTYPE_H_
