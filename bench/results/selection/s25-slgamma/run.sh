#!/usr/bin/env bash
# On the GPU machine (bundle from pack.sh, carried as .device/s25-slgamma). First the GPU twin
# tests (per-head gammas, sampled_lines' CPU twin); then two streams at once:
# T (10 threads): guarded timings, base (main 2d1f736) vs new (this branch), variants
#   C = search on sampled_lines alone, adaptive sampled_lines + flex_prefill; A = defaults;
#   32K then 128K (order: the comparisons that matter first).
# P (6 threads, nice 19): the new binary's promise for variant C at 0.95 / 0.90 / 0.98 on
#   4K-32K held-out prompts (recall and density only).
# Every process is capped so that the outputs come back tarred.
set -u
cd "$(dirname "$0")"
W=/tmp/s25slg && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s25slg; mkdir -p $R
CAP=${CAP:-200}
PCAP=${PCAP:-185}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $R/gpu.txt
(cd $W && timeout 45 bin/build_index_gpu_test \
   --gtest_filter='*PerHeadGammas*:*MatchesCpuTwin/8' > $R/test_gpu.txt 2>&1)
echo "test rc=$? ${SECONDS}s" >> $R/summary.txt
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
 --group_by=all --recall_rows=64 --search_len=16384 --search_target_recall=0.95 --warmup=1 --repeat=3"
C_FLAGS="--search_candidates=sampled_lines --guard_adaptive=sampled_lines,flex_prefill"
(
  cd $W
  nice -n 19 timeout $PCAP bin/spattn-bench.new --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
    --search_len=16384 --threads=6 --methods=promise --promise_targets=0.95,0.90,0.98 \
    --promise_max_len=32768 $C_FLAGS > $R/promise_C_new.jsonl 2> $R/promise_C_new.err
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
run C32new 10 new 32768 --methods=dense,guarded $C_FLAGS
run A32base 14 base 32768 --methods=guarded
run C32base 10 base 32768 --methods=guarded $C_FLAGS
run A32new 14 new 32768 --methods=guarded
run C128new 30 new 131072 --methods=dense,guarded $C_FLAGS
run A128base 36 base 131072 --methods=guarded
run A128new 36 new 131072 --methods=guarded
run C128base 30 base 131072 --methods=guarded $C_FLAGS
wait
(cd $OUT && tar -czf s25slg.tar.gz s25slg && rm -rf s25slg)
