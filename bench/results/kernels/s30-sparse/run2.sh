#!/usr/bin/env bash
# s30-sparse call 2: the sparse stream's late P V wait (PersistTraits::kLateWait; knob
# SPATTN_HOPPER_LATE_WAIT, 1 default in this build, 0 = e9c159b's block_m 128 kernel, same SASS).
# Benches first on a quiet GPU: A/B in one process (lw1 / lw0, 2 interleaved rounds) at 32K
# (block_m 128: dense index, ranges 0.03 / 0.1, columns 0.05, sampled_lines 0.95) and 128K
# (ranges 0.03 / 0.1); base (main e9c159b's binary) / new in separate processes at 32K block_m
# 64 and 128. Then the attention GPU tests: the sparse ones (+ the new SparseLateWaitMatchesPlainWait),
# under PACK_TAILS=1 (tests/gpu/run.sh's filter) and the rest, three processes at once.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s30sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
mkdir -p /tmp/spattn_t0 /tmp/spattn_t1 /tmp/spattn_t2
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95"
KS="--knob_sets=lw1:;lw0:SPATTN_HOPPER_LATE_WAIT=0"
timeout 40 bin/cuda_bench $C32 --block_ms=128 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab32 rc=$?"
timeout 40 bin/cuda_bench $C --seq_lens=131072 --iters=2 --warmup=1 --workspace_mb=2048 --range_densities=0.03,0.1 --col_densities= --sampled_lines=0 --block_ms=128 --sparse_knobs=1 --rounds=1 "$KS" --tag=ab128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab128 rc=$?"
timeout 25 bin/base/cuda_bench $C32 --block_ms=64,128 --tag=base >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "base32 rc=$?"
timeout 25 bin/cuda_bench $C32 --block_ms=64,128 --tag=new >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "new32 rc=$?"
FS='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*:*LongContexts*'
F1='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
TEST_TMPDIR=/tmp/spattn_t1 SPATTN_HOPPER_PACK_TAILS=1 timeout 100 bin/attention_cuda_test --gtest_filter="$F1" > "$O/tests_pt1.txt" 2>&1 &
P1=$!
TEST_TMPDIR=/tmp/spattn_t2 timeout 100 bin/attention_cuda_test --gtest_filter="-$FS" > "$O/tests_rest.txt" 2>&1 &
P2=$!
TEST_TMPDIR=/tmp/spattn_t0 timeout 100 bin/attention_cuda_test --gtest_filter="$FS" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$FS] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
wait $P1
note "attention_cuda_test PACK_TAILS=1 [$F1] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_pt1.txt" | tr '\n' ' ')"
wait $P2
note "attention_cuda_test [-$FS] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_rest.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/tests.txt" "$O/tests_pt1.txt" "$O/tests_rest.txt" | tee -a "$O/summary.txt"
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
kill $CLK 2>/dev/null
tar -cf "${OUT:-/tmp/out}/run2.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
