#!/usr/bin/env bash
# s29-sa run 1: build_index_gpu_test's sample_attention cases (CPU twin, kernel on the resident
# index, repeated builds, long workload, and the span tests EverySpanBuildsTheSpan4096Index /
# ShortSpansBuildTheSameIndexOnLlmMix), then spattn-bench sample_attention base (main 195bd1d) vs
# new (the one pass's span picked by the list schedule): 32K NP alternating (3 pairs), 32K
# PROFILE one each, 128K NP one each, 32K new with SPATTN_SA_SPAN=4096 (same binary, base's spans)
# while time is left (STOP_AFTER); one process each.
set -u
cd "$(dirname "$0")"
W=/tmp/s29sa && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s29sat
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout binary args...
  local name=$1 to=$2; shift 2
  timeout $to "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ|^\[       OK" "$OUT/raw/test_$name.log" | head -16 | tee -a "$OUT/summary.txt"
}
t build_index ${TEST_S:-40} bin/build_index_gpu_test --gtest_filter="${FILTER:-*/sample_attention:*SampleAttention*}"
bench() {  # variant len methods repeat recall_rows env...
  local v=$1 len=$2 m=$3 rep=$4 rr=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-80} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-25} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat=$rep --seq_len=$len --methods=$m >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len $m rc=$?"
}
M=sample_attention
P=SPATTN_GPU_BUILDER_PROFILE=1
bench baseNP 32768 $M 10 16 X=1
bench newNP 32768 $M 10 16 X=1
bench base 32768 $M 7 16 $P
bench new 32768 $M 7 16 $P
bench newNP 32768 $M 10 16 X=1
bench baseNP 32768 $M 10 16 X=1
bench baseNP 131072 $M 3 4 X=1
bench newNP 131072 $M 3 4 X=1
bench baseNP 32768 $M 10 16 X=1
bench newNP 32768 $M 10 16 X=1
bench new4096NP 32768 $M 10 16 SPATTN_SA_SPAN=4096
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "baseNP", "newNP", "new4096NP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-9s %-8s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f recall %.6f entries %s/%s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"],
               r["recall"], r.get("index_ranges"), r.get("index_cols")))
PY
grep -h "one pass: span" "$OUT"/raw/bench_*.err | sort | uniq -c | tee -a "$OUT/summary.txt"
python3 builder_stages.py $(for v in base new; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
cat "$OUT/summary.txt"
