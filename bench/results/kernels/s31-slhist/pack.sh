#!/usr/bin/env bash
# s31-slhist device bundle (s30-slkv's pack.sh): this tree's spattn-bench and GPU tests (`new`) plus
# main e30e6a9's spattn-bench (`base`: built in this worktree at e30e6a9 before any change, copied
# to $BASE_BENCH) and the shared libraries the GPU machine lacks, in one xz archive, with run.sh
# and stages.py, into the session checkout's ignored /work/main/.device/s31-slhist/ (device calls
# send that checkout; carry ".device/s31-slhist"), then: OUT=$OUT bash .device/s31-slhist/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BASE_BENCH=${BASE_BENCH:-/tmp/s31slhist/base/spattn-bench}
DEST=${DEST:-/work/main/.device/s31-slhist}
TARGETS=(tests/bench/spattn-bench kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test)
bazel build -c opt --config=cuda //tests/bench:spattn-bench //kernels/cuda:build_index_gpu_test \
  //kernels/cuda:sampled_lines_gpu_test
STAGE=$(mktemp -d)
mkdir -p "$DEST" "$STAGE/bin" "$STAGE/lib"
pack() {  # binary, name
  cp "$1" "$STAGE/bin/$2"
  chmod u+w "$STAGE/bin/$2"
  strip --strip-debug "$STAGE/bin/$2"
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$STAGE/lib/"
}
for t in "${TARGETS[@]}"; do pack "bazel-bin/$t" "$(basename "$t")"; done
pack "$BASE_BENCH" spattn-bench-base
(cd "$STAGE" && tar -cf - bin lib | xz -T2 -9 --lzma2=preset=9,dict=192MiB > "$DEST/all.tar.xz")
rm -rf "$STAGE"
cp bench/results/kernels/s31-slhist/run.sh bench/results/kernels/s31-slhist/stages.py "$DEST/"
du -sh "$DEST"/*
