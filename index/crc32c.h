// CRC-32C (Castagnoli), as used by iSCSI, ext4 and RocksDB. Debian's absl ships no crc32c, so
// this is ours: SSE4.2's crc32 instruction when the CPU has it, slicing-by-8 tables otherwise.
#ifndef SPATTN_INDEX_CRC32C_H_
#define SPATTN_INDEX_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace spattn {

// CRC-32C of `n` bytes, continuing from `crc` (the value of a previous call; 0 to start).
// Crc32cExtend(Crc32cExtend(0, a), b) == Crc32c(a + b). Thread-safe.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(absl::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The table-driven path alone, so tests can compare it with the hardware path.
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n);
// True when Crc32cExtend uses the SSE4.2 instruction on this CPU.
bool Crc32cHasHardware();

}  // namespace spattn

#endif  // SPATTN_INDEX_CRC32C_H_
