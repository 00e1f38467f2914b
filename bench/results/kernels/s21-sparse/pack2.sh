#!/usr/bin/env bash
# Packs run 2: this branch's attention_cuda_test and cuda_bench (final build), the base cuda_bench
# (main 11899f0, BASE_DIR) as bin/base/ and the dynamic-work-list-only cuda_bench (0f1b4d0,
# DYN_DIR) as bin/dyn/, into /work/main/.gpu-s21-sparse.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu-s21-sparse
BASE_DIR=${BASE_DIR:-/tmp/s21sparse_base}
DYN_DIR=${DYN_DIR:-/tmp/s21sparse_dyn}
rm -rf $D && mkdir -p $D/bin/base $D/bin/dyn $D/lib
libs() { ldd "$1" | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/; }
for b in kernels/cuda/attention_cuda_test kernels/cuda/cuda_bench; do
  cp bazel-bin/$b $D/bin/ && chmod u+w $D/bin/$(basename $b) && strip --strip-debug $D/bin/$(basename $b); libs bazel-bin/$b
done
for x in base:$BASE_DIR dyn:$DYN_DIR; do
  cp ${x#*:}/cuda_bench $D/bin/${x%%:*}/ && chmod u+w $D/bin/${x%%:*}/cuda_bench && strip --strip-debug $D/bin/${x%%:*}/cuda_bench
done
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s21-sparse/run2.sh $D/
du -sh $D
