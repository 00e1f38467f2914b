#!/usr/bin/env bash
# Session 40 call A, after `LENS=32768 ALL_LINES=0 bash .gpu-all/run.sh` (same bundle, unpacked in
# /tmp/spattn_gpu): s40-flex's unrolled pass-3 chains (SPATTN_EST_CHAIN=1, the new default)
# against main's loops (=0) in sampled_lines' pass 3, one binary, one process per cell,
# alternating: sampled_lines block_m 128 at 32K, 3 + 3 unprofiled, 1 + 1 with the stage profile.
# Logs to $OUT/extraA.tar.gz.
set -u
cd /tmp/spattn_gpu
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
X=$OUT/extraA && mkdir -p "$X"
note() { echo "$* (${SECONDS}s)" | tee -a "$X/summary.txt"; }
bench() {  # variant est_chain [VAR=VAL...]
  [ "$SECONDS" -gt "${EXTRA_STOP_AFTER:-120}" ] && { note "skipped $1"; return; }
  local v=$1 p=$2; shift 2
  env SPATTN_EST_CHAIN=$p "$@" timeout 45 bin/spattn-bench --device=cuda --workload=llm_mix \
    --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16 \
    --warmup=2 --repeat=7 --seq_len=32768 --methods=sampled_lines --block_m=128 \
    >> "$X/bench_$v.jsonl" 2>> "$X/bench_$v.err"
  note "bench $v rc=$?"
}
for r in 1 2 3; do bench chain0 0; bench chain1 1; done
bench chain0_prof 0 SPATTN_GPU_BUILDER_PROFILE=1
bench chain1_prof 1 SPATTN_GPU_BUILDER_PROFILE=1
note done
tar -czf "$OUT/extraA.tar.gz" -C "$X" . && rm -rf "$X"
