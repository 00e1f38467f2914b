#!/usr/bin/env bash
# s18-slkernel run 3 (prepared, NOT run: no device time left): GPU tests (default: tails packed
# in every item; sparse cases again with SPATTN_HOPPER_PACK_TAILS=1 (per item) and =0), then
# cuda_bench with knob sets adaptive / always / off (2 rounds, interleaved, one process per
# length) on the synthetic indexes and the sampled_lines index (gamma 0.95), block_m 64 and 128;
# spattn-bench sampled_lines base (main 1f166f0, bin/base/) / new at 32K and 128K.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s18slk && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
for t in attention_cuda_test cuda_engine_test cuda_backend_test cuda_ipc_test; do
  timeout 150 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
F='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
for e in SPATTN_HOPPER_PACK_TAILS=1 SPATTN_HOPPER_PACK_TAILS=0; do
  env $e timeout 150 bin/attention_cuda_test --gtest_filter="$F" > "$OUT/test_knob.log" 2>&1
  note "attention_cuda_test [$e] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_knob.log" | tr '\n' ' ')"
  cat "$OUT/test_knob.log" >> "$OUT/test_attention_cuda_test.log"
done
rm -f "$OUT/test_knob.log"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
command -v cuobjdump >/dev/null && cuobjdump -res-usage bin/cuda_bench 2>/dev/null | grep -A1 PersistentFa3 |
  grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c | tee -a "$OUT/summary.txt"
KS='--knob_sets=always:;adaptive:SPATTN_HOPPER_PACK_TAILS=1;off:SPATTN_HOPPER_PACK_TAILS=0 --rounds=2 --sparse_knobs=1'
SHAPE="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --sampled_lines=0.95 --workspace_mb=8192"
timeout 200 bin/cuda_bench --seq_lens=32768 --iters=5 --warmup=1 $SHAPE --range_densities=0.03,0.1,0.3 --col_densities=0.05 $KS --tag=r3 >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
note "cuda_bench 32K rc=$?"
timeout 200 bin/cuda_bench --seq_lens=131072 --iters=3 --warmup=1 $SHAPE --range_densities=0.03,0.1 --col_densities= $KS --tag=r3 >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
note "cuda_bench 128K rc=$?"
SB="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --methods=dense,sampled_lines --warmup=1 --repeat=3"
for len in 32768 131072; do
  for b in base new; do
    bin=bin/spattn-bench; [ $b = base ] && bin=bin/base/spattn-bench
    timeout 60 $bin $SB --seq_len=$len | sed "s/\"method\":\"/\"build\":\"$b\",\"method\":\"/" >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
    note "spattn-bench $b $len rc=${PIPESTATUS[0]}"
  done
done
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "density" not in r or r["kernel"].startswith("dense"): continue
    k = (r["seq_len"], r["block_m"], r["kernel"].replace("sparse_", "").replace("_hopper", ""), round(r["density"], 3))
    rows[k][r["tag"].split("/")[-1]].append("%.0f (%.3f, %.3f ms)" % (r["tflops"], r.get("vs_dense", 0), r["ms"]))
for k in sorted(rows):
    print(k, " | ".join("%s %s" % (t, " / ".join(v)) for t, v in rows[k].items()))
PY
python3 -c '
import json,sys
for l in open(sys.argv[1]):
  r=json.loads(l); print(r["build"], r["method"], r["seq_len"], "build %.2f kernel %.2f dens %.4f recall %.3f tf %.1f" % (r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], r.get("tflops",0)))' "$OUT/spattn_bench.jsonl"
tail -5 "$OUT/errors.log"
cd "$OUT" && cat test_*.log > tests.txt && rm -f test_*.log
