#!/usr/bin/env bash
# Packs run 1: this branch's attention_cuda_test and cuda_bench (bazel-bin, -c opt), main's
# cuda_bench (c3ec5f8, BASE_BENCH) as bin/base/, and run1.sh into /work/main/.gpu/s23-sparse
# (git-ignored there; carried to the device by the run tool as .gpu/s23-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu/s23-sparse
BASE_BENCH=${BASE_BENCH:-/tmp/s23sp/base_bin/cuda_bench}
rm -rf $D && mkdir -p $D/bin/base $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_bench; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
cp $BASE_BENCH $D/bin/base/ && chmod u+w $D/bin/base/cuda_bench && strip --strip-debug $D/bin/base/cuda_bench
# One xz stream with a 256 MiB dictionary: the three binaries share most of their bytes (22 MB
# with plain tar -cJ, 9 MB so; the call's tree -- /work/main's tracked and untracked files --
# must stay under 64 MiB with the carried bundle).
(cd $D && tar -cf - bin/cuda_bench bin/base/cuda_bench bin/attention_cuda_test lib |
  xz -6 --lzma2=preset=6,dict=256MiB -T1 > bundle.tar.xz && rm -rf bin lib)
cp bench/results/kernels/s23-sparse/run1.sh $D/
du -sh $D
