#!/usr/bin/env bash
# Runs Python unittest files with /usr/bin/python3 (Debian's python3-grpcio, -protobuf, -numpy)
# after generating the spattn stubs from proto/ into a temporary copy of the package.
#   client/python/tests/run_python_tests.sh [--worker=BIN] [--index=BIN] [--ctl=BIN] TEST.py...   (from the repo root or
#   as a Bazel sh_test; JUnit XML goes to $XML_OUTPUT_FILE when set)
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-spattn}"  # Bazel runfiles
else
  root="$(cd "$(dirname "$0")/../../.." && pwd)"
fi
PY="${SPATTN_PYTHON:-/usr/bin/python3}"
tmp="${TEST_TMPDIR:-$(mktemp -d /tmp/spattn-py.XXXXXX)}"
tests=()
for a in "$@"; do
  case "$a" in
    --worker=*) export SPATTN_WORKER_BIN="$(cd "$(dirname "${a#--worker=}")" && pwd)/$(basename "${a#--worker=}")" ;;
    --index=*) export SPATTN_INDEX_BIN="$(cd "$(dirname "${a#--index=}")" && pwd)/$(basename "${a#--index=}")" ;;
    --ctl=*) export SPATTN_CTL_BIN="$(cd "$(dirname "${a#--ctl=}")" && pwd)/$(basename "${a#--ctl=}")" ;;
    *) tests+=("$root/$a") ;;
  esac
done
"$PY" -c "import grpc, google.protobuf, numpy" 2>/dev/null || {
  echo "$PY lacks grpcio/protobuf/numpy: apt-get install python3-grpcio python3-protobuf python3-numpy"
  exit 1
}
pkg="$tmp/pypkg"
rm -rf "$pkg"
mkdir -p "$pkg"
cp -rL "$root/client/python/spattn" "$pkg/"
[ -d "$root/adapters" ] && for d in "$root"/adapters/*/; do
  for p in "$d"*/__init__.py; do [ -f "$p" ] && cp -rL "$(dirname "$p")" "$pkg/"; done
done
chmod -R u+w "$pkg"
rm -f "$pkg"/spattn/v1/*_pb2*.py
"$root/client/python/gen_stubs.sh" "$root/proto" "$pkg"
export PYTHONPATH="$pkg" PYTHONDONTWRITEBYTECODE=1
exec "$PY" "$root/client/python/tests/junit_runner.py" "${tests[@]}"
