#!/usr/bin/env bash
# s32-slhist device bundle (s31-sa's pack.sh): this tree's spattn-bench and GPU tests (`new`, bazel
# -c opt --config=cuda) plus main b50f02c's spattn-bench (`base`, /work/main/bazel-bin copied to
# $BASE), into the worktree's ignored .device/s32-slhist/; the run tool sends /work/main's checkout,
# so copy it to /work/main/.device/s32-slhist/ (ignored; delete after) and carry
# [".device/s32-slhist"], then on the device: OUT=$OUT bash .device/s32-slhist/run.sh. spattn-bench-base is zstd'ed whole, the
# others as zstd --patch-from patches against it; the shared libraries the GPU machine lacks tarred.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-$PWD/.device/s32-slhist}
BASE=${BASE:-/tmp/s32-slhist/base}
NEW=(tests/bench/spattn-bench kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test)
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
PATCHED=""
for t in "${NEW[@]}"; do cp "bazel-bin/$t" "$T/bin/"; PATCHED="$PATCHED $(basename $t)"; done
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
zstd -q -f -12 --long=27 "$T/bin/spattn-bench-base" -o "$DEST/base.zst"
for b in $PATCHED; do
  zstd -q -f -12 --long=27 --patch-from="$T/bin/spattn-bench-base" "$T/bin/$b" -o "$DEST/$b.patch.zst"
done
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum *) > "$DEST/md5.txt"
rm -rf "$T"
cp bench/results/kernels/s32-slhist/run.sh bench/results/kernels/s32-slhist/stages.py "$DEST/"
du -sh "$DEST"
