#!/usr/bin/env bash
# s23-guard device run (issue 11 item 3: the guarded path and sampled_lines alone with the
# session-22 sampled_lines defaults): packs spattn-bench (opt, CUDA) of this tree with the shared
# libraries the GPU machine lacks and run.sh into <worktree>/.gpu (git-ignored).
# Then, with carry [".gpu"]: bash .gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${1:-$PWD/.gpu}
bazel build -c opt --config=cuda //tests/bench:spattn-bench
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
cp bazel-bin/tests/bench/spattn-bench "$DEST/bin/"
chmod u+w "$DEST/bin/spattn-bench"
strip --strip-debug "$DEST/bin/spattn-bench"
ldd bazel-bin/tests/bench/spattn-bench | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$DEST/lib/"
(cd "$DEST" && XZ_OPT=-9 tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/selection/s23-guard/run.sh "$DEST/"
du -sh "$DEST"
