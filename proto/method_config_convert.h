// Conversion between the wire's MethodConfig (spattn.v1) and the kernels' MethodConfig, shared by
// the worker (request overrides, published configs) and the index service (validating what it
// stores), so that both accept exactly the same configs. Stateless; thread-safe.
#ifndef SPATTN_PROTO_METHOD_CONFIG_CONVERT_H_
#define SPATTN_PROTO_METHOD_CONFIG_CONVERT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/method_config.h"
#include "spattn/v1/common.pb.h"

namespace spattn {

absl::StatusOr<Method> MethodFromProto(int proto_method, absl::string_view field);
v1::Method MethodToProto(Method method);

// A method and its parameters; parameters left at 0 take the paper defaults. Errors are
// INVALID_ARGUMENT and name the parameter under `field`, e.g.
// "method_override.vertical_slash.last_q must be > 0, got -1".
absl::StatusOr<MethodConfig> ParseMethodConfig(const v1::MethodConfig& proto,
                                               absl::string_view field);
void MethodConfigToProto(const MethodConfig& config, v1::MethodConfig* proto);

}  // namespace spattn

#endif  // SPATTN_PROTO_METHOD_CONFIG_CONVERT_H_
