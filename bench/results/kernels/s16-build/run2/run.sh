#!/usr/bin/env bash
# s16-build device run: build_index_gpu_test + cuda_engine_test, then spattn-bench (this branch
# and the base bddec20 binary) with per-stage builder times at 32K and 128K.
set -u
cd "$(dirname "$0")"
W=/tmp/s16 && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s16t
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for t in build_index_gpu_test cuda_engine_test; do
  timeout 60 bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3"
for run in "new 32768 vertical_slash,block_sparse,flex_prefill" "base 32768 vertical_slash,block_sparse,flex_prefill" \
           "new 131072 a_shape,vertical_slash,block_sparse,flex_prefill,sample_attention,anchor" \
           "base 131072 a_shape,vertical_slash,block_sparse,flex_prefill,sample_attention,anchor"; do
  set -- $run
  bin=bin/spattn-bench; [ "$1" = base ] && bin=bin/spattn-bench-base
  timeout 45 $bin $COMMON --seq_len=$2 --methods=$3 >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  note "spattn-bench $1 $2 rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r["method"], r["seq_len"], "ERROR", r["error"][:160]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-4s %-16s %7d build %7.2f kernel %8.2f share %5.1f%% density %.3f recall %.3f" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
cat "$OUT/summary.txt"
