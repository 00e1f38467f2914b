#!/usr/bin/env bash
# On the GPU machine (bundle from pack.sh, carried as .device/s26-promise): issue 11 item 3, the
# promise of guarded_sl (search on sampled_lines alone at the guard's gamma, margin 0.01; guard
# adaptive sampled_lines + flex_prefill) at 64K and 128K held-out prompts, calibration 16K.
# One process per (target, length): model seed 0 at normal priority (128K: 4 threads, 64K: 2),
# the same for model seed 1 at nice 19 (it gets the cores seed 0 leaves). Every process is capped
# at CAP s; a line is flushed per (target, length), so what finishes comes back (tarred).
set -u
cd "$(dirname "$0")"
W=/tmp/s26p && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s26p; mkdir -p $R
CAP=${CAP:-170}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader > $R/gpu.txt
nproc >> $R/gpu.txt
SL="--search_candidates=sampled_lines --search_sampled_lines_margin=0.01 --guard_adaptive=sampled_lines,flex_prefill"
one() {  # seed target len threads nice
  local seed=$1 t=$2 len=$3 thr=$4 nic=$5 name=s$1_t$2_$3
  ( cd $W && nice -n $nic timeout $CAP bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
      --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
      --search_len=16384 --seed=$seed --threads=$thr --methods=promise --promise_targets=$t \
      --promise_min_len=$len --promise_max_len=$len $SL > $R/$name.jsonl 2> $R/$name.err
    echo "$name rc=$? ${SECONDS}s" >> $R/summary.txt ) &
  PIDS+=($!)
}
PIDS=()
for t in 0.90 0.95 0.98; do one 0 $t 131072 4 0; one 0 $t 65536 2 0; done
for t in 0.90 0.95 0.98; do one 1 $t 131072 4 19; one 1 $t 65536 2 19; done
( while sleep 20; do echo "$SECONDS s: $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d' ' -f1 /proc/loadavg) mem $(free -g | awk '/Mem/{print $3}')G" >> $R/monitor.txt; done ) >/dev/null 2>&1 &
MON=$!
wait "${PIDS[@]}"
kill $MON 2>/dev/null
cat $R/s*.jsonl | grep -v '"summary"' > $R/all_lines.jsonl
(cd $OUT && tar -czf s26p.tar.gz s26p && rm -rf s26p)
