#!/usr/bin/env bash
# s19-sparse run 1: GPU tests of the new build (default; the sparse cases again under
# SPATTN_HOPPER_PACK_TAILS=1 / 0 and SPATTN_HOPPER_ORDER=1 / 2), SDPA cuDNN at 32K and 128K,
# then base (main dd61227, bin/base/) vs new cuda_bench processes (base, new, base at 32K;
# base, new at 128K; block_m 64 and 128; synthetic ranges / columns, the dense index and the
# sampled_lines index, gamma 0.95), the new one with knob sets def / ord1 / ord2 / pk1 / pk0
# (2 rounds, interleaved); then the public references at 128K on spattn-bench's tensors.
set -u
cd "$(dirname "$0")"
HERE=$PWD
WORK=/tmp/s19sp && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp "$HERE"/*.py "$WORK/" && cp -r "$HERE/ref" "$WORK/"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/clocks.csv" 2>/dev/null &
CLK=$!
for t in attention_cuda_test cuda_engine_test cuda_backend_test cuda_ipc_test; do
  timeout 150 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
F='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
for e in SPATTN_HOPPER_PACK_TAILS=1 SPATTN_HOPPER_PACK_TAILS=0 SPATTN_HOPPER_ORDER=1 SPATTN_HOPPER_ORDER=2; do
  env $e timeout 120 bin/attention_cuda_test --gtest_filter="$F" > "$OUT/test_knob.log" 2>&1
  note "attention_cuda_test [$e] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_knob.log" | tr '\n' ' ')"
  cat "$OUT/test_knob.log" >> "$OUT/test_attention_cuda_test.log"
done
rm -f "$OUT/test_knob.log"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16"
for len in 32768 131072; do
  PYTHONUNBUFFERED=1 timeout 120 python3 sdpa_reference.py --seq_lens=$len $S --iters=5 --warmup=1 --backends cudnn >> "$OUT/sdpa.jsonl" 2>> "$OUT/errors.log"
  note "sdpa $len rc=$?"
done
C="$S --variants=5 --sparse_variants=5 --block_ms=64,128 --sampled_lines=0.95 --workspace_mb=8192 --sdpa=$OUT/sdpa.jsonl"
C32="--seq_lens=32768 --iters=5 --warmup=1 --range_densities=0.03,0.1,0.3,0.5 --col_densities=0.05,0.3"
C128="--seq_lens=131072 --iters=3 --warmup=1 --range_densities=0.03,0.1,0.3 --col_densities=0.05"
KS='--knob_sets=def:;ord1:SPATTN_HOPPER_ORDER=1;ord2:SPATTN_HOPPER_ORDER=2;pk1:SPATTN_HOPPER_PACK_TAILS=1;pk0:SPATTN_HOPPER_PACK_TAILS=0 --rounds=2 --sparse_knobs=1'
timeout 150 bin/base/cuda_bench $C $C32 --tag=base >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base 32K rc=$?"
timeout 200 bin/cuda_bench $C $C32 $KS --index_stats=1 --tag=new >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "new 32K rc=$?"
timeout 150 bin/base/cuda_bench $C $C32 --tag=base2 >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base2 32K rc=$?"
timeout 150 bin/base/cuda_bench $C $C128 --tag=base >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "base 128K rc=$?"
timeout 240 bin/cuda_bench $C $C128 $KS --index_stats=1 --tag=new >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"; note "new 128K rc=$?"
# References at 128K on the same tensors (ours: spattn-bench, kernel time; theirs: the harnesses).
timeout 200 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
  --dtype=bf16 --group_by=all --recall_rows=16 --warmup=1 --repeat=3 --seq_len=131072 \
  --methods=dense,a_shape,vertical_slash,block_sparse,flex_prefill,anchor,sampled_lines \
  --dump="$WORK/w128k.safetensors" >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
note "spattn-bench 128K rc=$?"
PYTHONUNBUFFERED=1 timeout 200 python3 sparse_references.py --ref_dir ref --tensors "$WORK/w128k.safetensors" \
  --methods vertical_slash,flex_prefill,anchor --gamma 0.9,0.99 >> "$OUT/refs.jsonl" 2>> "$OUT/errors.log"
note "sparse_references 128K rc=$?"
rm -f "$WORK/w128k.safetensors"
BSD=$(python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("method") == "block_sparse": print(round(r["density"], 4))' "$OUT/spattn_bench.jsonl" | tail -1)
PYTHONUNBUFFERED=1 timeout 120 python3 minference_reference.py --ref_dir ref --seq_lens 131072 \
  --kernels a_shape,block_sparse --densities "${BSD:-0.095}" --iters 5 --warmup 1 >> "$OUT/refs.jsonl" 2>> "$OUT/errors.log"
note "minference_reference 128K (block_sparse density ${BSD:-0.095}) rc=$?"
kill $CLK 2>/dev/null
grep -v index_stats "$OUT/bench.jsonl" | python3 -c '
import json, sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
for l in sys.stdin:
    r = json.loads(l)
    k = (r["seq_len"], r.get("block_m", 0) if not r["kernel"].startswith("dense") else 0, r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
    t = r["tag"].split("/")[-1]
    rows[k][t].append("%.0f(%s)" % (r["tflops"], r.get("vs_dense", r.get("vs_sdpa", "-"))))
for k in sorted(rows):
    print(k, " | ".join("%s %s" % (t, " ".join(v)) for t, v in rows[k].items()))'
grep index_stats "$OUT/bench.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(r["index"], r["seq_len"], r["block_m"], "tiles/row %.1f fill %.3f pair_fill %.3f gqa_pair_fill %.3f gqa_same %.3f" % (r["tiles_per_row"], r["fill"], r["pair_fill_128"], r.get("gqa_pair_fill_128", 0), r.get("gqa_same", 0)))'
python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print(r["method"], r["seq_len"], "build %.2f kernel %.2f dens %.4f recall %.3f tf %.1f" % (r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], r.get("tflops",0)))' "$OUT/spattn_bench.jsonl"
cat "$OUT/refs.jsonl"; cat "$OUT/sdpa.jsonl"
grep -v "^cuda_bench on\|^gpu builder" "$OUT/errors.log" | tail -8
cd "$OUT" && cat test_*.log > tests.txt && rm -f test_*.log
