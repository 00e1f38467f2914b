#!/usr/bin/env bash
# s15-selection device runs: packs (opt, CUDA) mass_recall_test, cuda_backend_test (+ its IPC
# producer) and spattn-bench with the shared libraries the GPU machine lacks, SDPA's reference
# script and run_s15sel.sh into /work/main/.gpu-s15sel (git-ignored; the run tool copies
# /work/main). Then, with carry [".gpu-s15sel"]: bash .gpu-s15sel/run_s15sel.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DEST=${1:-/work/main/.gpu-s15sel}
TARGETS=(kernels/cuda/mass_recall_test server/cuda_backend_test server/cuda_ipc_producer
         tests/bench/spattn-bench)
bazel build -c opt --config=cuda $(printf '//%s ' "${TARGETS[@]}" | sed -E 's#//([^ ]*)/([^/ ]*) #//\1:\2 #g')
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  b=$(basename "$t")
  cp "bazel-bin/$t" "$DEST/bin/"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp kernels/cuda/bench/sdpa_reference.py bench/results/selection/run_s15sel.sh "$DEST/"
du -sh "$DEST"
