#!/usr/bin/env bash
# s23-sparse run 2 (on the GPU machine): which of run 1's changes moved which cell. One
# cuda_bench process per length, the sparse kernel's knobs as knob sets in the same process
# (--sparse_knobs=1, interleaved rounds): main = SLEEP_WAITS=0 + STALE_MAX=-1 (main's waits and
# softmax; the gathered tiles' largest key stays), def (sleeping waits of producer and
# consumers, stale maximum 8), nosleep (stale maximum only), psleep (producer sleeps only),
# exact (STALE_MAX=0: the maximum moves wherever it rises, only multiplies by 1.0 skipped).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s23sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
K="main:SPATTN_HOPPER_SLEEP_WAITS=0+SPATTN_HOPPER_STALE_MAX=-1;def:;nosleep:SPATTN_HOPPER_SLEEP_WAITS=0;psleep:SPATTN_HOPPER_SLEEP_WAITS=1;exact:SPATTN_HOPPER_STALE_MAX=0"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1 --col_densities=0.05 --sparse_knobs=1"
timeout 60 bin/cuda_bench $C --seq_lens=32768 --iters=3 --warmup=1 --sampled_lines=0.95 --workspace_mb=4096 --rounds=2 "--knob_sets=$K" >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "32K rc=$?"
timeout 90 bin/cuda_bench $C --seq_lens=131072 --iters=2 --warmup=1 --sampled_lines=0 --workspace_mb=4096 --rounds=1 "--knob_sets=$K" >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "128K rc=$?"
kill $CLK 2>/dev/null
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"].lstrip("/")].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
cd "$WORK" && tar -cJf "${OUT:-/tmp/out}/run2.tar.xz" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/" 2>/dev/null
