#!/usr/bin/env bash
# Copies the opt-built CUDA binaries, their non-system shared libraries and the scripts into a
# folder that travels to the GPU machine (default: <repo>/.gpu, git-ignored).
# Usage: [BINS="a b"] kernels/cuda/gpu/pack_gpu.sh [dest]
#   (after bazel build -c opt //kernels/cuda:all //tests/bench:spattn-bench); BINS (or PACK_BINS)
#   names the kernels/cuda binaries to take (default: attention_cuda_test cuda_engine_test
#   cuda_bench).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DEST=${1:-.gpu}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for b in ${BINS:-${PACK_BINS:-attention_cuda_test cuda_engine_test cuda_bench}}; do
  cp bazel-bin/kernels/cuda/$b "$DEST/bin/"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  ldd "bazel-bin/kernels/cuda/$b" | awk '/=> \// {print $3}' | grep -E "libabsl|libgtest|libgmock" |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
if [ -x bazel-bin/tests/bench/spattn-bench ]; then
  cp bazel-bin/tests/bench/spattn-bench "$DEST/bin/" && chmod u+w "$DEST/bin/spattn-bench" &&
    strip --strip-debug "$DEST/bin/spattn-bench"
  ldd bazel-bin/tests/bench/spattn-bench | awk '/=> \// {print $3}' | grep -E "libabsl" |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
fi
# The fat binaries compress ~10x; run_gpu.sh unpacks them.
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp kernels/cuda/bench/sdpa_reference.py kernels/cuda/gpu/run_gpu*.sh "$DEST/"
du -sh "$DEST"
