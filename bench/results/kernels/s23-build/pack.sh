#!/usr/bin/env bash
# s23-build: packs (opt, CUDA) this tree's spattn-bench and build_index_gpu_test and the base
# spattn-bench (main c3ec5f8's, $BASE: built in this worktree with c3ec5f8's vertical_slash.cu
# and row_assembly.h checked out, then restored) for the device. The run sends the session's
# checkout (/work/main, 64 MiB in all with its untracked files), so the bundle is small: this
# tree's spattn-bench (zstd), the other two binaries as zstd patches against it (2.2 MB / 0.7 MB
# instead of ~7 MB each), the shared libraries, and a zstd with its libraries. Into
# $DEST = /work/main/.gpu/s23-build (ignored there); then carry [".gpu/s23-build"] and run
# bash .gpu/s23-build/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-/work/main/.gpu/s23-build}
BASE=${BASE:-/tmp/s23b_base/spattn-bench}
NEWDIR=${NEWDIR:-}  # this tree's two binaries copied there (else built now)
[ -n "$NEWDIR" ] || { bazel build -c opt --config=cuda //kernels/cuda:build_index_gpu_test //tests/bench:spattn-bench; NEWDIR=bazel-bin; }
T=$(mktemp -d)
mkdir -p "$T/bin" "$T/lib" "$T/zl"
cp "$NEWDIR"/spattn-bench "$NEWDIR"/build_index_gpu_test "$T/bin/" 2>/dev/null ||
  cp "$NEWDIR"/tests/bench/spattn-bench "$NEWDIR"/kernels/cuda/build_index_gpu_test "$T/bin/"
cp "$BASE" "$T/bin/spattn-bench-base"
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
zstd -q -f -12 --long=27 "$T/bin/spattn-bench" -o "$DEST/new.zst"
zstd -q -f --long=27 --patch-from="$T/bin/spattn-bench" "$T/bin/spattn-bench-base" -o "$DEST/base.patch.zst"
zstd -q -f --long=27 --patch-from="$T/bin/spattn-bench" "$T/bin/build_index_gpu_test" -o "$DEST/test.patch.zst"
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum spattn-bench spattn-bench-base build_index_gpu_test) > "$DEST/md5.txt"
rm -rf "$T"
cp bench/results/kernels/s23-build/run*.sh bench/results/kernels/s23-build/stages.py "$DEST/"
du -sh "$DEST"
