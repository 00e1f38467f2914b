#!/usr/bin/env bash
# Packs run 1: this branch's attention_cuda_test and cuda_bench, the base ones (main 7a066d9,
# built before the change, in BASE_DIR) as bin/base/, and run1.sh into /work/main/.gpu-s22-sparse
# (carried to the device by the run tool).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu-s22-sparse
BASE_DIR=${BASE_DIR:-/tmp/s22sparse_base}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_bench; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
cp $BASE_DIR/cuda_bench $D/bin/base/ && chmod u+w $D/bin/base/cuda_bench && strip --strip-debug $D/bin/base/cuda_bench
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s22-sparse/run1.sh $D/
du -sh $D
