#!/usr/bin/env bash
# Session 30, after run.sh in the same call (its /tmp/spattn_gpu bundle): s30-slkv's kv-major
# launch order for sampled_lines' pass 3 alone (SPATTN_SL_ORDER_BAND=0,0,1000000) against the
# default item order, one process per cell, alternating, while the call has time (S0 = the call's
# start in epoch seconds; cells stop at CUT seconds). In session 30's call the stage table
# failed (builder_stages.py was looked up relative to the new directory; fixed here) and was made
# here from the returned files: extra/stages.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; X=/tmp/extra && rm -rf $X && mkdir -p $X
W=/tmp/spattn_gpu; cd $W && export LD_LIBRARY_PATH=$PWD/lib
cp "$HERE/builder_stages.py" $W/
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=1 --repeat=3 --block_m=128 --methods=sampled_lines"
cell() {  # name len env
  local el=$(( $(date +%s) - ${S0:-$(date +%s)} ))
  [ "$el" -gt "${CUT:-555}" ] && { echo "$1 skipped at ${el}s" | tee -a $X/summary.txt; return; }
  env SPATTN_GPU_BUILDER_PROFILE=1 $3 timeout 40 bin/spattn-bench $C --seq_len=$2 > $X/$1.jsonl 2> $X/$1.err
  echo "$1 rc=$? at ${el}s" | tee -a $X/summary.txt
}
cell item_131072_a 131072 SPATTN_SL_ORDER_BAND=0
cell kv3_131072_a 131072 SPATTN_SL_ORDER_BAND=0,0,1000000
cell item_32768_a 32768 SPATTN_SL_ORDER_BAND=0
cell kv3_32768_a 32768 SPATTN_SL_ORDER_BAND=0,0,1000000
cell item_131072_b 131072 SPATTN_SL_ORDER_BAND=0
cell kv3_131072_b 131072 SPATTN_SL_ORDER_BAND=0,0,1000000
args=(); for f in $X/*.err; do n=$(basename $f .err); args+=("$n=$X/$n"); done
python3 builder_stages.py "${args[@]}" 2>&1 | tee -a $X/summary.txt
tar -czf "$OUT/extra.tar.gz" -C $X .
