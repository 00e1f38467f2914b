#!/usr/bin/env bash
# s22-sparse run 2 (on the GPU machine): the attention GPU tests of the sparse kernel (masks by
# tile kind + SPATTN_HOPPER_PACK_TAILS=3), among them the new SparsePackTailsModesMatchReference,
# and the sparse cases again under PACK_TAILS=3; then cuda_bench of this build in separate
# processes, alternating PACK_TAILS 2 (default) / 1 / 3: 32K two rounds, 128K one.
# Everything goes into run2.tar.xz plus summary.txt (the run tool returns at most 8 files).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s22sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*'
timeout 60 bin/attention_cuda_test --gtest_filter="$F" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$F] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/tests.txt" | tee -a "$O/summary.txt"
F3='*Sparse*:*Columns*:*AShape*-*PackTails*'
SPATTN_HOPPER_PACK_TAILS=3 timeout 40 bin/attention_cuda_test --gtest_filter="$F3" > "$O/tests_pt3.txt" 2>&1
note "attention_cuda_test PACK_TAILS=3 [$F3] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests_pt3.txt" | tr '\n' ' ')"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096"
C128="$C --seq_lens=131072 --iters=1 --warmup=1 --workspace_mb=8192"
run() {  # pack_tails, timeout, args
  local pt=$1 to=$2; shift 2
  SPATTN_HOPPER_PACK_TAILS=$pt timeout $to bin/cuda_bench "$@" --tag=pt$pt >> "$O/bench.jsonl" 2>> "$O/errors.log"
  note "pt$pt rc=$?"
}
for r in 1 2; do for t in 2 1 3; do run $t 20 $C32; done; done
for t in 2 1 3; do run $t 45 $C128; done
kill $CLK 2>/dev/null
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r["seq_len"], r.get("block_m", 0) if not r["kernel"].startswith("dense") else 0, r["kernel"], round(r["density"], 3))][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
cd "$WORK" && tar -cJf "${OUT:-/tmp/out}/run2.tar.xz" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
