#!/usr/bin/env bash
# s19-sldensity run2 (on a warm GPU machine, bundle of pack.sh, the same binaries as run.sh's):
# only the twin tests build_index_gpu_test *sampled_lines* (run.sh's log of them did not come
# back: the run tool returns at most 8 files and its output tail began after the test line).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s19sld2 && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK" bin/build_index_gpu_test lib
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test2
mkdir -p "$TEST_TMPDIR"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' 2>&1 | grep -E "^\[ *(RUN|OK|PASSED|FAILED|SKIPPED) |Failure|configs|sampled_lines" | head -60
echo "rc=${PIPESTATUS[0]}"
