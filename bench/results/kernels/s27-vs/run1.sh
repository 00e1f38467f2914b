#!/usr/bin/env bash
# s27-vs run 1: build_index_gpu_test (vertical_slash / flex_prefill / sampled_lines cases, the
# estimate's users) on the default variant (SPATTN_EST_V=3) and vertical_slash on V=0/1/2, then
# spattn-bench vertical_slash 32K base (main b20f798) / new V=3 / V=0 / V=1 / V=2 NP, base / V=3 /
# V=0 PROFILE,
# 128K NP base / V=3, flex_prefill 32K NP base / V=3, then ncu on the estimate passes (V=0 / V=3).
set -u
cd "$(dirname "$0")"
W=/tmp/s27vs && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s27vst
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env... binary args...
  local name=$1 to=$2; shift 2
  timeout $to env "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ" "$OUT/raw/test_$name.log" | head -10 | tee -a "$OUT/summary.txt"
}
t est_v3 90 X=1 bin/build_index_gpu_test --gtest_filter='*/vertical_slash:*/flex_prefill:*/sampled_lines:*SampledLines*'
for v in 0 1 2; do t vs_v$v 40 SPATTN_EST_V=$v bin/build_index_gpu_test --gtest_filter='*/vertical_slash:*/flex_prefill'; done
bench() {  # variant len methods repeat recall_rows env...
  local v=$1 len=$2 m=$3 rep=$4 rr=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-115} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-40} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat=$rep --seq_len=$len --methods=$m >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
M=vertical_slash
P=SPATTN_GPU_BUILDER_PROFILE=1
bench baseNP 32768 $M 7 16 X=1
bench v3NP 32768 $M 7 16 SPATTN_EST_V=3
bench v0NP 32768 $M 7 16 SPATTN_EST_V=0
bench v1NP 32768 $M 7 16 SPATTN_EST_V=1
bench v2NP 32768 $M 7 16 SPATTN_EST_V=2
bench base 32768 $M 7 16 $P
bench v3 32768 $M 7 16 SPATTN_EST_V=3 $P
bench v0 32768 $M 7 16 SPATTN_EST_V=0 $P
bench v3NP 32768 $M 7 16 SPATTN_EST_V=3
bench baseNP 32768 $M 7 16 X=1
bench v3NP 131072 $M 5 4 SPATTN_EST_V=3
bench baseNP 131072 $M 5 4 X=1
bench baseNP 32768 flex_prefill 7 16 X=1
bench v3NP 32768 flex_prefill 7 16 SPATTN_EST_V=3
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "v3", "v0", "v1", "v2", "baseNP", "v3NP", "v0NP", "v1NP", "v2NP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-6s %-16s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f recall %.6f entries %s/%s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"],
               r["recall"], r.get("index_ranges"), r.get("index_cols")))
PY
python3 builder_stages.py $(for v in base v3 v0 v1 v2 baseNP v3NP; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ $SECONDS -lt ${NCU_BEFORE:-125} ]; then
  for v in 0 3; do
    SPATTN_EST_V=$v timeout 25 $NCU -k regex:EstimateKernel4 -c 3 --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section LaunchStats bin/spattn-bench --device=cuda \
      --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all \
      --recall_rows=4 --warmup=0 --repeat=1 --seq_len=32768 --methods=vertical_slash \
      > "$OUT/ncu_v$v.txt" 2>&1
    note "ncu v$v rc=$?"
  done
else
  note "ncu: ${NCU:-not found} (skipped or late)"
fi
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
cat "$OUT/summary.txt"
