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
python3 deploy/count_tests.py "$BEP" "$(bazel info $CONFIG bazel-testlogs 2>/dev/null)"
count_rc=$?
rm -f "$BEP"
if [ $bazel_rc -ne 0 ] || [ $count_rc -ne 0 ]; then exit 1; fi
exit 0
