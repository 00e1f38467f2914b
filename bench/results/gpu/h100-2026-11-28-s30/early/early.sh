#!/usr/bin/env bash
# Session 30 early call: the sampled_lines knob-pair tests after e9c159b's refactor, then call 2 of
# session 29 without its guarded margin-0 and A/B cells (cuDNN's 1M chunk, sampled_lines bm128 1M by stage).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/spattn_gpu
rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
( cd $W && LD_LIBRARY_PATH=$PWD/lib timeout 120 bin/build_index_gpu_test --gtest_filter='*SampledLines*' > "$OUT/test_bi_sl.log" 2>&1; echo "build_index_gpu_test SampledLines rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_bi_sl.log" | tr '\n' ' ')" | tee "$OUT/summary_tests.txt" )
CUT1M=0 CUT=0 bash call2.sh
