#!/usr/bin/env bash
# Packs a device run: this branch's attention_cuda_test and cuda_bench (bazel-bin, -c opt), main
# b58a3b6's cuda_bench (BASE_BENCH, built before the change) as bin/base/, the run script and
# sparse_timeline.py into /work/main/.device/s27-sparse (git-ignored there; carried to the device
# as .device/s27-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.device/s27-sparse
BASE_BENCH=${BASE_BENCH:-/tmp/s27sp/base_bin/cuda_bench}
RUN=${RUN:-run1.sh}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_bench; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
cp $BASE_BENCH $D/bin/base/ && chmod u+w $D/bin/base/cuda_bench && strip --strip-debug $D/bin/base/cuda_bench
# One xz stream with a 256 MiB dictionary (the three binaries share most of their bytes).
(cd $D && tar -cf - bin/cuda_bench bin/base/cuda_bench bin/attention_cuda_test lib |
  xz -6 --lzma2=preset=6,dict=256MiB -T2 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s27-sparse/$RUN kernels/cuda/bench/sparse_timeline.py $D/
du -sh $D
