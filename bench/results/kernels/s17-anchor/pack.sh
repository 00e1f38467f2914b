#!/usr/bin/env bash
# Packs this branch's build_index_gpu_test + spattn-bench and a base spattn-bench (built from
# main 592a594 beforehand, path in $1) into /work/main/.gpu-s17-anchor (carry .gpu-s17-anchor), with the
# run script of bench/results/kernels/s17-anchor/run$RUN/ (RUN defaults to 2).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BASE=$1
DEST=/work/main/.gpu-s17-anchor
bazel build -c opt --config=cuda //tests/bench:spattn-bench //kernels/cuda:build_index_gpu_test
rm -rf "$DEST" && mkdir -p "$DEST/bin" "$DEST/lib"
for t in tests/bench/spattn-bench kernels/cuda/build_index_gpu_test; do
  cp "bazel-bin/$t" "$DEST/bin/" && chmod u+w "$DEST/bin/$(basename $t)"
  strip --strip-debug "$DEST/bin/$(basename $t)"
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
cp "$BASE" "$DEST/bin/spattn-bench-base" && chmod u+w "$DEST/bin/spattn-bench-base"
strip --strip-debug "$DEST/bin/spattn-bench-base"
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s17-anchor/run${RUN:-2}/run.sh "$DEST/"
du -sh "$DEST"
