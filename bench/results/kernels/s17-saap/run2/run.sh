#!/usr/bin/env bash
# s17-saap device run 2: build_index_gpu_test's Saap cases (GPU vs CPU twin, classify_rows sampled
# and every row) and error codes, then spattn-bench saap at 32K and 128K for this branch
# (default classify_rows 4) and the base binary (main 072b37f: every row), with per-stage
# builder times, then PyTorch SDPA (cuDNN) at the same shapes.
set -u
cd "$(dirname "$0")"
HERE=$PWD
W=/tmp/s17saap && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s17saapt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 bin/build_index_gpu_test --gtest_filter='*saap*:*Saap*:BuildIndexOnGpuErrorsTest.*' \
  > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[       OK|^\[  FAILED|Failure" "$OUT/test_build_index_gpu_test.log" | head -30
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=1 --repeat=3 --calibrate --calibrate_steps=5
  --methods=saap"
for run in "new 32768" "base 32768" "new 131072" "base 131072"; do
  set -- $run
  bin=bin/spattn-bench; [ "$1" = base ] && bin=bin/spattn-bench-base
  timeout 75 $bin $COMMON --seq_len=$2 >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  note "spattn-bench $1 $2 rc=$?"
done
timeout 60 python3 "$HERE/sdpa_reference.py" --seq_lens 32768,131072 > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"
note "sdpa rc=$?"
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
        print("%-4s %-6s %7d build %7.2f kernel %8.2f share %5.1f%% density %.3f recall %.3f" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
for v in new base; do echo "== $v"; grep -h "workload\|calibrated\|gpu builder saap" "$OUT/bench_$v.err" | head -14; done
cat "$OUT/sdpa.jsonl" | head -8
cat "$OUT/summary.txt"
