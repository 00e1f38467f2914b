#!/usr/bin/env bash
# s28-saap: packs (opt, CUDA) binaries for the device into $DEST = /work/main/.device/s28-saap
# (git-ignored there); carry [".device/s28-saap"] and run bash .device/s28-saap/run<N>.sh.
# $BASE = main 4fe01c0's spattn-bench (built in this worktree before any change,
# /tmp/s28saap/base); NEWDIR = this branch's spattn-bench. The base is zstd'ed whole, the new
# one as a zstd --patch-from patch against it (pattern of bench/results/kernels/s27-fsa).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.device/s28-saap}
BASE=${BASE:-/tmp/s28saap/base}
NEWDIR=${NEWDIR:?set NEWDIR}
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
cp "$NEWDIR/spattn-bench" "$T/bin/"
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
zstd -q -f -12 --long=27 "$T/bin/spattn-bench-base" -o "$DEST/base.zst"
zstd -q -f -12 --long=27 --patch-from="$T/bin/spattn-bench-base" "$T/bin/spattn-bench" \
  -o "$DEST/spattn-bench.patch.zst"
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum *) > "$DEST/md5.txt"
rm -rf "$T"
cp bench/results/kernels/s28-saap/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"
