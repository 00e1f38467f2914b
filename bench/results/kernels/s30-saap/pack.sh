#!/usr/bin/env bash
# s30-saap: packs (opt, CUDA) binaries for the device into $DEST = /work/main/.device/s30-saap
# (git-ignored there); carry [".device/s30-saap"] and run bash .device/s30-saap/run<N>.sh.
# $BASE = main e9c159b's spattn-bench (this worktree's -c opt build before any change, copied to
# /tmp/s30saap/base); NEWDIR = this branch's bazel-bin. The base is zstd'ed whole, the new
# spattn-bench and build_index_gpu_test as zstd --patch-from patches against it (pattern of
# bench/results/kernels/s28-saap).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.device/s30-saap}
BASE=${BASE:-/tmp/s30saap/base}
NEWDIR=${NEWDIR:-bazel-bin}
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib"
cp "$BASE/spattn-bench" "$T/bin/spattn-bench-base"
cp "$NEWDIR/tests/bench/spattn-bench" "$T/bin/"
cp "$NEWDIR/kernels/cuda/build_index_gpu_test" "$T/bin/"
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
cp bench/results/kernels/s30-saap/run*.sh kernels/cuda/bench/builder_stages.py "$DEST/"
du -sh "$DEST"
