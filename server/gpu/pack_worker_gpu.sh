#!/usr/bin/env bash
# Packs the worker's GPU tests and spattn-server-bench (opt builds) with the shared libraries the
# GPU machine lacks (gRPC, protobuf, absl, prometheus-cpp, ...) into a folder that travels with a
# device run (default: <repo>/.gpu-w, git-ignored), compressed like kernels/cuda/gpu/pack_gpu.sh.
# Usage: bazel build -c opt //server:cuda_backend_test //server:cuda_ipc_test \
#          //server:cuda_ipc_producer //tests/bench:spattn-server-bench
#        server/gpu/pack_worker_gpu.sh [dest]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.gpu-w}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for b in server/cuda_backend_test server/cuda_ipc_test server/cuda_ipc_producer \
         tests/bench/spattn-server-bench; do
  cp "bazel-bin/$b" "$DEST/bin/"
  chmod u+w "$DEST/bin/$(basename "$b")"
  strip --strip-debug "$DEST/bin/$(basename "$b")"
  # Everything but the C runtime the GPU machine has in a newer version.
  ldd "bazel-bin/$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/" || true
done
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp server/gpu/run_worker_gpu.sh "$DEST/"
du -sh "$DEST"
