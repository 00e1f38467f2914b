#!/usr/bin/env bash
# Packs the device run of s31-sparse: main e30e6a9's cuda_bench / attention_cuda_test /
# spattn-bench (BASE_DIR, -c opt, built before any change) as bin/base/, this branch's (bazel-bin)
# as bin/, and the run script, into /work/main/.device/s31-sparse (git-ignored there; carried as
# .device/s31-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.device/s31-sparse
BASE_DIR=${BASE_DIR:-/tmp/s31sparse/base_bin}
RUN=${RUN:-run1.sh}
BASE_BINS=${BASE_BINS:-cuda_bench spattn-bench}
NEW_BINS=${NEW_BINS:-kernels/cuda/cuda_bench kernels/cuda/attention_cuda_test tests/bench/spattn-bench}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
FILES=""
for b in $BASE_BINS; do
  cp $BASE_DIR/$b $D/bin/base/ && chmod u+w $D/bin/base/$b && strip --strip-debug $D/bin/base/$b
  libs $BASE_DIR/$b; FILES="$FILES bin/base/$b"
done
for p in $NEW_BINS; do
  b=$(basename $p)
  cp bazel-bin/$p $D/bin/ && chmod u+w $D/bin/$b && strip --strip-debug $D/bin/$b
  libs bazel-bin/$p; FILES="$FILES bin/$b"
done
(cd $D && tar -cf - $FILES lib | xz -6 --lzma2=preset=6,dict=256MiB -T2 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s31-sparse/$RUN $D/
du -sh $D
