#!/usr/bin/env bash
# Packs the new build's test binaries, cuda_bench and spattn-bench, plus base binaries from
# BASE_DIR (cuda_bench, spattn-bench of main 1f166f0) as bin/base/, into /work/main/.gpu-s18-slkernel.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu-s18-slkernel
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in ${BINS:-kernels/cuda/attention_cuda_test kernels/cuda/cuda_engine_test kernels/cuda/cuda_bench tests/bench/spattn-bench}; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
for b in ${BASE_BINS:-}; do cp $BASE_DIR/$b $D/bin/base/ && chmod u+w $D/bin/base/$b && strip --strip-debug $D/bin/base/$b; done
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s18-slkernel/run*.sh $D/
du -sh $D
