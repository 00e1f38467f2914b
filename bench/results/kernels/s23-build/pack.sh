#!/usr/bin/env bash
# s23-build: packs (opt, CUDA) build_index_gpu_test and spattn-bench of this tree, the base
# spattn-bench (main c3ec5f8's, $BASE: built in this worktree with c3ec5f8's vertical_slash.cu and
# row_assembly.h checked out, then restored), their shared libraries and run.sh / stages.py into
# .gpu/s23-build (git-ignored). Then, with carry [".gpu"]:  bash .gpu/s23-build/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${DEST:-$PWD/.gpu/s23-build}
BASE=${BASE:-/tmp/s23b_base/spattn-bench}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
NEWDIR=${NEWDIR:-}  # this tree's two binaries copied there (else built now)
[ -n "$NEWDIR" ] || bazel build -c opt --config=cuda //kernels/cuda:build_index_gpu_test //tests/bench:spattn-bench
for t in kernels/cuda/build_index_gpu_test tests/bench/spattn-bench "$BASE"; do
  src=$t; [ -f "$src" ] || src=bazel-bin/$t
  [ -n "$NEWDIR" ] && [ "$t" != "$BASE" ] && src=$NEWDIR/$(basename "$t")
  b=$(basename "$t"); [ "$t" = "$BASE" ] && b=spattn-bench-base
  cp "$src" "$DEST/bin/$b"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  ldd "$src" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s23-build/run*.sh bench/results/kernels/s23-build/stages.py "$DEST/"
du -sh "$DEST"
