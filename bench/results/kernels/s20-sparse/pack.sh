#!/usr/bin/env bash
# Packs this branch's attention_cuda_test, cuda_bench and spattn-bench, the base cuda_bench (main
# 36c27b9, built before the change, in BASE_DIR) as bin/base/, the Python harnesses, the run
# script and its summary into /work/main/.gpu-s20-sparse; ref/ (the fetched reference files,
# never committed) from session 19's folder.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu-s20-sparse
BASE_DIR=${BASE_DIR:-/tmp/s20sparse_base}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_bench tests/bench/spattn-bench; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
cp $BASE_DIR/cuda_bench $D/bin/base/ && chmod u+w $D/bin/base/cuda_bench && strip --strip-debug $D/bin/base/cuda_bench
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp -r /work/main/.gpu-s19-sparse/ref $D/
cp kernels/cuda/bench/sdpa_reference.py kernels/cuda/attention/hopper/minference_reference.py \
   kernels/cuda/attention/hopper/sparse_references.py bench/results/kernels/s20-sparse/run*.sh \
   bench/results/kernels/s20-sparse/summarize.py $D/
du -sh $D
