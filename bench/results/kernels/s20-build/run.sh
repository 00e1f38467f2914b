#!/usr/bin/env bash
# s20-build device run: build_index_gpu_test (every GPU builder against its CPU twin), then
# spattn-bench (this branch and the base binary, back to back, per-stage builder times) for
# $METHODS at $LENS (32K and 128K), (SDPA=1) PyTorch SDPA (cuDNN) on the same shapes, and (NCU=1) ncu of Saap's
# key-assignment, classifier and assembly kernels at 32K, this branch and base.
set -u
cd "$(dirname "$0")"
W=/tmp/s20b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cp sdpa_reference.py "$W/"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s20bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${TEST_S:-150} bin/build_index_gpu_test > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure|rows differ" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3 --calibrate --calibrate_steps=5"
M=${METHODS:-saap}
for len in ${LENS:-32768 131072}; do for v in new base; do
  bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
  timeout 120 $bin $COMMON --seq_len=$len --methods=$M >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len rc=$?"
done; done
[ "${SDPA:-1}" = 1 ] && timeout 60 python3 sdpa_reference.py --seq_lens 32768,131072 > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"
note "sdpa rc=$?"
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  for v in new base; do
    bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
    echo "=== ncu $v" >> "$OUT/ncu.txt"
    timeout 120 ncu --clock-control none -k regex:"SaapAssignKernel|SaapClassifyKernel|AssembleKernel" --launch-count 4 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats \
      $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1 --seq_len=32768 \
      --calibrate --calibrate_steps=5 --methods=saap >> "$OUT/ncu.txt" 2>&1
    note "ncu $v rc=$?"
  done
fi
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-5s %-16s %7d build %7.2f kernel %8.2f share %5.1f%% density %.4f recall %.4f" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
for v in new base; do echo "== $v"; grep -h "gpu builder" "$OUT/bench_$v.err"; done
grep -E "^=== ncu|Kernel<|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued" "$OUT/ncu.txt" 2>/dev/null | cut -c1-140 | head -60
cat "$OUT/summary.txt"
(cd "$OUT" && tar -czf /tmp/s20b_all.tgz . && rm -f ./*.txt ./*.log ./*.jsonl ./*.err && mv /tmp/s20b_all.tgz all.tgz)
