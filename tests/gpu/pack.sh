#!/usr/bin/env bash
# Packs every GPU test and benchmark (opt builds) with the shared libraries the GPU machine lacks
# into one folder that travels with a device run (default: <repo>/.gpu-all, git-ignored), so one
# run checks and measures the whole CUDA path. Then, on the GPU machine: bash .gpu-all/run.sh,
# then (a second call) bash .gpu-all/run_1m.sh, the 1M chunk, and bash .gpu-all/run_promise.sh, the
# recall promise on a second synthetic model.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.gpu-all}
# What run.sh and run_1m.sh run (cuda_bench and spattn-server-bench travel with their own
# packers: with them the folder passes the run tool's 64 MiB carry limit).
TARGETS=(
  kernels/cuda/attention_cuda_test kernels/cuda/cuda_engine_test
  kernels/cuda/build_index_gpu_test kernels/cuda/mass_recall_test kernels/cuda/sampled_lines_gpu_test
  kernels/cuda/row_assembly_gpu_test
  server/cuda_backend_test server/cuda_ipc_test server/cuda_ipc_producer
  tests/bench/spattn-bench
)
bazel build -c opt $(printf '//%s ' "${TARGETS[@]}" | sed -E 's#//([^ ]*)/([^/ ]*) #//\1:\2 #g')
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  b=$(basename "$t")
  cp "bazel-bin/$t" "$DEST/bin/"
  chmod u+w "$DEST/bin/$b"
  strip --strip-debug "$DEST/bin/$b"
  # Everything but the C/C++ runtime, which the GPU machine has in a newer version.
  ldd "bazel-bin/$t" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
    xargs -r -I{} cp -nL {} "$DEST/lib/"
done
# A 384 MiB dictionary spans several binaries (~77 MiB each, most of it the same CUDA code), so
# each one after the first costs little: 16 MiB in all at session 27, where xz -9's 64 MiB
# dictionary (less than one binary) gave 60 MiB, over the carry limit with the working tree.
# Decompressing needs ~400 MiB of memory.
(cd "$DEST" && XZ_OPT='--lzma2=preset=6,dict=384MiB' tar -cJf bundle.tar.xz bin lib && rm -rf bin lib)
cp tests/gpu/run.sh tests/gpu/run_1m.sh tests/gpu/run_promise.sh tests/gpu/sdpa_chunk.py tests/gpu/report.py kernels/cuda/bench/sdpa_reference.py "$DEST/"
du -sh "$DEST"
# The device tool sends the working tree with the carried folder, 64 MiB in all. bench/results
# grows every session (~10 MiB at session 27); should the tool refuse the call, move bench/results
# out of the tree for the call and back after it (run.sh does not read it).
tree=$( (git ls-files -z | xargs -0 du -cb 2>/dev/null || true) | tail -1 | cut -f1)
bundle=$(du -sb "$DEST" | cut -f1)
echo "working tree $((tree / 1048576)) MiB + $DEST $((bundle / 1048576)) MiB (device carry limit 64 MiB)"
