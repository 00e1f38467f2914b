#!/usr/bin/env bash
# s18-slkernel run 2: GPU tests of the new build (range tails packed with the columns, the
# default; the sparse cases again with SPATTN_HOPPER_PACK_TAILS=0 and SPATTN_HOPPER_ITEMS=1/0),
# then base (main 1f166f0, bin/base/) vs new in the same run: cuda_bench base on the synthetic
# indexes, cuda_bench new with knob sets pack / nopack (2 rounds, interleaved) on the synthetic
# indexes and the sampled_lines index (gamma 0.95), 32K and 128K, block_m 64 and 128;
# spattn-bench sampled_lines base / new / base / new at 32K and 128K (block_m 64, its default).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s18slk && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
export SPATTN_IPC_PRODUCER=$PWD/bin/cuda_ipc_producer TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
for t in ${TESTS:-attention_cuda_test cuda_engine_test build_index_gpu_test mass_recall_test cuda_backend_test cuda_ipc_test}; do
  [ -x bin/$t ] || { note "$t missing"; continue; }
  timeout 150 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
F='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
for e in SPATTN_HOPPER_PACK_TAILS=0 SPATTN_HOPPER_ITEMS=1 SPATTN_HOPPER_ITEMS=0; do
  env $e timeout 150 bin/attention_cuda_test --gtest_filter="$F" > "$OUT/test_knob.log" 2>&1
  note "attention_cuda_test [$e] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_knob.log" | tr '\n' ' ')"
  cat "$OUT/test_knob.log" >> "$OUT/test_attention_cuda_test.log"
done
rm -f "$OUT/test_knob.log"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
command -v cuobjdump >/dev/null && cuobjdump -res-usage bin/cuda_bench 2>/dev/null | grep -A1 PersistentFa3 |
  grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c | tee -a "$OUT/summary.txt"
SHAPE="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=64,128 --range_densities=0.03,0.1,0.3 --col_densities=0.05,0.3"
for len in 32768 131072; do
  it="--iters=5 --warmup=1"; [ $len -gt 65536 ] && it="--iters=3 --warmup=1"
  timeout 150 bin/base/cuda_bench --seq_lens=$len $it $SHAPE --tag=base >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "cuda_bench base $len rc=$?"
  timeout 240 bin/cuda_bench --seq_lens=$len $it $SHAPE --sampled_lines=0.95 --workspace_mb=8192 \
    --knob_sets="pack:;nopack:SPATTN_HOPPER_PACK_TAILS=0" --rounds=2 --sparse_knobs=1 --tag=new >> "$OUT/bench.jsonl" 2>> "$OUT/errors.log"
  note "cuda_bench new $len rc=$?"
done
SB="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --methods=dense,sampled_lines --warmup=1 --repeat=3"
for len in 32768 131072; do
  for b in base new base new; do
    bin=bin/spattn-bench; [ $b = base ] && bin=bin/base/spattn-bench
    timeout 60 $bin $SB --seq_len=$len | sed "s/\"method\":\"/\"build\":\"$b\",\"method\":\"/" >> "$OUT/spattn_bench.jsonl" 2>> "$OUT/errors.log"
    note "spattn-bench $b $len rc=${PIPESTATUS[0]}"
  done
done
grep -v index_stats "$OUT/bench.jsonl" | python3 -c '
import json,sys
for l in sys.stdin:
  r=json.loads(l)
  if r["kernel"].startswith("dense"): print(r["tag"], r["kernel"], r["seq_len"], "ms %.3f tf %.1f" % (r["ms"], r["tflops"])); continue
  print(r["tag"], r["kernel"], r["seq_len"], r["block_m"], "dens %.4f ms %.3f tf %.1f vs_dense %s" % (r["density"], r["ms"], r["tflops"], r.get("vs_dense","-")))'
python3 -c '
import json,sys
for l in open(sys.argv[1]):
  r=json.loads(l); print(r["build"], r["method"], r["seq_len"], "build %.2f kernel %.2f dens %.4f recall %.3f tf %.1f" % (r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], r.get("tflops",0)))' "$OUT/spattn_bench.jsonl"
tail -5 "$OUT/errors.log"
cd "$OUT" && cat test_*.log > tests.txt && rm -f test_*.log
