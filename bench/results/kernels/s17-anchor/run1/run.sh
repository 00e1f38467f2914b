#!/usr/bin/env bash
# s17-anchor device run: build_index_gpu_test (every method against its CPU twin), then
# spattn-bench anchor + sample_attention for the base binary (main 592a594) and this branch, one
# after the other, with per-stage builder times (SPATTN_GPU_BUILDER_PROFILE=1) at 32K and 128K.
set -u
cd "$(dirname "$0")"
W=/tmp/s17a && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s17at
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 bin/build_index_gpu_test > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3 --methods=anchor,sample_attention"
for run in "base 32768" "new 32768" "base 131072" "new 131072"; do
  set -- $run
  bin=bin/spattn-bench; [ "$1" = base ] && bin=bin/spattn-bench-base
  timeout 40 $bin $COMMON --seq_len=$2 >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  note "spattn-bench $1 $2 rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("base", "new"):
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
for v in base new; do echo "== $v stages"; grep -h "gpu builder" "$OUT/bench_$v.err" 2>/dev/null; done
cat "$OUT/summary.txt"
