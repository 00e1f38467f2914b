#!/usr/bin/env bash
# Packs a device run of s30-ring: main 1abaa94 (= e9c159b kernels)'s cuda_bench / attention_cuda_test (BASE_DIR,
# -c opt, built before any change) as bin/base/, this branch's (bazel-bin; NEW=0: none) as bin/,
# the run script into /work/main/.device/s30-ring (git-ignored there; carried as
# .device/s30-ring).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.device/s30-ring
BASE_DIR=${BASE_DIR:-/tmp/s30ring/base_bin}
RUN=${RUN:-run1.sh}
BASE_BINS=${BASE_BINS:-cuda_bench attention_cuda_test}
NEW_BINS=${NEW_BINS:-cuda_bench attention_cuda_test}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
FILES=""
for b in $BASE_BINS; do
  cp $BASE_DIR/$b $D/bin/base/ && chmod u+w $D/bin/base/$b && strip --strip-debug $D/bin/base/$b
  libs $BASE_DIR/$b; FILES="$FILES bin/base/$b"
done
for b in $NEW_BINS; do
  cp bazel-bin/kernels/cuda/$b $D/bin/ && chmod u+w $D/bin/$b && strip --strip-debug $D/bin/$b
  libs bazel-bin/kernels/cuda/$b; FILES="$FILES bin/$b"
done
(cd $D && tar -cf - $FILES lib | xz -6 --lzma2=preset=6,dict=256MiB -T2 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s30-ring/$RUN $D/
du -sh $D
