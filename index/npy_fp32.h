// Minimal NumPy .npy reader/writer for little-endian float32 C-order arrays (format versions 1.0,
// 2.0 and 3.0 read; 1.0 written, or 2.0 when the header needs it). Enough for centroids and
// classifier weights exchanged with Python tooling; other dtypes are refused with a clear error.
#ifndef SPATTN_INDEX_NPY_FP32_H_
#define SPATTN_INDEX_NPY_FP32_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spattn {

struct NpyFp32 {
  std::vector<int64_t> shape;  // Empty for a 0-d array (one element).
  std::string bytes;           // Raw little-endian fp32, row-major.
};

// INVALID_ARGUMENT naming the problem (magic, version, descr, fortran_order, shape, size).
absl::StatusOr<NpyFp32> ParseNpyFp32(absl::string_view file_bytes);
absl::StatusOr<NpyFp32> ReadNpyFp32(const std::string& path);

std::string EncodeNpyFp32(const std::vector<int64_t>& shape, absl::string_view bytes);
// Writes via a temporary file and rename.
absl::Status WriteNpyFp32(const std::string& path, const std::vector<int64_t>& shape,
                          absl::string_view bytes);

}  // namespace spattn

#endif  // SPATTN_INDEX_NPY_FP32_H_
