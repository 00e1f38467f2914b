#!/usr/bin/env bash
# s18-saap: packs build_index_gpu_test and spattn-bench of this branch plus spattn-bench of the
# base (main 1f166f0, built from `git archive 1f166f0` in $BASE) with the shared libraries the GPU
# machine lacks into /work/main/.gpu-s18-saap (git-ignored; carry it to the device run).
set -euo pipefail
WT=/work/wt/s18-saap
BASE=${BASE:-/tmp/s18saap-base}
DEST=/work/main/.gpu-s18-saap
rm -rf "$DEST" && mkdir -p "$DEST/bin" "$DEST/lib"
add() {  # add <binary> <name>
  cp "$1" "$DEST/bin/$2"
  chmod u+w "$DEST/bin/$2"
  strip --strip-debug "$DEST/bin/$2"
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
}
add "$WT/bazel-bin/kernels/cuda/build_index_gpu_test" build_index_gpu_test
add "$WT/bazel-bin/tests/bench/spattn-bench" spattn-bench
add "$BASE/bazel-bin/tests/bench/spattn-bench" spattn-bench-base
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp "$WT/bench/results/kernels/s18-saap/run.sh" "$DEST/"
du -sh "$DEST"
