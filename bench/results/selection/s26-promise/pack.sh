#!/usr/bin/env bash
# Packs main 0d1e412's spattn-bench (opt, CUDA; built in this worktree before any change) and the
# shared libraries the GPU machine lacks into /work/main/.device/s26-promise (carry
# ".device/s26-promise"). Usage: pack.sh BENCH
set -euo pipefail
DEST=/work/main/.device/s26-promise
rm -rf "$DEST" && mkdir -p "$DEST/b/bin" "$DEST/b/lib"
cp "$1" "$DEST/b/bin/spattn-bench"
chmod u+w "$DEST"/b/bin/*
strip --strip-debug "$DEST"/b/bin/*
ldd "$1" | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$DEST/b/lib/"
(cd "$DEST/b" && XZ_OPT=-9 tar -cJf ../bundle.tar.xz bin lib) && rm -rf "$DEST/b"
cp "$(dirname "$0")"/run*.sh "$DEST/"
du -sh "$DEST"
