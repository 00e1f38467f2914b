#!/usr/bin/env bash
# NOT RUN (device share spent by call 1). For the lead, with THIS branch's spattn-bench packed by
# pack.sh (its promise measures the served recall on the GPU-built indexes; main's built them on
# the host, which took minutes per target at 64K-128K: call 1). guarded_sl's promise at 64K and
# 128K (targets 0.90 / 0.95 / 0.98, calibration 16K), model seeds 0 and 1 as two processes of 8
# threads, each with a 16 GiB CUDA workspace (0.98 at 128K did not fit the default 8 GiB in call
# 1). Every process capped at CAP s; one JSON line flushed per (target, length); outputs tarred.
set -u
cd "$(dirname "$0")"
W=/tmp/s26p2 && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/s26p2; mkdir -p $R
CAP=${CAP:-200}
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader > $R/gpu.txt
SL="--search_candidates=sampled_lines --search_sampled_lines_margin=0.01 --guard_adaptive=sampled_lines,flex_prefill"
PIDS=()
for seed in 0 1; do
  ( cd $W && timeout $CAP bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
      --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
      --search_len=16384 --seed=$seed --threads=8 --methods=promise \
      --promise_targets=0.90,0.95,0.98 --promise_min_len=65536 --promise_max_len=131072 \
      --gpu_workspace_bytes=17179869184 $SL > $R/s$seed.jsonl 2> $R/s$seed.err
    echo "seed $seed rc=$? ${SECONDS}s" >> $R/summary.txt ) &
  PIDS+=($!)
done
wait "${PIDS[@]}"
(cd $OUT && tar -czf s26p2.tar.gz s26p2 && rm -rf s26p2)
