#!/usr/bin/env bash
# Packs two spattn-bench builds (opt, CUDA) with the shared libraries the GPU machine lacks into
# /work/main/.device/s24-guarded (carry ".device/s24-guarded"): base = main f7ff853 (built in this
# worktree before any change), new = this branch. Usage: pack.sh BASE_BIN NEW_BIN
set -euo pipefail
DEST=/work/main/.device/s24-guarded
rm -rf "$DEST" && mkdir -p "$DEST/b/bin" "$DEST/b/lib"
cp "$1" "$DEST/b/bin/spattn-bench.base"
cp "$2" "$DEST/b/bin/spattn-bench.new"
chmod u+w "$DEST"/b/bin/*
strip --strip-debug "$DEST"/b/bin/*
ldd "$2" | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$DEST/b/lib/"
(cd "$DEST/b" && XZ_OPT=-9 tar -cJf ../bundle.tar.xz bin lib) && rm -rf "$DEST/b"
cp "$(dirname "$0")/run.sh" "$DEST/"
du -sh "$DEST"
