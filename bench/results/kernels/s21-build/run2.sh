#!/usr/bin/env bash
# s21-build follow-up device run (the final code: run 1's less the anchor-pass pairs, which
# run 1 measured slower): the anchor twin tests of build_index_gpu_test, then spattn-bench
# anchor only, this branch ("new") and main's binary ("base") back to back at 32K and 128K with
# per-stage builder times.
set -u
cd "$(dirname "$0")"
W=/tmp/s21b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cp stages.py "$W/"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s21bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 40 bin/build_index_gpu_test --gtest_filter="${FILTER:-*anchor*:*Assembled*}" > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test (${FILTER:-anchor}) rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --warmup=2 --repeat=3 --recall_rows=16"
for len in ${LENS:-32768 131072}; do for v in new base; do
  bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
  timeout 30 $bin $C --seq_len=$len --methods=${METHODS:-anchor} >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len rc=$?"
done; done
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
        print("%-5s %-16s %7d build %7.2f kernel %8.2f share %5.1f%% density %.4f recall %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r.get("recall")))
PY
python3 stages.py "$OUT" | sed "s|$OUT|run2|" | tee "$OUT/stages.txt"
cat "$OUT/summary.txt"
(cd "$OUT" && tar -czf /tmp/s21b_all.tgz . && find . -type f ! -name summary.txt ! -name stages.txt ! -name gpu.txt -delete && mv /tmp/s21b_all.tgz all.tgz)
