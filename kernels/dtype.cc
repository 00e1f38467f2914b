#include "kernels/dtype.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace spattn {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32") return DType::kF32;
  if (name == "fp16" || name == "float16" || name == "f16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype: unknown '", name, "' (expected bf16, fp16 or fp32)"));
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // Subnormal: value = mant * 2^-24.
      float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Overflow (>= 65520) and Inf.
  if (abs < 0x38800000u) {                        // Below the smallest normal: subnormal or 0.
    const float a = std::fabs(f);
    const float scaled = a * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias exponent, round mantissa to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

void ToFloat(const void* src, DType t, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));  // An empty tensor's data is null.
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(s[i]);
      return;
    }
  }
}

void FromFloat(const float* src, DType t, int64_t n, void* dst) {
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));  // An empty tensor's data is null.
      return;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToFp16(src[i]);
      return;
    }
  }
}

}  // namespace spattn
