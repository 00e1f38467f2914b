// Method-config parsing: a serialized v1::MethodConfig through ParseMethodConfig (every method's
// parameter checks), and the bytes as a method name.
#include <cstddef>
#include <cstdint>

#include "kernels/method_config.h"
#include "proto/method_config_convert.h"
#include "spattn/v1/common.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)spattn::ParseMethod(absl::string_view(reinterpret_cast<const char*>(data), size));
  spattn::v1::MethodConfig proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto config = spattn::ParseMethodConfig(proto, "fuzz");
  if (config.ok()) {
    if (!config->Validate().ok()) __builtin_trap();  // Parsed configs are valid ones.
    spattn::v1::MethodConfig back;
    spattn::MethodConfigToProto(*config, &back);
    if (!spattn::ParseMethodConfig(back, "round trip").ok()) __builtin_trap();
  }
  return 0;
}
