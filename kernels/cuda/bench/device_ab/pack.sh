#!/usr/bin/env bash
# Packs opt binaries for one A/B device call: a base build's binaries next to this tree's, small
# enough for the run tool's 64 MiB carry. Every session's helpers wrote this by hand (s27-s32 under
# bench/results/kernels/*/pack.sh); this is the one copy.
#
#   DEST=/work/main/.device/<name> BASE=/tmp/<name>/base \
#     kernels/cuda/bench/device_ab/pack.sh tests/bench/spattn-bench kernels/cuda/build_index_gpu_test
#
# Arguments: bazel-bin paths of this tree's binaries (built -c opt --config=cuda beforehand).
# BASE (optional): a folder of another build's binaries; each one named like an argument's
# basename travels as <name>-base. The first binary is zstd'ed whole and the others travel as
# zstd --patch-from patches against it (the CUDA code they share makes them small). Shared
# libraries the GPU machine lacks travel in lib.tar.xz, zstd itself in zl/. DEST must lie inside
# the checkout the run tool sends (/work/main: a worktree's files do not travel), git-ignored
# (.device/ is); carry [".device/<name>"] and run `bash .device/<name>/<your run script>`, which
# sources lib.sh from the same folder.
set -euo pipefail
: "${DEST:?DEST=<folder to fill>}"
[ $# -gt 0 ] || { echo "usage: DEST=... [BASE=...] $0 bazel-bin-path..." >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/lib"
for t in "$@"; do cp "bazel-bin/$t" "$T/bin/"; done
if [ -n "${BASE:-}" ]; then
  for t in "$@"; do
    b=$(basename "$t")
    [ -f "$BASE/$b" ] && cp "$BASE/$b" "$T/bin/$b-base"
  done
fi
chmod u+w "$T"/bin/*
strip --strip-debug "$T"/bin/*
for b in "$T"/bin/*; do
  # Everything but the C/C++ runtime, which the GPU machine has in a newer version.
  ldd "$b" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$T/lib/"
done
rm -rf "$DEST" && mkdir -p "$DEST/zl"
first=$(basename "$1")
zstd -q -f -12 --long=27 "$T/bin/$first" -o "$DEST/$first.zst"
for b in "$T"/bin/*; do
  n=$(basename "$b")
  [ "$n" = "$first" ] && continue
  zstd -q -f -12 --long=27 --patch-from="$T/bin/$first" "$b" -o "$DEST/$n.patch.zst"
done
(cd "$T" && tar -cJf "$DEST/lib.tar.xz" lib)
cp /usr/bin/zstd "$DEST/zl/"
ldd /usr/bin/zstd | awk '/=> \// {print $3}' | { grep -vE '/(libc|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -L {} "$DEST/zl/"
(cd "$T/bin" && md5sum *) > "$DEST/md5.txt"
cp "$HERE/lib.sh" "$HERE/shares.py" "$HERE/../builder_stages.py" "$DEST/"
du -sh "$DEST"
