#!/usr/bin/env bash
# Session 31 early call (main at e30e6a9): (1) the test-side refactors of session 30 that had not
# run on a GPU (build_index_gpu_test's Saap tests, row_assembly_gpu_test); (2) sampled_lines on
# 128-row blocks at 32K / 128K by stage with pass 3's kv-head order as the default; (3) Saap's
# build by stage, the slab-by-slab weight layout (SPATTN_SAAP_CLS_PACKED=1) against the default,
# one process per cell, alternating (assets from --calibrate at calibrate_len 3072, 3 steps).
# Device command: bash .gpu-all/early.sh (carry .gpu-all); outputs tarred under $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/spattn_gpu && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
cp builder_stages.py $W/
cd $W
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test; mkdir -p $TEST_TMPDIR
R=$W/raw && mkdir -p $R
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/summary.txt"
timeout 60 bin/build_index_gpu_test --gtest_filter='*Saap*:*/saap' > $R/test_bi_saap.log 2>&1
note "build_index_gpu_test Saap rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_bi_saap.log | tr '\n' ' ')"
timeout 60 bin/row_assembly_gpu_test > $R/test_row_asm.log 2>&1
note "row_assembly_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/test_row_asm.log | tr '\n' ' ')"
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
for len in 32768 131072; do
  rep=3; [ $len -gt 65536 ] && rep=2
  SPATTN_GPU_BUILDER_PROFILE=1 timeout 60 bin/spattn-bench $COMMON --recall_rows=64 --seq_len=$len \
    --warmup=1 --repeat=$rep --block_m=128 --methods=sampled_lines >> $R/sl_$len.jsonl 2>> $R/sl_$len.err
  note "sampled_lines bm128 $len rc=$?"
done
for cell in 32768:0 32768:1 131072:0 131072:1 32768:0 32768:1; do
  IFS=: read -r len pk <<< "$cell"
  [ $SECONDS -lt ${CAP:-200} ] || { note "skipped saap $cell"; continue; }
  rep=8; [ $len -gt 65536 ] && rep=4
  SPATTN_SAAP_CLS_PACKED=$pk SPATTN_GPU_BUILDER_PROFILE=1 timeout 45 bin/spattn-bench $COMMON \
    --recall_rows=16 --calibrate --calibrate_len=3072 --calibrate_steps=3 --seq_len=$len \
    --warmup=2 --repeat=$rep --methods=saap >> $R/saap_p$pk.jsonl 2>> $R/saap_p$pk.err
  note "saap $len packed=$pk rc=$?"
done
python3 builder_stages.py sl32=$R/sl_32768 sl128=$R/sl_131072 2>&1 | tee -a "$OUT/summary.txt"
python3 builder_stages.py packed0=$R/saap_p0 packed1=$R/saap_p1 2>&1 | tee -a "$OUT/summary.txt"
tar -C $R -czf "$OUT/raw.tar.gz" .
cat "$OUT/summary.txt"
