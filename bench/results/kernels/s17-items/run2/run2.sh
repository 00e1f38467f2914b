#!/usr/bin/env bash
# s17-items run 2: GPU tests (default: the cross-item stream, SPATTN_HOPPER_ITEMS=2; the two
# older paths on the sparse tests), A/B of SPATTN_HOPPER_ITEMS 2 / 1 / 0 in one cuda_bench
# process per length (interleaved, 2 rounds), SDPA cuDNN around each, then spattn-bench +
# MInference's vertical-slash on the same tensors.
set -u
cd "$(dirname "$0")"
export OUT=${OUT:-/tmp/out}
export SPATTN_IPC_PRODUCER=bin/cuda_ipc_producer
export TESTS="attention_cuda_test cuda_engine_test build_index_gpu_test cuda_backend_test"
S32="--seq_lens=32768 --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --iters=5 --warmup=1"
S128="--seq_lens=131072 --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --iters=3 --warmup=1"
KS="--knob_sets=x:;desc:SPATTN_HOPPER_ITEMS=1;old:SPATTN_HOPPER_ITEMS=0 --rounds=2 --sparse_knobs=1"
export AB="$S32|--variants=5 --sparse_variants=5 --block_ms=128,64 --range_densities=0.03,0.1,0.3,0.5 --col_densities=0.05,0.3 $KS --tag=r2@$S128|--variants=5 --sparse_variants=5 --block_ms=128,64 --range_densities=0.03,0.1,0.3 --col_densities=0.05 $KS --tag=r2"
export REFS="32768,131072" REF_METHODS="dense,vertical_slash,anchor,block_sparse" REF_ARGS="--methods vertical_slash"
bash run_ab.sh
cd /tmp/spattn_ab && export LD_LIBRARY_PATH=$PWD/lib
for m in 1 0; do
  SPATTN_HOPPER_ITEMS=$m timeout 150 bin/attention_cuda_test \
    --gtest_filter='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*' > "$OUT/tests_items$m.txt" 2>&1
  echo "attention_cuda_test [SPATTN_HOPPER_ITEMS=$m] rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests_items$m.txt" | tr '\n' ' ')"
done
# (at most 8 files come back) gpu, summary and test logs in one
cd "$OUT" && cat gpu.txt summary.txt tests.log tests_items1.txt tests_items0.txt > tests.txt 2>/dev/null
rm -f gpu.txt summary.txt tests.log tests_items1.txt tests_items0.txt
