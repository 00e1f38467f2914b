#!/usr/bin/env bash
# On the GPU machine (bundle from pack.sh, carried as .device/s25-slmargin). Two streams at once:
# T (11 threads): guarded timings at 128K then 32K of
#   Cm = search on sampled_lines alone at the guard's gamma (--search_sampled_lines_margin=0.01),
#        adaptive sampled_lines + flex_prefill;
#   A  = defaults;
#   C  = as Cm without the margin (s25-slgamma's C), if time is left (32K first).
# P (5 threads, nice 19): Cm's promise at 0.95 / 0.90 / 0.98 on 64K and 128K held-out prompts
#   (recall and density only; what finishes within the cap comes back, one line per flush).
# Every process is capped so that the outputs come back tarred.
set -u
cd "$(dirname "$0")"
W=/tmp/s25slm && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s25slm; mkdir -p $R
CAP=${CAP:-90}
PCAP=${PCAP:-88}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $R/gpu.txt
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
 --group_by=all --recall_rows=64 --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3"
C_FLAGS="--search_candidates=sampled_lines --guard_adaptive=sampled_lines,flex_prefill"
M_FLAGS="$C_FLAGS --search_sampled_lines_margin=0.01"
(
  cd $W
  nice -n 19 timeout $PCAP bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
    --search_len=16384 --threads=5 --methods=promise --promise_targets=0.95,0.90,0.98 \
    --promise_min_len=65536 --promise_max_len=131072 $M_FLAGS > $R/promise_Cm.jsonl 2> $R/promise_Cm.err
  echo "promise rc=$? ${SECONDS}s" >> $R/summary.txt
) &
run() {  # name est_s len extra...
  local name=$1 est=$2 len=$3; shift 3
  local left=$((CAP - 2 - SECONDS))
  if [ $left -lt $est ]; then echo "$name skipped (${left}s left) ${SECONDS}s" >> $R/summary.txt; return; fi
  (cd $W && timeout $left bin/spattn-bench $COMMON --threads=11 --seq_len=$len "$@" \
     > $R/$name.jsonl 2> $R/$name.err)
  echo "$name rc=$? ${SECONDS}s" >> $R/summary.txt
}
run Cm128 20 131072 --methods=dense,guarded $M_FLAGS
run A128 24 131072 --methods=dense,guarded
run Cm32 8 32768 --methods=dense,guarded $M_FLAGS
run A32 10 32768 --methods=dense,guarded
run C32 8 32768 --methods=dense,guarded $C_FLAGS
run C128 20 131072 --methods=dense,guarded $C_FLAGS
wait
(cd $OUT && tar -czf s25slm.tar.gz s25slm && rm -rf s25slm)
