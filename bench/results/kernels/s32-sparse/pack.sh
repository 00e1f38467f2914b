#!/usr/bin/env bash
# Packs the device run of s32-sparse: this branch's cuda_bench / attention_cuda_test (bazel-bin,
# -c opt) and, where built, its spattn-bench next to main b50f02c's (/work/main/bazel-bin, not
# rebuilt) as bin/base/spattn-bench; libs; the run script; into .device/s32-sparse (git-ignored,
# carried as .device/s32-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=.device/s32-sparse
RUN=${RUN:-run1.sh}
NEW_BINS=${NEW_BINS:-kernels/cuda/cuda_bench kernels/cuda/attention_cuda_test}
BASE_BINS=${BASE_BINS:-}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
FILES=""
for p in $BASE_BINS; do
  b=$(basename $p)
  cp /work/main/bazel-bin/$p $D/bin/base/ && chmod u+w $D/bin/base/$b && strip --strip-debug $D/bin/base/$b
  libs /work/main/bazel-bin/$p; FILES="$FILES bin/base/$b"
done
for p in $NEW_BINS; do
  b=$(basename $p)
  cp bazel-bin/$p $D/bin/ && chmod u+w $D/bin/$b && strip --strip-debug $D/bin/$b
  libs bazel-bin/$p; FILES="$FILES bin/$b"
done
(cd $D && tar -cf - $FILES lib | xz -6 --lzma2=preset=6,dict=256MiB -T2 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s32-sparse/$RUN $D/
du -sh $D
# The run tool's checkout is /work/main: the bundle has to lie there (git-ignored) to be carried.
mkdir -p /work/main/.device/s32-sparse && cp $D/* /work/main/.device/s32-sparse/
