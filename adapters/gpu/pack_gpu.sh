#!/usr/bin/env bash
# Packs what adapters/gpu/run_gpu.sh needs on the GPU machine into .gpu-h6 (git-ignored):
# the CUDA-built spattn-worker + its shared libraries, the Python packages (spattn with stubs,
# spattn_llm), the client tests, and Debian 12's python3.11 + python3-grpcio/-protobuf/-numpy
# .debs (the GPU machine's python3 has torch but maybe no grpcio; no registry is reachable there).
#   bazel build $(cat .bazel-config) //server:spattn-worker && adapters/gpu/pack_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.gpu-h6
rm -rf "$D/bundle" "$D/pypkg" "$D"/bundle.tar.xz
mkdir -p "$D/bundle/bin" "$D/bundle/lib" "$D/pypkg" "$D/debs"
cp bazel-bin/server/spattn-worker "$D/bundle/bin/"
chmod u+w "$D/bundle/bin/spattn-worker"
strip --strip-debug "$D/bundle/bin/spattn-worker"
ldd bazel-bin/server/spattn-worker | awk '/=> \// {print $3}' |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' || true; } |
  xargs -r -I{} cp -nL {} "$D/bundle/lib/"
(cd "$D/bundle" && tar -cJf ../bundle.tar.xz bin lib)
rm -rf "$D/bundle"
cp -r client/python/spattn adapters/common/spattn_llm "$D/pypkg/"
rm -f "$D"/pypkg/spattn/v1/*_pb2*.py
client/python/gen_stubs.sh proto "$D/pypkg"
cp client/python/tests/junit_runner.py client/python/tests/test_client.py adapters/gpu/*.py \
   adapters/gpu/run_gpu.sh "$D/pypkg/"
find "$D/pypkg" -name __pycache__ -prune -exec rm -rf {} +
(cd "$D/debs" && ls python3-grpcio_*.deb >/dev/null 2>&1 ||
  apt-get download python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3-grpcio \
    python3-numpy python3-protobuf libblas3 liblapack3 libgfortran5 libquadmath0 libexpat1 \
    libffi8 libc-ares2 libre2-9 libabsl20220623 libprotobuf32 libssl3)
du -sh "$D"
