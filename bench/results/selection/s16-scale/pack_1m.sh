#!/usr/bin/env bash
# Packs (opt, CUDA) spattn-bench of this tree with the shared libraries the GPU machine lacks,
# sdpa_chunk.py and run_1m.sh into /work/main/.gpu-s16-scale (git-ignored). Then, with
# carry [".gpu-s16-scale"]: bash .gpu-s16-scale/run_1m.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${1:-/work/main/.gpu-s16-scale}
bazel build -c opt --config=cuda //tests/bench:spattn-bench
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
cp bazel-bin/tests/bench/spattn-bench "$DEST/bin/"
chmod u+w "$DEST/bin/spattn-bench"
strip --strip-debug "$DEST/bin/spattn-bench"
ldd bazel-bin/tests/bench/spattn-bench | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$DEST/lib/"
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp tests/gpu/sdpa_chunk.py bench/results/selection/s16-scale/run_1m.sh "$DEST/"
du -sh "$DEST"
