#!/usr/bin/env bash
# s18-saap device run 2: build_index_gpu_test's Saap cases (GPU vs CPU twin incl. classify_rows
# 96 / 100 / 65 of 128-row blocks) and error codes; then spattn-bench saap at 32K and 128K for
# this branch and the base binary (main 1f166f0) back to back, per-stage builder times.
# (Run 1, run1/run.sh, also ran the tests and 32K with SPATTN_SAAP_CTA_TOPL=1.)
set -u
cd "$(dirname "$0")"
W=/tmp/s18saap && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s18saapt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
F='*saap*:*Saap*:BuildIndexOnGpuErrorsTest.*'
timeout 120 bin/build_index_gpu_test --gtest_filter="$F" > "$OUT/test_warp_topl.log" 2>&1
note "build_index_gpu_test (warp top-l) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_warp_topl.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT/test_warp_topl.log" | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=1 --repeat=3 --calibrate --calibrate_steps=5
  --methods=saap"
for run in "new 32768" "base 32768" "new 131072" "base 131072"; do
  set -- $run
  bin=bin/spattn-bench; [ "$1" = base ] && bin=bin/spattn-bench-base
  if [ "$1" = cta ]; then
    SPATTN_SAAP_CTA_TOPL=1 timeout 75 $bin $COMMON --seq_len=$2 >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  else
    timeout 75 $bin $COMMON --seq_len=$2 >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  fi
  note "spattn-bench $1 $2 rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base", "cta"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r["method"], r["seq_len"], "ERROR", r["error"][:160]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-4s %-6s %7d build %7.2f kernel %8.2f share %5.1f%% density %.4f recall %.4f" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
for v in new base cta; do echo "== $v"; grep -h "workload\|calibrated\|gpu builder saap" "$OUT/bench_$v.err" | head -14; done
cat "$OUT/summary.txt"
