#!/usr/bin/env bash
# Packs spattn-bench (opt, CUDA) with the shared libraries the GPU machine lacks, SDPA's reference
# script and run_h4.sh into the git-ignored .gpu-h4/; then on the GPU machine: bash .gpu-h4/run_h4.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
bazel build -c opt //tests/bench:spattn-bench
DEST=.gpu-h4
rm -rf $DEST/bin $DEST/lib; mkdir -p $DEST/bin $DEST/lib
cp bazel-bin/tests/bench/spattn-bench $DEST/bin/; chmod u+w $DEST/bin/spattn-bench; strip --strip-debug $DEST/bin/spattn-bench
ldd bazel-bin/tests/bench/spattn-bench | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} $DEST/lib/
cp kernels/cuda/sdpa_reference.py bench/results/selection/run_h4.sh $DEST/
du -sh $DEST
