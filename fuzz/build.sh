#!/usr/bin/env bash
# Builds the libFuzzer binaries (clang, ASan + UBSan) into fuzz/out/:
#   fuzz/build.sh [target ...]        (default: every target in FUZZ_TARGETS below)
# The harness and the parser sources it exercises are compiled by clang with coverage and
# sanitizers; everything else (protobuf messages, absl, ...) is linked from the normal Bazel
# build of //fuzz:<target>_corpus_test, whose link line (its -2.params file) is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/fuzz/out
mkdir -p "$OUT"
CXX=${CXX_FUZZ:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz/build.sh: $CXX missing (deploy/setup.sh installs clang)"; exit 1; }

declare -A SOURCES=(
  [parse_request]="server/convert.cc server/request.cc proto/method_config_convert.cc kernels/method_config.cc kernels/problem.cc kernels/dtype.cc"
  [npy]="kernels/io/tensor_io.cc kernels/dtype.cc"
  [safetensors]="kernels/io/tensor_io.cc kernels/dtype.cc"
  [record_codec]="index/record_codec.cc index/crc32c.cc"
  [config_json]="client/index_commands.cc bin:proto/spattn/v1/index_service.grpc.pb.cc"
  [method_config]="proto/method_config_convert.cc kernels/method_config.cc"
)
FUZZ_TARGETS=(parse_request npy safetensors record_codec config_json method_config)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${FUZZ_TARGETS[@]}")

CONFIG=$(cat .bazel-config 2>/dev/null || echo --config=nocuda)
tests=()
for t in "${targets[@]}"; do tests+=("//fuzz:${t}_corpus_test"); done
bazel build $CONFIG "${tests[@]}" >/dev/null 2>&1 || bazel build $CONFIG "${tests[@]}"
EXEC=$(bazel info $CONFIG execution_root 2>/dev/null)
BIN=$(bazel info $CONFIG bazel-bin 2>/dev/null)

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-sanitize=vptr"
CXXFLAGS="-std=c++17 -O1 -g -fno-omit-frame-pointer $SAN -fsanitize=fuzzer-no-link -I$ROOT -I$BIN -I$BIN/proto -w"

for t in "${targets[@]}"; do
  objs=()
  mkdir -p "$OUT/obj/$t"
  for src in fuzz/${t}_fuzzer.cc ${SOURCES[$t]}; do
    o="$OUT/obj/$t/$(echo "$src" | tr /: __).o"
    # bin:PATH = a generated file (gRPC stubs compiled by the same compiler as their users, so
    # template instantiations agree).
    path="$ROOT/$src"
    [[ "$src" == bin:* ]] && path="$BIN/${src#bin:}"
    if [ ! -f "$o" ] || [ "$path" -nt "$o" ]; then
      (cd "$EXEC" && $CXX $CXXFLAGS -c "$path" -o "$o")
    fi
    objs+=("$o")
  done
  # The Bazel link line minus its main, the harness library and the objects compiled above.
  params="$BIN/fuzz/${t}_corpus_test-2.params"
  skip_re="replay_main|_fuzzer_lib/|^-o$|/fuzz/${t}_corpus_test$|^-pass-exit-codes$"
  for src in ${SOURCES[$t]}; do
    skip_re="$skip_re|/$(basename "${src%.cc}").pic.o$"  # e.g. /index_service.grpc.pb.pic.o
  done
  mapfile -t rest < <(grep -Ev "$skip_re" "$params" | grep -v '^-Wl,-whole-archive$\|^-Wl,-no-whole-archive$')
  (cd "$EXEC" && $CXX $SAN -fsanitize=fuzzer -o "$OUT/${t}_fuzzer" "${objs[@]}" "${rest[@]}" 2>&1 | { grep -v "Cannot export local symbol" || true; })
  echo "built fuzz/out/${t}_fuzzer"
done
