// The one place absl::Status and grpc::Status convert into each other (codes map one to one).
#ifndef SPATTN_PROTO_GRPC_STATUS_H_
#define SPATTN_PROTO_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace spattn {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace spattn

#endif  // SPATTN_PROTO_GRPC_STATUS_H_
