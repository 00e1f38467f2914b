#!/usr/bin/env bash
# The spattn-index binary's command line (client/flags.h, like every spattn binary): --version,
# --help, usage errors with exit status 2 before anything starts, and a start on a free port with
# --port_file that SIGTERM stops with status 0.
set -euo pipefail
INDEX="$1"
[ "$("$INDEX" --version)" = "spattn-index 0.1.0" ] || { echo "--version"; exit 1; }
# Help goes to a file first: `grep -q` quitting early would SIGPIPE the binary under pipefail.
"$INDEX" --help >"$TEST_TMPDIR/help" 2>&1
grep -q -- "--data_dir: RocksDB directory" "$TEST_TMPDIR/help"
grep -q -- "--version: Print the service version" "$TEST_TMPDIR/help"
# Abseil's --helpfull, which deploy tests use to list the flags, prints the same list.
"$INDEX" --helpfull >"$TEST_TMPDIR/helpfull" 2>&1
cmp -s "$TEST_TMPDIR/help" "$TEST_TMPDIR/helpfull" || { echo "--helpfull differs from --help"; exit 1; }
expect_usage_error() {  # expected message, then the arguments
  local want="$1"
  shift
  set +e
  "$INDEX" "$@" >"$TEST_TMPDIR/out" 2>"$TEST_TMPDIR/err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "status $rc for $*"; cat "$TEST_TMPDIR/err"; exit 1; }
  grep -qF -- "$want" "$TEST_TMPDIR/err" || { echo "no '$want' for $*"; cat "$TEST_TMPDIR/err"; exit 1; }
}
expect_usage_error "unknown flag --no_such_flag" --data_dir="$TEST_TMPDIR/db" --no_such_flag=1
expect_usage_error "--data_dir is required"
expect_usage_error "--keep_versions: not an integer: 'many'" --data_dir="$TEST_TMPDIR/db" --keep_versions=many
expect_usage_error "--tls_require_client_cert: expected true or false" --data_dir="$TEST_TMPDIR/db" --tls_require_client_cert=maybe
expect_usage_error "unexpected argument 'stray'" --data_dir="$TEST_TMPDIR/db" stray
[ ! -e "$TEST_TMPDIR/db" ] || { echo "a usage error created the database"; exit 1; }
port_file="$TEST_TMPDIR/port"
"$INDEX" --data_dir "$TEST_TMPDIR/db" --listen=127.0.0.1:0 --port_file="$port_file" \
  --keep_versions=3 --tls_require_client_cert=false 2>"$TEST_TMPDIR/server.err" &
pid=$!
for _ in $(seq 1 100); do
  [ -s "$port_file" ] && break
  sleep 0.1
done
[ -s "$port_file" ] || { echo "no port file"; cat "$TEST_TMPDIR/server.err"; exit 1; }
grep -q "keep_versions 3" "$TEST_TMPDIR/server.err"
kill -TERM "$pid"
wait "$pid"
grep -q "\[spattn-index\] stopped" "$TEST_TMPDIR/server.err"
echo PASS
