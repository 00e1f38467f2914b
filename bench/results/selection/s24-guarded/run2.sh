#!/usr/bin/env bash
# Call 2 on the GPU machine (same bundle as run.sh): guarded at 32K, one stream, 16 threads:
# C = new, search on sampled_lines alone, adaptive sampled_lines + flex_prefill; E = new (search
# weight 0.1), adaptive sampled_lines + flex_prefill; F = new, adaptive flex_prefill (main's);
# A = base (main f7ff853) defaults; then C at 128K if time is left.
set -u
cd "$(dirname "$0")"
W=/tmp/s24g && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s24g2; mkdir -p $R
CAP=${CAP:-75}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $R/gpu.txt
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
 --group_by=all --recall_rows=64 --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3"
run() {  # name est_s binary len extra...
  local name=$1 est=$2 bin=$3 len=$4; shift 4
  local left=$((CAP - 2 - SECONDS))
  if [ $left -lt $est ]; then echo "$name skipped (${left}s left) ${SECONDS}s" >> $R/summary.txt; return; fi
  (cd $W && timeout $left bin/spattn-bench.$bin $COMMON --threads=16 --seq_len=$len "$@" \
     > $R/$name.jsonl 2> $R/$name.err)
  echo "$name rc=$? ${SECONDS}s" >> $R/summary.txt
}
run C32 8 new 32768 --methods=dense,guarded --search_candidates=sampled_lines --guard_adaptive=sampled_lines,flex_prefill
run E32 10 new 32768 --methods=guarded --guard_adaptive=sampled_lines,flex_prefill
run F32 10 new 32768 --methods=guarded --guard_adaptive=flex_prefill
run A32 10 base 32768 --methods=guarded
run C128 22 new 131072 --methods=dense,guarded --search_candidates=sampled_lines --guard_adaptive=sampled_lines,flex_prefill
(cd $OUT && tar -czf s24g2.tar.gz s24g2 && rm -rf s24g2)
