// .safetensors reader (8-byte header length, JSON header, data offsets) on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "kernels/io/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> metadata;
  auto tensors = spattn::ParseSafetensors(bytes, "fuzz.safetensors", &metadata);
  if (tensors.ok()) {
    auto again = spattn::SerializeSafetensors(*tensors, metadata);
    if (!again.ok()) __builtin_trap();
  }
  return 0;
}
