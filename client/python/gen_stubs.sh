#!/usr/bin/env bash
# Generates the gRPC/protobuf stubs of proto/spattn/v1 into the package (spattn/v1/*_pb2*.py),
# offline, with the system protoc and grpc_python_plugin (Debian: protobuf-compiler,
# protobuf-compiler-grpc). The generated code imports `spattn.v1.common_pb2`, which resolves to
# this package's `v1` subpackage.
#   client/python/gen_stubs.sh [PROTO_DIR] [PACKAGE_ROOT]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto_dir="${1:-$here/../../proto}"
out="${2:-$here}"
plugin="${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || echo /usr/bin/grpc_python_plugin)}"
mkdir -p "$out/spattn/v1"
protoc --proto_path="$proto_dir" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$plugin" \
  "$proto_dir"/spattn/v1/common.proto "$proto_dir"/spattn/v1/attention_service.proto \
  "$proto_dir"/spattn/v1/index_service.proto
