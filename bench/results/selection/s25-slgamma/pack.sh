#!/usr/bin/env bash
# Packs base (main 2d1f736, built in this worktree before any change) and new (this branch)
# spattn-bench (opt, CUDA), this branch's build_index_gpu_test, and the shared libraries the GPU
# machine lacks into /work/main/.device/s25-slgamma (carry ".device/s25-slgamma").
# Usage: pack.sh BASE_BENCH NEW_BENCH NEW_GPU_TEST
set -euo pipefail
DEST=/work/main/.device/s25-slgamma
rm -rf "$DEST" && mkdir -p "$DEST/b/bin" "$DEST/b/lib"
cp "$1" "$DEST/b/bin/spattn-bench.base"
cp "$2" "$DEST/b/bin/spattn-bench.new"
cp "$3" "$DEST/b/bin/build_index_gpu_test"
chmod u+w "$DEST"/b/bin/*
strip --strip-debug "$DEST"/b/bin/*
for f in "$2" "$3"; do
  ldd "$f" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/b/lib/"
done
(cd "$DEST/b" && XZ_OPT=-9 tar -cJf ../bundle.tar.xz bin lib) && rm -rf "$DEST/b"
cp "$(dirname "$0")/run.sh" "$DEST/"
du -sh "$DEST"
