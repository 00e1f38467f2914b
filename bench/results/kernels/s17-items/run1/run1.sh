#!/usr/bin/env bash
# s17-items run 1 (as run; carried in .gpu-s17-items with the bundle, run_ab.sh, the .py files
# and ref/: MInference fb56c91 pit_sparse_flash_attention_v2.py, FlexPrefill a24b27b
# flex_prefill_attention.py, not committed). The kernel then had SPATTN_HOPPER_ITEM_DESC=0/1
# (now SPATTN_HOPPER_ITEMS=0/1).
set -u
cd "$(dirname "$0")"
export OUT=${OUT:-/tmp/out}
export TESTS="attention_cuda_test cuda_engine_test build_index_gpu_test cuda_backend_test"
S32="--seq_lens=32768 --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --iters=5 --warmup=1"
S128="--seq_lens=131072 --kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --iters=3 --warmup=1"
KS="--knob_sets=desc:;old:SPATTN_HOPPER_ITEM_DESC=0 --rounds=2 --sparse_knobs=1"
export AB="$S32|--variants=5 --sparse_variants=5 --block_ms=128,64 --range_densities=0.05,0.1,0.3 --col_densities=0.05,0.3 $KS --tag=r1@$S128|--variants=5 --sparse_variants=5 --block_ms=128,64 --range_densities=0.05,0.1,0.3 --col_densities=0.05 $KS --tag=r1"
export REFS="32768,131072" REF_METHODS="dense,vertical_slash,anchor" REF_ARGS="--methods vertical_slash"
bash run_ab.sh
cd /tmp/spattn_ab && LD_LIBRARY_PATH=$PWD/lib SPATTN_HOPPER_ITEM_DESC=0 timeout 150 bin/attention_cuda_test \
  --gtest_filter='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*' > "$OUT/tests_old_path.log" 2>&1
echo "old-path attention_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests_old_path.log" | tr '\n' ' ')"
