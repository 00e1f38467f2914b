#!/usr/bin/env bash
# s15-guard device run (issue 11, batched recall guard): packs (opt, CUDA) cuda_backend_test (+ its
# IPC producer) and spattn-bench of this tree, and spattn-bench of a baseline tree (BASE, the
# guard head by head) as spattn-bench-base, with the shared libraries the GPU machine lacks, SDPA's
# reference script and run_s15guard.sh into /work/main/.gpu-s15guard (git-ignored). Then, with
# carry [".gpu-s15guard"]: bash .gpu-s15guard/run_s15guard.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DEST=${1:-/work/main/.gpu-s15guard}
BASE=${BASE:-/work/wt/s15-guard-base}
TARGETS=(server/cuda_backend_test server/cuda_ipc_producer tests/bench/spattn-bench)
bazel build -c opt --config=cuda $(printf '//%s ' "${TARGETS[@]}" | sed -E 's#//([^ ]*)/([^/ ]*) #//\1:\2 #g')
(cd "$BASE" && bazel build -c opt --config=cuda //tests/bench:spattn-bench)
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
pack() {  # binary, name
  cp "$1" "$DEST/bin/$2"
  chmod u+w "$DEST/bin/$2"
  strip --strip-debug "$DEST/bin/$2"
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
}
for t in "${TARGETS[@]}"; do pack "bazel-bin/$t" "$(basename "$t")"; done
pack "$BASE/bazel-bin/tests/bench/spattn-bench" spattn-bench-base
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp kernels/cuda/bench/sdpa_reference.py bench/results/selection/run_s15guard.sh "$DEST/"
du -sh "$DEST"
