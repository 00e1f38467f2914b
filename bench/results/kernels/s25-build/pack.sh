#!/usr/bin/env bash
# s25-build: packs (opt, CUDA) spattn-bench binaries for the device into
# $DEST = /work/main/.device/s25-build (git-ignored there); carry [".device/s25-build"] and run
# bash .device/s25-build/run<N>.sh. $BASE = main 2d1f736's spattn-bench (built in this worktree
# before any change: /tmp/s25b_base). NEWDIR (optional) = a folder with this branch's
# spattn-bench, build_index_gpu_test and mass_recall_test. One binary is zstd'ed whole, the others as zstd --patch-from patches.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.device/s25-build}
BASE=${BASE:-/tmp/s25b_base}
NEWDIR=${NEWDIR:-}
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
if [ -n "$NEWDIR" ]; then
  cp "$NEWDIR/spattn-bench" "$NEWDIR/build_index_gpu_test" "$NEWDIR/mass_recall_test" "$T/bin/"
fi
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
zstd -q -f -12 --long=27 "$T/bin/spattn-bench-base" -o "$DEST/base.zst"
for b in spattn-bench build_index_gpu_test mass_recall_test; do
  [ -f "$T/bin/$b" ] && zstd -q -f --long=27 --patch-from="$T/bin/spattn-bench-base" "$T/bin/$b" -o "$DEST/$b.patch.zst"
done
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum *) > "$DEST/md5.txt"
rm -rf "$T"
cp bench/results/kernels/s25-build/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"
