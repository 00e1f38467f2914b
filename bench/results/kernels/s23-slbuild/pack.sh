#!/usr/bin/env bash
# s23-slbuild device run (from s22-slbuild's; issue 11 item 5, pass 3's CTA-level tile list): packs
# (opt, CUDA) this tree's GPU tests and spattn-bench with the shared libraries the GPU machine
# lacks as .gpu/s23-slbuild/<name>.tar.xz (git-ignored), plus run.sh. Pack the
# change as `new` and main (c3ec5f8) as `base` (spattn-bench only):
#   pack.sh new; git stash; pack.sh base; git stash pop
# or BIN_DIR=<a directory holding main's opt CUDA spattn-bench> pack.sh base (no build; this run
# took the lead's /work/main/bazel-bin/tests/bench/spattn-bench of c3ec5f8).
# then, with carry [".gpu"]: bash .gpu/s23-slbuild/run.sh
# `pack.sh all` then puts both in one archive (all.tar.xz, base's bench as spattn-bench-base, one
# lib folder, a 192 MiB xz window that sees the two benches' shared fatbins: 9.7 MB instead of
# 24.5) for a call whose working tree would otherwise pass the 64 MiB limit; copy DEST's all.tar.xz
# and run.sh into the session checkout's ignored .gpu/s23-slbuild/ (calls send that checkout).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
NAME=${1:?new, base or all}
DEST=$PWD/.gpu/s23-slbuild
if [ "$NAME" = all ]; then
  S=$(mktemp -d)
  tar -xJf "$DEST/new.tar.xz" -C "$S" && mkdir "$S/b" && tar -xJf "$DEST/base.tar.xz" -C "$S/b"
  mv "$S/b/bin/spattn-bench" "$S/bin/spattn-bench-base" && rm -rf "$S/b"
  (cd "$S" && tar -cf - lib bin/spattn-bench bin/spattn-bench-base bin/build_index_gpu_test \
     bin/sampled_lines_gpu_test bin/row_assembly_gpu_test |
     xz -T2 -9 --lzma2=preset=9,dict=192MiB > "$DEST/all.tar.xz")
  rm -rf "$S"
  cp bench/results/kernels/s23-slbuild/run.sh "$DEST/"
  du -sh "$DEST"/*
  exit 0
fi
TARGETS=(tests/bench/spattn-bench)
[ "$NAME" = base ] || TARGETS+=(kernels/cuda/build_index_gpu_test kernels/cuda/sampled_lines_gpu_test
                                 kernels/cuda/row_assembly_gpu_test)
[ -n "${BIN_DIR:-}" ] ||
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
for t in "${TARGETS[@]}"; do
  src=bazel-bin/$t; [ -n "${BIN_DIR:-}" ] && src=$BIN_DIR/$(basename "$t")
  pack "$src" "$(basename "$t")"
done
(cd "$STAGE" && tar -cJf "$DEST/$NAME.tar.xz" bin lib)
rm -rf "$STAGE"
cp bench/results/kernels/s23-slbuild/run.sh "$DEST/"
du -sh "$DEST"/*
