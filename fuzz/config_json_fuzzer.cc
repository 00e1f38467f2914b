// Head-config JSON import: our format (GetHeadConfigsResponse as JSON) and MInference's per-head
// pattern list, on arbitrary text.
#include <cstddef>
#include <cstdint>

#include "client/index_commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view json(reinterpret_cast<const char*>(data), size);
  (void)spattn::ParseSpattnConfig(json);
  (void)spattn::ParseMInferenceConfig(json);
  return 0;
}
