#include "index/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace spattn {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

// Works on the pre/post-inverted register value.
uint32_t SoftwareRaw(uint32_t c, const uint8_t* p, size_t n) {
  const Tables& tb = GetTables();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // Little-endian host (x86-64, aarch64).
    uint32_t lo = static_cast<uint32_t>(word) ^ c;
    uint32_t hi = static_cast<uint32_t>(word >> 32);
    c = tb.t[7][lo & 0xFF] ^ tb.t[6][(lo >> 8) & 0xFF] ^ tb.t[5][(lo >> 16) & 0xFF] ^
        tb.t[4][lo >> 24] ^ tb.t[3][hi & 0xFF] ^ tb.t[2][(hi >> 8) & 0xFF] ^
        tb.t[1][(hi >> 16) & 0xFF] ^ tb.t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool DetectHardware() { return __builtin_cpu_supports("sse4.2"); }
#else
uint32_t HardwareRaw(uint32_t c, const uint8_t* p, size_t n) { return SoftwareRaw(c, p, n); }
bool DetectHardware() { return false; }
#endif

}  // namespace

bool Crc32cHasHardware() {
  static const bool has = DetectHardware();
  return has;
}

uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n) {
  return ~SoftwareRaw(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (Crc32cHasHardware()) return ~HardwareRaw(~crc, p, n);
  return ~SoftwareRaw(~crc, p, n);
}

}  // namespace spattn
