#!/usr/bin/env bash
# Packs this branch's spattn-bench (opt, CUDA) and the shared libraries the GPU machine lacks into
# /work/main/.device/s25-slmargin (carry ".device/s25-slmargin"). The variants are flags: no base.
# Usage: pack.sh BENCH
set -euo pipefail
DEST=/work/main/.device/s25-slmargin
rm -rf "$DEST" && mkdir -p "$DEST/b/bin" "$DEST/b/lib"
cp "$1" "$DEST/b/bin/spattn-bench"
chmod u+w "$DEST"/b/bin/*
strip --strip-debug "$DEST"/b/bin/*
ldd "$1" | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$DEST/b/lib/"
(cd "$DEST/b" && XZ_OPT=-9 tar -cJf ../bundle.tar.xz bin lib) && rm -rf "$DEST/b"
cp "$(dirname "$0")/run.sh" "$DEST/"
du -sh "$DEST"
