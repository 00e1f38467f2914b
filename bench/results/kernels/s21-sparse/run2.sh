#!/usr/bin/env bash
# s21-sparse run 2 (follow-up, <= 60 s): the attention GPU tests of the sparse kernel on the final
# build (dynamic work list + wgmma descriptors built once per tile: bin/), without the dense-only
# and 32K/128K LongContexts cases (the lead's combined run has them); then 32K cuda_bench in
# separate processes, one knob set each, alternating base (main 11899f0) / dyn (the dynamic work
# list alone, 0f1b4d0: main with s21-dense merged) / desc (bin/): block_m 64 and 128, ranges 0.03 and 0.1, columns 0.05,
# sampled_lines 0.95. Everything goes into run2.tar.xz (the run tool returns at most 8 files).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s21sp2 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
F='*Sparse*:*Columns*:*AShape*:*Nan*:*Empty*:*HostPath*'
timeout 40 bin/attention_cuda_test --gtest_filter="$F" > "$O/tests.txt" 2>&1
note "attention_cuda_test [$F] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$O/tests.txt" | tr '\n' ' ')"
grep -hE "^\[ +(OK|FAILED) " "$O/tests.txt" | tee -a "$O/summary.txt"
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=3 --warmup=1 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95 --workspace_mb=4096"
for r in 1 2; do
  for b in base dyn desc; do
    exe=bin/$b/cuda_bench; [ $b = desc ] && exe=bin/cuda_bench
    timeout 15 $exe $C --tag=$b >> "$O/bench.jsonl" 2>> "$O/errors.log"; note "$b round $r rc=$?"
  done
done
kill $CLK 2>/dev/null
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r.get("block_m", 0) if not r["kernel"].startswith("dense") else 0, r["kernel"], round(r["density"], 3))][r["tag"]].append(r["tflops"])
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f" % x for x in v)) for t, v in sorted(R[k].items())))
PY
cd "$WORK" && tar -cJf "${OUT:-/tmp/out}/run2.tar.xz" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
