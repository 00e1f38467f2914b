#!/usr/bin/env bash
# s24-sparse run 2 (on the GPU machine): the final build (early lookup at the item's last K):
# the sparse attention GPU tests, a PACK_TAILS=1 subset; the early / late A/B in one process
# (knob sets early = default, late = SPATTN_HOPPER_EARLY_ITEM=0, three interleaved rounds, 32K);
# base (main 9a51e16) / new in separate processes at 32K; a timeline of both sets at block_m 128.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s24sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cp sparse_timeline.py "$WORK/"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*'
timeout 50 bin/attention_cuda_test --gtest_filter="$F" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$F] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/tests.txt" | tee -a "$O/summary.txt"
F1='*SparseEarlyItem*:*RandomRanges*'
SPATTN_HOPPER_PACK_TAILS=1 timeout 30 bin/attention_cuda_test --gtest_filter="$F1" > "$O/tests_pt1.txt" 2>&1
note "attention_cuda_test PACK_TAILS=1 [$F1] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_pt1.txt" | tr '\n' ' ')"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --range_densities=0.03,0.1 --col_densities=0.05 --seq_lens=32768 --iters=3 --warmup=1 --sampled_lines=0.95 --workspace_mb=4096"
timeout 40 bin/cuda_bench $C --block_ms=64,128 --sparse_knobs=1 --rounds=3 "--knob_sets=early:;late:SPATTN_HOPPER_EARLY_ITEM=0" --tag=ab >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "early/late rc=$?"
timeout 20 bin/base/cuda_bench $C --block_ms=64,128 --tag=base >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "base rc=$?"
timeout 20 bin/cuda_bench $C --block_ms=64,128 --tag=new >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "new rc=$?"
T=$O/trace.jsonl
timeout 20 bin/cuda_bench $C --block_ms=128 --sparse_knobs=1 "--knob_sets=early:SPATTN_HOPPER_TRACE=$T;late:SPATTN_HOPPER_EARLY_ITEM=0+SPATTN_HOPPER_TRACE=$T" --tag=tl >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "timeline rc=$?"
python3 sparse_timeline.py "$T" > "$O/timeline.txt" 2>> "$O/errors.log"
python3 sparse_timeline.py "$T" --json > "$O/timeline_summary.jsonl" 2>> "$O/errors.log"
kill $CLK 2>/dev/null
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
rm -f "$T"
cp "$O/timeline.txt" "${OUT:-/tmp/out}/" 2>/dev/null
cd "$WORK" && tar -cf "${OUT:-/tmp/out}/run2.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/" 2>/dev/null
