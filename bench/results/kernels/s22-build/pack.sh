#!/usr/bin/env bash
# s22-build: packs (opt, CUDA) build_index_gpu_test and spattn-bench of this tree, the base
# spattn-bench (main 7a066d9's, built in this worktree before any change and saved in $BASE),
# their shared libraries and run.sh / stages.py into /work/main/.gpu-s22-build (git-ignored).
# Then, with carry [".gpu-s22-build"]:  bash .gpu-s22-build/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.gpu-s22-build}
BASE=${BASE:-/tmp/s22b_base/bin/spattn-bench}
BASELIB=${BASELIB:-/tmp/s22b_base/lib}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
bazel build -c opt --config=cuda //kernels/cuda:build_index_gpu_test //tests/bench:spattn-bench
for t in kernels/cuda/build_index_gpu_test tests/bench/spattn-bench; do
  b=$(basename "$t")
  cp "bazel-bin/$t" "$DEST/bin/"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
cp -n "$BASELIB"/* "$DEST/lib/"
cp "$BASE" "$DEST/bin/spattn-bench-base"
chmod u+w "$DEST/bin/spattn-bench-base"
strip --strip-debug "$DEST/bin/spattn-bench-base"
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s22-build/run*.sh bench/results/kernels/s22-build/stages.py "$DEST/"
du -sh "$DEST"
