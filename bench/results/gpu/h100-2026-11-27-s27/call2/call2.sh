#!/usr/bin/env bash
# Session 27 call 2 (warm, after run.sh): spattn-bench with the worker path's guard given the
# layer's Saap assets (worker_path.cc Guard), on the defaults at 32K with --calibrate (the search's
# candidates auto + saap), and on the defaults without Saap assets (what a worker serves after
# `spattnctl calibrate` with the default candidates) at 32K and 128K; then run_1m.sh (SL64=0).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/spattn_call2 && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
xz -dc spattn-bench.xz > $W/bin/spattn-bench && chmod +x $W/bin/spattn-bench
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary2.txt"; }
( cd $W && export LD_LIBRARY_PATH=$PWD/lib
  COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64"
  timeout 150 bin/spattn-bench $COMMON --calibrate --calibrate_steps=30 --seq_len=32768 --warmup=2 --repeat=10 \
    --methods=searched,guarded 2>> "$OUT/call2.err" | sed -E 's/"method":"(searched|guarded)"/"method":"\1_saap"/' >> "$OUT/call2.jsonl"
  note "defaults + saap assets 32K rc=${PIPESTATUS[0]}"
  for len in 32768 131072; do
    rep=10; [ "$len" -gt 65536 ] && rep=5
    timeout 120 bin/spattn-bench $COMMON --seq_len=$len --warmup=2 --repeat=$rep \
      --methods=searched,guarded >> "$OUT/call2.jsonl" 2>> "$OUT/call2.err"
    note "defaults, no saap assets $len rc=$?"
  done )
SL64=0 GUARDED_S=150 SAMPLED_S=120 bash run_1m.sh > "$OUT/run_1m.log" 2>&1
note "run_1m rc=$?"
tail -20 "$OUT/run_1m.log"
cd "$OUT" && tar -czf /tmp/call2_all.tar.gz *.jsonl *.err *.txt *.log 2>/dev/null; rm -f "$OUT"/*; mv /tmp/call2_all.tar.gz "$OUT"/
