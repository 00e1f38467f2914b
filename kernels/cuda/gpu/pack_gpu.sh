#!/usr/bin/env bash
# Copies the opt-built CUDA binaries, their non-system shared libraries and the scripts into a
# folder that travels to the GPU machine (default: <repo>/.gpu, git-ignored).
# Usage: [BINS="a b"] kernels/cuda/gpu/pack_gpu.sh [dest]
#   (after bazel build //kernels/cuda:all //tests/bench:spattn-bench and what BINS names); BINS
#   (or PACK_BINS) names the binaries to take: a bare name is a kernels/cuda target, a path is
#   relative to bazel-bin (server/cuda_backend_test). Default: attention_cuda_test
#   cuda_engine_test cuda_bench.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DEST=${1:-.gpu}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
# Every shared library but the C/C++ runtime, which the GPU machine has in a newer version.
copy_libs() {
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
}
for b in ${BINS:-${PACK_BINS:-attention_cuda_test cuda_engine_test cuda_bench}}; do
  case "$b" in */*) src=bazel-bin/$b ;; *) src=bazel-bin/kernels/cuda/$b ;; esac
  name=$(basename "$b")
  cp "$src" "$DEST/bin/"
  chmod u+w "$DEST/bin/$name"
  strip --strip-debug "$DEST/bin/$name"
  copy_libs "$src"
done
if [ -x bazel-bin/tests/bench/spattn-bench ]; then
  cp bazel-bin/tests/bench/spattn-bench "$DEST/bin/" && chmod u+w "$DEST/bin/spattn-bench" &&
    strip --strip-debug "$DEST/bin/spattn-bench"
  copy_libs bazel-bin/tests/bench/spattn-bench
fi
# The fat binaries compress ~10x; run_gpu.sh unpacks them.
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp kernels/cuda/bench/*.py kernels/cuda/bench/run_*.sh kernels/cuda/gpu/run_gpu*.sh "$DEST/"
du -sh "$DEST"
