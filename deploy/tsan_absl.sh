#!/usr/bin/env bash
# Builds Debian's own Abseil (the source of the installed libabsl-dev, same version, patches and
# inline namespace) with -fsanitize=thread into /opt/spattn-tsan-absl, for
# `bazel test --config=tsan`: its binaries carry that lib directory as DT_RPATH (.bazelrc), so
# they and Debian's libgrpc load these instrumented libraries instead of the system ones. Then TSan sees every absl::Mutex (ours and gRPC core's, whose grpc_core::Mutex is an
# absl::Mutex) and Abseil's own code. Needs a deb-src entry for Debian bookworm (added if
# missing) and network access to the Debian archive; about 3 minutes on 2 cores. Idempotent.
set -euo pipefail
PREFIX=/opt/spattn-tsan-absl  # .bazelrc (--config=tsan rpath) and bazel/sanitizer_env.sh name it
if [ -e "$PREFIX/lib/libabsl_synchronization.so.20220623" ]; then
  echo "tsan_absl: $PREFIX already built"
  exit 0
fi
version=$(dpkg-query -W -f='${source:Version}' libabsl-dev)
work=$(mktemp -d /tmp/spattn-tsan-absl.XXXXXX)
trap 'rm -rf "$work"' EXIT
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! apt-cache showsrc abseil 2>/dev/null | grep -q "^Version: $version"; then
  echo "Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $SUDO tee /etc/apt/sources.list.d/spattn-deb-src.sources >/dev/null
  $SUDO apt-get update -q >/dev/null
fi
for p in cmake ninja-build dpkg-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$p" >/dev/null
done
cd "$work"
apt-get source -q "abseil=$version" >/dev/null 2>&1 || apt-get source "abseil=$version"
src=$(find . -maxdepth 1 -type d -name 'abseil-*' | head -1)
grep -q 'ABSL_OPTION_INLINE_NAMESPACE_NAME debian' "$src/absl/base/options.h" || {
  echo "tsan_absl: $src does not use Debian's inline namespace; refusing to mix ABIs" >&2
  exit 1
}
cmake -G Ninja -S "$src" -B build -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
  -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=None \
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread -O1 -g1 -fno-omit-frame-pointer" \
  "-DCMAKE_C_FLAGS=-fsanitize=thread -O1 -g1" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" >cmake.log
ninja -C build -j"$(nproc)" >build.log || { tail -30 build.log; exit 1; }
$SUDO ninja -C build install >/dev/null
echo "tsan_absl: Abseil $version with -fsanitize=thread in $PREFIX"
