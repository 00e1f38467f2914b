#!/usr/bin/env bash
# Packs run 2: this branch's cuda_bench (bazel-bin, -c opt, with the SLEEP_WAITS / STALE_MAX
# knobs) and run2.sh into /work/main/.gpu/s23-sparse (carried as .gpu/s23-sparse).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=/work/main/.gpu/s23-sparse
rm -rf $D && mkdir -p $D/bin $D/lib
cp bazel-bin/kernels/cuda/cuda_bench $D/bin/ && chmod u+w $D/bin/cuda_bench && strip --strip-debug $D/bin/cuda_bench
ldd bazel-bin/kernels/cuda/cuda_bench | awk '/=> \// {print $3}' | { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } | xargs -r -I{} cp -nL {} $D/lib/
(cd $D && tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp bench/results/kernels/s23-sparse/run2.sh $D/
du -sh $D
