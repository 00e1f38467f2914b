#!/usr/bin/env bash
# Runs every test (bazel test //...) and prints the count of test cases as the last line:
#   N passed, M failed, K skipped
# A test target that fails to build counts as one failed case. Exit status 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
./deploy/setup.sh
# h6 (deploy/k8s, deploy/monitoring tests): kubectl, promtool, python3-yaml when missing.
./deploy/tools.sh
CONFIG=$(cat .bazel-config)
BEP=$(mktemp /tmp/spattn-bep.XXXXXX.json)
bazel test $CONFIG --keep_going --build_event_json_file="$BEP" //... "$@"
bazel_rc=$?
# Issue 13: the server, index and every kernels/ package's tests again under ASan + UBSan
# (CPU code, --config=asan; SPATTN_ASAN=0 skips), and each libFuzzer target for SPATTN_FUZZ_SECONDS
# (default 20; 0 skips). Their cases are counted with the others. The whole suite under ASan or
# TSan: deploy/sanitizers.sh asan|tsan (README, Sanitizers; not in CI for its time on 2 cores).
ASAN_BEP=$(mktemp /tmp/spattn-asan-bep.XXXXXX.json)
EXTRA=$(mktemp /tmp/spattn-extra.XXXXXX.txt)
count_args=()
if [ "${SPATTN_ASAN:-1}" != 0 ]; then
  bazel test --config=asan --keep_going --build_event_json_file="$ASAN_BEP" \
    //server:all //index:all //kernels/...
  [ $? -eq 0 ] || bazel_rc=1
  count_args+=(--bep "$ASAN_BEP")
fi
if [ "${SPATTN_FUZZ_SECONDS:-20}" != 0 ]; then
  if ./fuzz/build.sh >/tmp/spattn-fuzz-build.log 2>&1; then
    FUZZ_RESULTS="$EXTRA" ./fuzz/run.sh "${SPATTN_FUZZ_SECONDS:-20}" || bazel_rc=1
  else
    tail -20 /tmp/spattn-fuzz-build.log
    echo "FAIL fuzz:build" >>"$EXTRA"
  fi
  count_args+=(--extra "$EXTRA")
fi
python3 deploy/count_tests.py "$BEP" "$(bazel info $CONFIG bazel-testlogs 2>/dev/null)" \
  "${count_args[@]}"
count_rc=$?
rm -f "$BEP" "$ASAN_BEP" "$EXTRA"
if [ $bazel_rc -ne 0 ] || [ $count_rc -ne 0 ]; then exit 1; fi
exit 0
