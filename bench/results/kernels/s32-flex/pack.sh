#!/usr/bin/env bash
# s32-flex: packs (opt, CUDA) binaries for the device into $DEST = /work/main/.device/s32-flex (the run tool copies /work/main)
# (git-ignored there); carry [".device/s32-flex"] and run bash .device/s32-flex/run<N>.sh.
# $BASE = main b50f02c's spattn-bench (/work/main/bazel-bin, not rebuilt),
# copied to /tmp/s32-flex/base. NEWDIR = this branch's spattn-bench + build_index_gpu_test.
# spattn-bench-base is zstd'ed whole, the others as zstd --patch-from patches against it.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.device/s32-flex}
BASE=${BASE:-/tmp/s32-flex/base}
NEWDIR=${NEWDIR:?set NEWDIR}
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do cp "$NEWDIR/$b" "$T/bin/"; done
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
zstd -q -f -12 --long=27 "$T/bin/spattn-bench-base" -o "$DEST/base.zst"
for b in spattn-bench build_index_gpu_test; do
  zstd -q -f -12 --long=27 --patch-from="$T/bin/spattn-bench-base" "$T/bin/$b" -o "$DEST/$b.patch.zst"
done
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum *) > "$DEST/md5.txt"
rm -rf "$T"
cp bench/results/kernels/s32-flex/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"
