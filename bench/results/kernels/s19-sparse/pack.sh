#!/usr/bin/env bash
# Packs this branch's test binaries, cuda_bench and spattn-bench, the base cuda_bench (main
# dd61227, built before the change, in BASE_DIR) as bin/base/, the Python harnesses and the run
# scripts into /work/main/.gpu-s19-sparse (ref/ there: the fetched reference files, kept).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu-s19-sparse
BASE_DIR=${BASE_DIR:-/tmp/s19sparse_base}
rm -rf $D/bin $D/lib $D/bundle.tar.xz && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_engine_test kernels/cuda/cuda_bench \
         tests/bench/spattn-bench server/cuda_backend_test server/cuda_ipc_test server/cuda_ipc_producer; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
cp $BASE_DIR/cuda_bench $D/bin/base/ && chmod u+w $D/bin/base/cuda_bench && strip --strip-debug $D/bin/base/cuda_bench
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp kernels/cuda/bench/sdpa_reference.py kernels/cuda/attention/hopper/minference_reference.py \
   kernels/cuda/attention/hopper/sparse_references.py bench/results/kernels/s19-sparse/run*.sh $D/
du -sh $D
