#!/usr/bin/env bash
# s22-slbuild device run (from s21-slbuild's; issue 11 item 5, the sampled_lines GPU build): packs (opt, CUDA)
# build_index_gpu_test and spattn-bench of this tree, with the shared libraries the GPU machine
# lacks, as /work/main/.gpu-s22-slbuild/<name>.tar.xz (git-ignored), plus SDPA's reference script and
# run.sh. Pack the change as `new` and the tree it started from as `base`:
#   pack.sh new; git stash; pack.sh base; git stash pop
# then, with carry [".gpu-s22-slbuild"]: bash .gpu-s22-slbuild/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
NAME=${1:?new or base}
DEST=/work/main/.gpu-s22-slbuild
TARGETS=(kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test tests/bench/spattn-bench)
# The new test of the row assembler's fill fallback exists only in `new`.
[ "$NAME" = base ] || TARGETS+=(kernels/cuda/row_assembly_gpu_test)
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
cp kernels/cuda/bench/sdpa_reference.py bench/results/kernels/s22-slbuild/run.sh "$DEST/"
du -sh "$DEST"/*
