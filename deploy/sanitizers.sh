#!/usr/bin/env bash
# Runs the CPU test suite under a sanitizer and prints the count of test cases as the last line
# ("N passed, M failed, K skipped", as deploy/test.sh does):
#   deploy/sanitizers.sh asan [PATTERN...]   ASan + UBSan (bazel test --config=asan)
#   deploy/sanitizers.sh tsan [PATTERN...]   ThreadSanitizer (bazel test --config=tsan); builds
#                                            Abseil with -fsanitize=thread first (deploy/tsan_absl.sh)
# Without patterns: every test of every package (C++, and the Python/shell tests, which then run
# the sanitized binaries), except those tagged no-sanitizer. Both configurations build without
# CUDA (GPU tests skip). SANITIZER_OUTPUT_BASE=DIR runs Bazel in its own output base (so an
# asan and a tsan run can go side by side). Exit status 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  asan | tsan) shift ;;
  *)
    echo "usage: deploy/sanitizers.sh asan|tsan [PATTERN...]" >&2
    exit 2
    ;;
esac
./deploy/setup.sh
if [ "$mode" = tsan ]; then ./deploy/tsan_absl.sh || exit 1; fi
startup=()
opts=()
if [ -n "${SANITIZER_OUTPUT_BASE:-}" ]; then
  startup=(--output_base="$SANITIZER_OUTPUT_BASE")
  opts=(--symlink_prefix="$SANITIZER_OUTPUT_BASE/")
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # Every top-level package; not //... so that the bazel-* links of another output base are skipped.
  for d in */; do
    d=${d%/}
    case "$d" in bazel-*) continue ;; esac
    [ -n "$(find "$d" -name BUILD -o -name BUILD.bazel | head -1)" ] && targets+=("//$d/...")
  done
fi
BEP=$(mktemp /tmp/spattn-$mode-bep.XXXXXX.json)
start=$(date +%s)
bazel "${startup[@]}" test "${opts[@]}" --config="$mode" --keep_going \
  --build_event_json_file="$BEP" "${targets[@]}"
bazel_rc=$?
echo "sanitizers: $mode, $(($(date +%s) - start)) s"
python3 deploy/count_tests.py "$BEP" \
  "$(bazel "${startup[@]}" info --config="$mode" bazel-testlogs 2>/dev/null)"
count_rc=$?
rm -f "$BEP"
if [ $bazel_rc -ne 0 ] || [ $count_rc -ne 0 ]; then exit 1; fi
exit 0
