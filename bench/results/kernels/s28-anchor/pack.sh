#!/usr/bin/env bash
# s28-anchor: packs (opt, CUDA) binaries for the device into $DEST = /work/main/.device/s28-anchor
# (git-ignored there); carry [".device/s28-anchor"] and run bash .device/s28-anchor/run<N>.sh.
# $BASE = main 4fe01c0's spattn-bench / build_index_gpu_test, built in this worktree before any
# change (/tmp/s28anchor/base). NEWDIR = the same two of this branch; NEW2DIR (run 2) an
# earlier spattn-bench of this branch.
# spattn-bench-base is zstd'ed whole, the others as zstd --patch-from patches against it.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.device/s28-anchor}
BASE=${BASE:-/tmp/s28anchor/base}
NEWDIR=${NEWDIR:?set NEWDIR}
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do cp "$NEWDIR/$b" "$T/bin/"; done
# Run 2: NEW2DIR's spattn-bench as spattn-bench-new2 (the previous commit's, for an A/B).
if [ -n "${NEW2DIR:-}" ]; then cp "$NEW2DIR/spattn-bench" "$T/bin/spattn-bench-new2"; fi
PATCHED="spattn-bench build_index_gpu_test${NEW2DIR:+ spattn-bench-new2}"
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
cp bench/results/kernels/s28-anchor/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"
