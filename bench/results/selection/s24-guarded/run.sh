#!/usr/bin/env bash
# On the GPU machine (bundle from pack.sh, carried as .device/s24-guarded): two streams at once.
# T (10 threads): guarded timings, base (main f7ff853) vs new (this branch), 32K then 128K;
# P (6 threads, nice 19): the new binary's promise at 0.95 / 0.90 / 0.98 on 4K-64K held-out
# prompts (recall and density only). Every process is capped so the outputs come back tarred.
set -u
cd "$(dirname "$0")"
W=/tmp/s24g && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s24g; mkdir -p $R
CAP=${CAP:-100}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $R/gpu.txt
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
 --group_by=all --recall_rows=64 --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3"
(
  cd $W
  nice -n 19 timeout $((CAP - 2)) bin/spattn-bench.new --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
    --search_len=16384 --threads=6 --methods=promise --promise_targets=0.95,0.90,0.98 \
    --promise_max_len=65536 > $R/promise_new.jsonl 2> $R/promise_new.err
  echo "promise rc=$? ${SECONDS}s" >> $R/summary.txt
) &
run() {  # name est_s binary len extra...
  local name=$1 est=$2 bin=$3 len=$4; shift 4
  local left=$((CAP - 2 - SECONDS))
  if [ $left -lt $est ]; then echo "$name skipped (${left}s left) ${SECONDS}s" >> $R/summary.txt; return; fi
  (cd $W && timeout $left bin/spattn-bench.$bin $COMMON --threads=10 --seq_len=$len "$@" \
     > $R/$name.jsonl 2> $R/$name.err)
  echo "$name rc=$? ${SECONDS}s" >> $R/summary.txt
}
run A32 10 base 32768 --methods=dense,guarded
run N32 10 new 32768 --methods=guarded
run D32 8 base 32768 --methods=guarded --search_candidates=a_shape,sampled_lines --guard_adaptive=sampled_lines
run A128 20 base 131072 --methods=dense,guarded
run N128 20 new 131072 --methods=guarded
run B32 12 base 32768 --methods=guarded --guard_adaptive=sampled_lines
run D128 20 base 131072 --methods=guarded --search_candidates=a_shape,sampled_lines --guard_adaptive=sampled_lines
wait
(cd $OUT && tar -czf s24g.tar.gz s24g && rm -rf s24g)
