// CRC-32C (Castagnoli), as the index service stamps on every stored tensor. Thread-safe.
#ifndef SPATTN_SERVER_CRC32C_H_
#define SPATTN_SERVER_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace spattn {

// Extends `crc` (0 to start) over `n` bytes.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace spattn

#endif  // SPATTN_SERVER_CRC32C_H_
