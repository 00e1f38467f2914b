#!/usr/bin/env bash
# s21-build: packs (opt, CUDA) build_index_gpu_test and spattn-bench of this tree (NEW=1), the
# base spattn-bench ($BASE: the s20 combined run's, main 11899f0's kernels, from
# /work/main/.gpu-all/bundle.tar.xz), their shared libraries and the run scripts into
# /work/main/.gpu-s21-build (git-ignored). Then, with carry [".gpu-s21-build"]:
#   bash .gpu-s21-build/run.sh        (or prof.sh)
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.gpu-s21-build}
BASE=${BASE:-/tmp/s21b_base/bin/spattn-bench}
BASELIB=${BASELIB:-/tmp/s21b_base/lib}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
if [ "${NEW:-1}" = 1 ]; then
  TARGETS=(kernels/cuda/build_index_gpu_test tests/bench/spattn-bench)
  bazel build -c opt --config=cuda //kernels/cuda:build_index_gpu_test //tests/bench:spattn-bench
  for t in "${TARGETS[@]}"; do
    b=$(basename "$t")
    cp "bazel-bin/$t" "$DEST/bin/"
    chmod u+w "$DEST/bin/$b"
    strip --strip-debug "$DEST/bin/$b"
    ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
      { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
      xargs -r -I{} cp -nL {} "$DEST/lib/"
  done
fi
cp -n "$BASELIB"/* "$DEST/lib/"
cp "$BASE" "$DEST/bin/spattn-bench-base"
chmod u+w "$DEST/bin/spattn-bench-base"
strip --strip-debug "$DEST/bin/spattn-bench-base"
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s21-build/*.sh bench/results/kernels/s21-build/stages.py "$DEST/"
du -sh "$DEST"
