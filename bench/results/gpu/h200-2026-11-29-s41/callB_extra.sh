#!/usr/bin/env bash
# Session 41 call B, after `TESTS=0 LENS=131072 ALL_LINES=0 bash .gpu-all/run.sh` (same bundle,
# unpacked in /tmp/spattn_gpu): s41-sparse's cheap first try at 128K, the sparse schedule's L2
# section budget (SPATTN_HOPPER_L2_MB, tuned at block_m 128; default 32) at block_m 64 for the
# three range methods: 32 / 16 / 64 / 0 (plain order), one process per cell, then 32 again.
# Logs to $OUT/extraB.tar.gz.
set -u
cd /tmp/spattn_gpu
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
X=$OUT/extraB && mkdir -p "$X"
note() { echo "$* (${SECONDS}s)" | tee -a "$X/summary.txt"; }
bench() {  # variant l2_mb
  [ "$SECONDS" -gt "${EXTRA_STOP_AFTER:-80}" ] && { note "skipped $1"; return; }
  env SPATTN_HOPPER_L2_MB=$2 timeout 40 bin/spattn-bench --device=cuda --workload=llm_mix \
    --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=4 \
    --warmup=1 --repeat=3 --seq_len=131072 --methods=a_shape,vertical_slash,block_sparse \
    --block_m=64 >> "$X/bench_$1.jsonl" 2>> "$X/bench_$1.err"
  note "bench $1 rc=$?"
}
SECONDS=0
bench l2_32 32; bench l2_16 16; bench l2_64 64; bench l2_0 0; bench l2_32b 32
note done
tar -czf "$OUT/extraB.tar.gz" -C "$X" . && rm -rf "$X"
