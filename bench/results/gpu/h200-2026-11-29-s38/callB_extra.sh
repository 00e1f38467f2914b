#!/usr/bin/env bash
# Session 38 call B, after `TESTS=0 LENS=131072 ALL_LINES=0 bash .gpu-all/run.sh` (same bundle,
# unpacked in /tmp/spattn_gpu): the whole attention test with the fixed timeline test (the pair
# step is on by default now), the sparse tests with the 64-key step (SPATTN_HOPPER_PAIR_STEP=0),
# then the pair step's 3 V slots (=2) against its 2 V slots (=1), one binary, one process per
# cell, alternating: 32K two rounds, 128K one round. Logs to $OUT/extra/.
set -u
cd /tmp/spattn_gpu
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
X=$OUT/extra && mkdir -p "$X"
note() { echo "$* (${SECONDS}s)" | tee -a "$X/summary.txt"; }
timeout 150 bin/attention_cuda_test > "$X/attention_default.log" 2>&1
note "attention_cuda_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$X/attention_default.log" | tr '\n' ' ')"
SPATTN_HOPPER_PAIR_STEP=0 timeout 90 bin/attention_cuda_test \
  --gtest_filter='*Sparse*:*Columns*:*AShape*:-*SparsePairStep*' > "$X/attention_pair0.log" 2>&1
note "attention_cuda_test PAIR_STEP=0 rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$X/attention_pair0.log" | tr '\n' ' ')"
bench() {  # variant len pair method
  [ "$SECONDS" -gt "${EXTRA_STOP_AFTER:-300}" ] && { note "skipped $1 $2 $4"; return; }
  local rr=16 w=2 rep=7; [ "$2" -gt 65536 ] && { rr=4; w=1; rep=3; }
  SPATTN_HOPPER_PAIR_STEP=$3 timeout 45 bin/spattn-bench --device=cuda --workload=llm_mix \
    --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr \
    --warmup=$w --repeat=$rep --seq_len=$2 --methods=$4 >> "$X/bench_$1.jsonl" 2>> "$X/bench_$1.err"
  note "bench $1 $2 $4 rc=$?"
}
for r in 1 2; do
  for m in a_shape block_sparse vertical_slash; do
    if [ $r = 1 ]; then bench pair2v 32768 1 $m; bench pair3v 32768 2 $m
    else bench pair3v 32768 2 $m; bench pair2v 32768 1 $m; fi
  done
done
for m in block_sparse a_shape vertical_slash; do
  bench pair2v 131072 1 $m; bench pair3v 131072 2 $m
done
grep -h "PAIR_STEP=2" "$X"/bench_pair3v.err | sort | uniq -c | tee -a "$X/summary.txt"
note done
# The device tool brings back few files: the extra logs as one tarball.
tar -czf "$OUT/extra.tar.gz" -C "$X" . && rm -rf "$X"
