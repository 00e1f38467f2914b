#!/usr/bin/env bash
# s19-sl1m device runs (issue 11 item 5 at 1M): packs (opt, CUDA) build_index_gpu_test and
# spattn-bench of this tree, with the shared libraries the GPU machine lacks, as
# /work/main/.gpu-s19-sl1m/<name>.tar.xz (git-ignored), plus the run scripts and SDPA's chunk
# script. `pack.sh new` for the change; `pack.sh base` from the tree it started from.
# Then, with carry [".gpu-s19-sl1m"]: bash .gpu-s19-sl1m/run<N>.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
NAME=${1:?new or base}
DEST=/work/main/.gpu-s19-sl1m
TARGETS=(kernels/cuda/build_index_gpu_test tests/bench/spattn-bench)
bazel build -c opt --config=cuda $(printf '//%s ' "${TARGETS[@]}" | sed -E 's#//([^ ]*)/([^/ ]*) #//\1:\2 #g')
STAGE=$(mktemp -d)
mkdir -p "$DEST" "$STAGE/bin" "$STAGE/lib"
pack() {  # binary, name
  cp "$1" "$STAGE/bin/$2"
  chmod u+w "$STAGE/bin/$2"
  strip --strip-debug "$STAGE/bin/$2"
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$STAGE/lib/"
}
for t in "${TARGETS[@]}"; do pack "bazel-bin/$t" "$(basename "$t")"; done
(cd "$STAGE" && tar -cJf "$DEST/$NAME.tar.xz" bin lib)
rm -rf "$STAGE"
cp tests/gpu/sdpa_chunk.py kernels/cuda/bench/sdpa_reference.py bench/results/selection/s19-sl1m/run*.sh "$DEST/"
du -sh "$DEST"/*
