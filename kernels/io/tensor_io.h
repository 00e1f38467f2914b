// Tensor files: `.npy` and `.safetensors` read into / written from a small owning HostTensor, so
// users can bring Q/K/V captured from a real model (DESIGN §8).
//
// Accepted element types (see kernels/io/README.md for the details and the Python side):
//   .npy descr          -> DType
//   '<f4'               -> kF32
//   '<f2'               -> kF16
//   'bfloat16'          -> kBF16  (ml_dtypes' name)
//   '<V2', '|V2'        -> kBF16  (what np.save writes for an ml_dtypes.bfloat16 array)
//   '<u2', '<i2'        -> kBF16  (convention: raw bf16 bit patterns, e.g. from
//                                  torch_tensor.view(torch.uint16 or torch.int16).numpy())
//   .safetensors dtype  'F32' -> kF32, 'F16' -> kF16, 'BF16' -> kBF16
// Written: .npy uses '<f4', '<f2' and, for bf16, '<u2' (load in Python with
// np.load(path).view(ml_dtypes.bfloat16)); .safetensors uses F32/F16/BF16.
// Header versions 1.0, 2.0 and 3.0 of .npy are read; 1.0 is written (2.0 when the header needs
// it). Everything else (big-endian, other dtypes, fortran_order True, structured dtypes) is
// refused.
//
// Errors: NOT_FOUND when a file cannot be opened, INVALID_ARGUMENT for malformed or unsupported
// content (bad magic, header too long or short, unsupported dtype, fortran_order, shape x dtype
// != bytes, offsets out of range, truncation), INTERNAL when a write fails. Messages start with
// the file (or the `source` name given to the Parse functions) and say what is wrong.
// All functions are thread-safe (they share no state).
#ifndef SPATTN_KERNELS_IO_TENSOR_IO_H_
#define SPATTN_KERNELS_IO_TENSOR_IO_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"

namespace spattn {

// An owning dense row-major little-endian tensor in host memory.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] is a scalar (one element).
  std::vector<uint8_t> bytes;  // num_elements() * DTypeSize(dtype) bytes

  int64_t num_elements() const;
  // "bf16[2, 3, 64]"
  std::string DebugString() const;
  // Elements converted to float.
  std::vector<float> ToFloats() const;
  // A tensor of `dtype` holding `values` (rounded to dtype) with `shape`; the product of `shape`
  // must equal values.size().
  static absl::StatusOr<HostTensor> FromFloats(const std::vector<float>& values,
                                               std::vector<int64_t> shape, DType dtype);
};

// Named tensors of one .safetensors file, sorted by name.
using NamedTensors = std::map<std::string, HostTensor>;

// .npy from bytes already in memory; `source` names them in errors.
absl::StatusOr<HostTensor> ParseNpy(absl::string_view data, absl::string_view source);
absl::StatusOr<HostTensor> ReadNpy(const std::string& path);
// INVALID_ARGUMENT when bytes.size() does not match shape and dtype.
absl::StatusOr<std::string> SerializeNpy(const HostTensor& tensor);
absl::Status WriteNpy(const std::string& path, const HostTensor& tensor);

// .safetensors; `metadata` (optional) receives the "__metadata__" string map.
absl::StatusOr<NamedTensors> ParseSafetensors(
    absl::string_view data, absl::string_view source,
    std::map<std::string, std::string>* metadata = nullptr);
absl::StatusOr<NamedTensors> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);
absl::StatusOr<std::string> SerializeSafetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// One tensor named by a spec: "path.npy", "path.safetensors" (the file must hold exactly one
// tensor) or "path.safetensors:name". The format follows the extension.
absl::StatusOr<HostTensor> ReadTensorSpec(absl::string_view spec);

// Whole file as bytes (NOT_FOUND when it cannot be opened).
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

}  // namespace spattn

#endif  // SPATTN_KERNELS_IO_TENSOR_IO_H_
