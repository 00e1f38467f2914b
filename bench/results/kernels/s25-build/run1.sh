#!/usr/bin/env bash
# s25-build run 1: tests (build_index_gpu_test: sample_attention / anchor / flex_prefill cases, every
# builder's RepeatedBuildsAreIdentical (kept indexes side by side) and the error cases; the
# two-pass sample_attention path's twin cases; mass_recall_test), then spattn-bench with per-stage
# builder times (SPATTN_GPU_BUILDER_PROFILE=1): 32K base (main 2d1f736) / new / new2p (this branch
# with SPATTN_SA_ONEPASS=0: sample_attention's two passes, i.e. the Keep change alone), 128K new /
# base, then without stage events (NP) base / new at 32K if time is left. One process each.
set -u
cd "$(dirname "$0")"
W=/tmp/s25b && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test mass_recall_test; do
  [ -f $b.patch.zst ] && $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s25bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env... -- binary args...
  local name=$1 to=$2; shift 2
  env "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" "$OUT/raw/test_$name.log" | head -10 | tee -a "$OUT/summary.txt"
}
t build_index 45 timeout 45 bin/build_index_gpu_test --gtest_filter="${FILTER:-*/sample_attention:*/anchor:*/flex_prefill:*RepeatedBuilds*:*Assembled*:*Merged*}"
t twopass 20 SPATTN_SA_ONEPASS=0 timeout 20 bin/build_index_gpu_test --gtest_filter="*MatchesCpuTwin/sample_attention:*KernelRunsOnTheResidentIndex/sample_attention"
t mass_recall 20 timeout 20 bin/mass_recall_test
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64"
bench() {  # variant len methods repeat env...
  local v=$1 len=$2 m=$3 rep=$4; shift 4
  if [ $SECONDS -gt ${STOP_AFTER:-75} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-40} $bin $C --warmup=$((rep < 5 ? 1 : 2)) --repeat=$rep --seq_len=$len --methods=$m >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
M=sample_attention,flex_prefill,anchor
P=SPATTN_GPU_BUILDER_PROFILE=1
bench base 32768 $M 7 $P
bench new 32768 $M 7 $P
bench new2p 32768 sample_attention 7 $P SPATTN_SA_ONEPASS=0
# 128K only as a pair (both or neither).
if [ $SECONDS -lt ${PAIR_BEFORE:-45} ]; then
  STOP_AFTER=999 bench new 131072 anchor,sample_attention,flex_prefill 3 $P
  STOP_AFTER=999 bench base 131072 anchor,sample_attention,flex_prefill 3 $P
else
  note "skipped the 128K pair"
fi
if [ $SECONDS -lt ${NP_BEFORE:-85} ]; then
  STOP_AFTER=999 bench baseNP 32768 $M 7 X=1
  STOP_AFTER=999 bench newNP 32768 $M 7 X=1
fi
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "new2p", "baseNP", "newNP"):
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
python3 builder_stages.py $(for v in base new new2p baseNP newNP; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
for v in base new new2p; do
  [ -f "$OUT/raw/bench_$v.err" ] && awk -v v=$v '/seq_len/ {s=$0} /gpu builder/ {print v, $0}' "$OUT/raw/bench_$v.err"
done > "$OUT/raw/stage_lines.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
cat "$OUT/summary.txt"
