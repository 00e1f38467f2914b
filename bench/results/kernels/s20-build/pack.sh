#!/usr/bin/env bash
# s20-build: packs (opt, CUDA) build_index_gpu_test and spattn-bench of this tree, the base
# spattn-bench ($BASE: main 36c27b9's, from the lead's bundle /work/main/.gpu-lead/bundle.tar.xz),
# their shared libraries, sdpa_reference.py and run.sh into /work/main/.gpu-s20-build
# (git-ignored). Then, with carry [".gpu-s20-build"]:  bash .gpu-s20-build/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${1:-/work/main/.gpu-s20-build}
BASE=${BASE:-/tmp/s20b_base/bin/spattn-bench}
TARGETS=(kernels/cuda/build_index_gpu_test tests/bench/spattn-bench)
bazel build -c opt --config=cuda //kernels/cuda:build_index_gpu_test //tests/bench:spattn-bench
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  b=$(basename "$t")
  cp "bazel-bin/$t" "$DEST/bin/"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
cp "$BASE" "$DEST/bin/spattn-bench-base"
chmod u+w "$DEST/bin/spattn-bench-base"
strip --strip-debug "$DEST/bin/spattn-bench-base"
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s20-build/run.sh kernels/cuda/bench/sdpa_reference.py "$DEST/"
du -sh "$DEST"
