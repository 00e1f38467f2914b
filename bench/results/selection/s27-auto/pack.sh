#!/usr/bin/env bash
# Packs this branch's opt spattn-bench and main b58a3b6's (built in a clone at $MAIN, default
# /tmp/s27auto-main) with the shared libraries the GPU machine lacks into
# /work/main/.device/s27-auto (git-ignored there), with run.sh.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
MAIN=${MAIN:-/tmp/s27auto-main}
DEST=/work/main/.device/s27-auto
rm -rf "$DEST" && mkdir -p "$DEST/stage/bin" "$DEST/stage/lib"
cp bazel-bin/tests/bench/spattn-bench "$DEST/stage/bin/spattn-bench"
cp "$MAIN/bazel-bin/tests/bench/spattn-bench" "$DEST/stage/bin/spattn-bench-main"
for b in "$DEST"/stage/bin/*; do
  chmod u+w "$b" && strip --strip-debug "$b"
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/stage/lib/"
done
(cd "$DEST/stage" && XZ_OPT=-9 tar -cJf ../bundle.tar.xz bin lib) && rm -rf "$DEST/stage"
cp bench/results/selection/s27-auto/run.sh "$DEST/"
du -sh "$DEST"
