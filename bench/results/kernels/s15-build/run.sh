#!/usr/bin/env bash
# s15-build device run: build_index_gpu_test (new merge), then spattn-bench flex_prefill +
# vertical_slash at 32K and 128K with the new and the old (main 37c71c4) merge, same machine.
# Layout: bundle.tar.xz with bin/{build_index_gpu_test,spattn-bench,spattn-bench-old} + lib/.
set -u
cd "$(dirname "$0")"
W=/tmp/s15b && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W && cd $W
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout ${TEST_TIMEOUT:-60} bin/build_index_gpu_test --gtest_filter="${TEST_FILTER:-*}" > $OUT/test_build_index_gpu.log 2>&1
echo "build_index_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_build_index_gpu.log | tr '\n' ' ')" | tee -a $OUT/summary.txt
B="--workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 --warmup=1 --repeat=3 --device=cuda --methods=flex_prefill,vertical_slash"
for len in ${LENS:-32768 131072}; do
  for bin in spattn-bench-old spattn-bench; do
    SPATTN_GPU_BUILDER_PROFILE=1 timeout ${SB_TIMEOUT:-40} bin/$bin $B --seq_len=$len > $OUT/$bin.$len.jsonl 2> $OUT/$bin.$len.err
    echo "$bin $len rc=$?" | tee -a $OUT/summary.txt
    python3 -c "
import json,sys
for l in open('$OUT/$bin.$len.jsonl'):
  d=json.loads(l); print('  %s build %.2f kernel %.2f total %.2f share %.1f%%'%(d['method'],d['index_build_ms'],d['kernel_ms'],d['total_ms'],100*d['index_build_ms']/d['total_ms']))
" | tee -a $OUT/summary.txt
    for m in vertical_slash flex_prefill; do grep "gpu builder $m:" $OUT/$bin.$len.err | tail -1; done | tee -a $OUT/summary.txt
  done
done
grep -hE "^\[  FAILED|Failure" $OUT/test_build_index_gpu.log | head -20
