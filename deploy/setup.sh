#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and run spattn (offline Bazel,
# system gRPC / protobuf / RocksDB / prometheus-cpp / gtest). Idempotent; quiet when all is there.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-rules-proto bazel-skylib
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  librocksdb-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  pkg-config python3 curl
  python3-grpcio python3-protobuf python3-numpy
  clang libclang-rt-14-dev openssl
  zstd xz-utils binutils
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Without nvcc, build the CPU-only configuration.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "--config=cuda"
else
  echo "--config=nocuda"
fi > "$(dirname "$0")/../.bazel-config"
