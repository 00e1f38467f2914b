#!/usr/bin/env bash
# Session 39 call A, after `LENS=32768 ALL_LINES=0 bash .gpu-all/run.sh` (same bundle, unpacked in
# /tmp/spattn_gpu): s38-sl2's paired offset scans (SPATTN_SL_PAIR_SCAN=1) against main's two
# launches (=0), one binary, one process per cell, alternating: sampled_lines block_m 128 at 32K,
# 3 + 3 unprofiled, 1 + 1 with the stage profile. Logs to $OUT/extraA.tar.gz.
set -u
cd /tmp/spattn_gpu
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
X=$OUT/extraA && mkdir -p "$X"
note() { echo "$* (${SECONDS}s)" | tee -a "$X/summary.txt"; }
bench() {  # variant pair_scan [VAR=VAL...]
  [ "$SECONDS" -gt "${EXTRA_STOP_AFTER:-120}" ] && { note "skipped $1"; return; }
  local v=$1 p=$2; shift 2
  env SPATTN_SL_PAIR_SCAN=$p "$@" timeout 45 bin/spattn-bench --device=cuda --workload=llm_mix \
    --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 \
    --warmup=2 --repeat=7 --seq_len=32768 --methods=sampled_lines --block_m=128 \
    >> "$X/bench_$v.jsonl" 2>> "$X/bench_$v.err"
  note "bench $v rc=$?"
}
for r in 1 2 3; do bench pair0 0; bench pair1 1; done
bench pair0_prof 0 SPATTN_GPU_BUILDER_PROFILE=1
bench pair1_prof 1 SPATTN_GPU_BUILDER_PROFILE=1
note done
tar -czf "$OUT/extraA.tar.gz" -C "$X" . && rm -rf "$X"
