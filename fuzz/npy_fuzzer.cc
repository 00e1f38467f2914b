// .npy reader on arbitrary bytes; a parsed tensor must hold exactly shape x dtype bytes and
// serialize back.
#include <cstddef>
#include <cstdint>

#include "kernels/io/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto t = spattn::ParseNpy(bytes, "fuzz.npy");
  if (t.ok()) {
    auto again = spattn::SerializeNpy(*t);
    if (!again.ok()) __builtin_trap();
  }
  return 0;
}
