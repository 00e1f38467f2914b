#!/usr/bin/env bash
# s24-build run 2: build_index_gpu_test (sample_attention's twin cases and the assembled
# builders' errors), then spattn-bench: this branch at 32K (flex_prefill, sample_attention,
# anchor) with per-stage builder times (SPATTN_GPU_BUILDER_PROFILE=1; run 1 has the base's), then
# base (main 9a51e16) / new without stage events (NP: the plain build times) at 32K, and
# new / base at 128K (anchor, flex_prefill), one process each, if time is left. "new" reports index_build_ms without the worker's pairs count
# (pairs_count_ms apart); "base" includes it.
set -u
cd "$(dirname "$0")"
W=/tmp/s24b && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  [ -f $b.patch.zst ] && $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s24bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 30 bin/build_index_gpu_test --gtest_filter="${FILTER:-*/sample_attention:*Assembled*}" > "$OUT/test_build_index_gpu_test.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_build_index_gpu_test.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" "$OUT"/test_*.log | head -20 | tee -a "$OUT/summary.txt"
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
bench() {  # variant len methods repeat recall_rows env...
  local v=$1 len=$2 m=$3 rep=$4 rr=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-30} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-25} $bin $C --warmup=$((rep < 5 ? 1 : 2)) --repeat=$rep --recall_rows=$rr --seq_len=$len --methods=$m >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
M=flex_prefill,sample_attention,anchor
bench new 32768 $M 7 16 SPATTN_GPU_BUILDER_PROFILE=1
bench baseNP 32768 $M 7 16 X=1
bench newNP 32768 $M 7 16 X=1
# 128K only as a pair (both or neither).
if [ $SECONDS -lt ${PAIR_BEFORE:-24} ]; then
  STOP_AFTER=999 bench newNP 131072 anchor,flex_prefill 3 4 X=1
  STOP_AFTER=999 bench baseNP 131072 anchor,flex_prefill 3 4 X=1
else
  note "skipped the 128K pair"
fi
python3 - "$OUT" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("new", "base", "newNP", "baseNP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-6s %-16s %7d build %7.3f kernel %8.3f share %5.2f%% pairs_ms %s density %.8f recall %.6f entries %s/%s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r.get("pairs_count_ms"), r["density"],
               r["recall"], r.get("index_ranges"), r.get("index_cols")))
PY
python3 builder_stages.py $(for v in new base newNP baseNP; do [ -f "$OUT/bench_$v.jsonl" ] && echo "$v=$OUT/bench_$v"; done) 2>&1 | tee "$OUT/stages.txt"
for v in new base; do
  [ -f "$OUT/bench_$v.err" ] && awk -v v=$v '/seq_len/ {s=$0} /gpu builder/ {print v, $0}' "$OUT/bench_$v.err"
done > "$OUT/stage_lines.txt"
cat "$OUT/summary.txt"
