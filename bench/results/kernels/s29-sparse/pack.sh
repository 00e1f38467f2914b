#!/usr/bin/env bash
# Packs a device run of s29-sparse: main 0685884's cuda_bench / attention_cuda_test (BASE_DIR,
# -c opt, built before any change) as bin/base/, this branch's (bazel-bin) as bin/, the run
# script into /work/main/.device/s29-sparse (git-ignored there; carried as .device/s29-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.device/s29-sparse
BASE_DIR=${BASE_DIR:-/tmp/s29sp/base_bin}
RUN=${RUN:-run1.sh}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
FILES=""
for b in cuda_bench attention_cuda_test; do
  cp $BASE_DIR/$b $D/bin/base/ && chmod u+w $D/bin/base/$b && strip --strip-debug $D/bin/base/$b
  libs $BASE_DIR/$b; FILES="$FILES bin/base/$b"
  cp bazel-bin/kernels/cuda/$b $D/bin/ && chmod u+w $D/bin/$b && strip --strip-debug $D/bin/$b
  FILES="$FILES bin/$b"
done
(cd $D && tar -cf - $FILES lib | xz -6 --lzma2=preset=6,dict=256MiB -T2 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s29-sparse/$RUN $D/
du -sh $D
