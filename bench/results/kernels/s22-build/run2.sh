#!/usr/bin/env bash
# s22-build device run 2 (the committed code: run 1's one-upload anchor, the same for
# sample_attention, saap and Assemble, switches removed, run 1's kernel experiments reverted):
# build_index_gpu_test (all builders: Assemble is shared with sampled_lines), then spattn-bench
# new / base back to back with per-stage builder times, 128K anchor + sample_attention first,
# then 32K, then saap at 32K (calibrated as tests/gpu/run.sh does).
set -u
cd "$(dirname "$0")"
W=/tmp/s22b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cp stages.py "$W/"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s22bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${TEST_S:-50} bin/build_index_gpu_test > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20 | tee -a "$OUT/summary.txt"
export SPATTN_GPU_BUILDER_PROFILE=1
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --warmup=2 --repeat=3 --recall_rows=16"
bench() {  # variant len methods extra-flags...
  local v=$1 len=$2 m=$3; shift 3
  if [ $SECONDS -gt ${STOP_AFTER:-100} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
  timeout ${BENCH_S:-35} $bin $C --seq_len=$len --methods=$m "$@" >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
bench new 131072 anchor,sample_attention
bench base 131072 anchor,sample_attention
bench new 32768 vertical_slash,block_sparse,flex_prefill,sample_attention,anchor
bench base 32768 vertical_slash,block_sparse,flex_prefill,sample_attention,anchor
bench new 32768 saap --calibrate --calibrate_steps=30
bench base 32768 saap --calibrate --calibrate_steps=30
python3 - "$OUT" <<'PY' | tee "$OUT/shares.txt"
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
(cd "$OUT" && tar -czf /tmp/s22b_all.tgz . && find . -type f ! -name summary.txt ! -name stages.txt ! -name shares.txt ! -name gpu.txt -delete && mv /tmp/s22b_all.tgz all.tgz)
