#!/usr/bin/env bash
# s22-sldensity device run (issue 11 items 3 + 4: twin tests incl. clip_diagonals, sampled_lines variants): packs (opt, CUDA)
# build_index_gpu_test and spattn-bench of this tree with the shared libraries the GPU machine
# lacks and run.sh into /work/main/.gpu-s22-sldensity (git-ignored).
# Then, with carry [".gpu-s22-sldensity"]: bash .gpu-s22-sldensity/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
DEST=${1:-/work/main/.gpu-s22-sldensity}
TARGETS=(kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test tests/bench/spattn-bench)
bazel build -c opt --config=cuda $(printf '//%s ' "${TARGETS[@]}" | sed -E 's#//([^ ]*)/([^/ ]*) #//\1:\2 #g')
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
(cd "$DEST" && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/selection/s22-sldensity/run.sh "$DEST/"
du -sh "$DEST"
