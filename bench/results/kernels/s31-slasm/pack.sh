#!/usr/bin/env bash
# s31-slasm bundle (s30-slkv's pack.sh): this tree's opt spattn-bench, build_index_gpu_test and
# sampled_lines_gpu_test (`new`) plus main e30e6a9's spattn-bench (`base`: this worktree's -c opt
# build before any change, copied to $BASE_BENCH) and the shared libraries the GPU machine lacks,
# in one xz archive, with run1.sh, into /work/main/.device/s31-slasm/ (carry ".device/s31-slasm"),
# then on the device: OUT=$OUT bash .device/s31-slasm/run1.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BASE_BENCH=${BASE_BENCH:-/tmp/s31slasm/base/spattn-bench}
DEST=${DEST:-/work/main/.device/s31-slasm}
TARGETS=(tests/bench/spattn-bench kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test)
STAGE=$(mktemp -d)
rm -rf "$DEST"; mkdir -p "$DEST" "$STAGE/bin" "$STAGE/lib"
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
(cd "$STAGE/bin" && md5sum *)
(cd "$STAGE" && tar -cf - bin lib | xz -T2 -9 --lzma2=preset=9,dict=192MiB > "$DEST/all.tar.xz")
rm -rf "$STAGE"
cp bench/results/kernels/s31-slasm/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"/*
