#!/usr/bin/env bash
# s32-flex run 1: flex_prefill's estimate: several logical CTAs per launched CTA, Q kept
# (SPATTN_EST_SPAN, default 2) and pass 2's key tiles double-buffered by cp.async (SPATTN_EST_DB,
# default on). Tests: vs/flex twins, RepeatedBuilds, EstimateSpanAndKeyBuffersBuildMainsIndex,
# WgmmaPass3IsTheMmaSyncPass3, FastEstimateSelectsTheExactLines. spattn-bench: flex_prefill base
# (main b50f02c) / new alternating twice at 32K NP; PROFILE base / new / off (SPAN=1 DB=0) /
# db0 / sp1 / s4 at 32K; 128K NP new / base; vertical_slash 32K NP base / new.
set -u
cd "$(dirname "$0")"
W=/tmp/s32flex && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s32flext
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env... binary args...
  local name=$1 to=$2; shift 2
  timeout $to env "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ|same index|builds compared" "$OUT/raw/test_$name.log" | head -14 | tee -a "$OUT/summary.txt"
}
E=BuildIndexOnGpuEstimateTest
t new ${TEST_S:-60} X=1 bin/build_index_gpu_test --gtest_filter="*/vertical_slash:*/flex_prefill:$E.EstimateSpan*:$E.WgmmaPass3*:$E.FastEstimateSelects*"
bench() {  # variant len methods repeat recall_rows env...
  local v=$1 len=$2 m=$3 rep=$4 rr=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-100} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-40} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat=$rep --seq_len=$len --methods=$m >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
M=flex_prefill
P=SPATTN_GPU_BUILDER_PROFILE=1
for i in 1 2; do
  bench baseNP 32768 $M 7 16 X=1
  bench newNP 32768 $M 7 16 X=1
done
bench base 32768 $M 7 16 $P
bench new 32768 $M 7 16 $P
bench off 32768 $M 7 16 $P SPATTN_EST_SPAN=1 SPATTN_EST_DB=0
bench db0 32768 $M 7 16 $P SPATTN_EST_DB=0
bench sp1 32768 $M 7 16 $P SPATTN_EST_SPAN=1
bench s4 32768 $M 7 16 $P SPATTN_EST_SPAN=4
bench newNP 131072 $M 3 4 X=1
bench baseNP 131072 $M 3 4 X=1
bench baseNP 32768 vertical_slash 7 16 X=1
bench newNP 32768 vertical_slash 7 16 X=1
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "off", "db0", "sp1", "s4", "baseNP", "newNP"):
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
python3 builder_stages.py $(for v in base new off db0 sp1 s4; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
cat "$OUT/summary.txt"
