#!/usr/bin/env bash
# s31-flex run 1: flex_prefill's line selection in fewer sweeps (SPATTN_FLEX_SEL), its pooled keys
# two channels a thread (SPATTN_FLEX_POOL), the decision's 16-byte loads. Tests: vs/flex twins,
# FlexSelectAndPoolBuildMainsIndex, RepeatedBuilds. spattn-bench flex_prefill: base (main e30e6a9)
# / new alternating twice at 32K NP; PROFILE base / new / new SEL=0 / new POOL=0 at 32K; 128K
# PROFILE base / new and NP base / new.
set -u
cd "$(dirname "$0")"
W=/tmp/s31flex && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s31flext
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env... binary args...
  local name=$1 to=$2; shift 2
  timeout $to env "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ|flex select|llm_mix 16K" "$OUT/raw/test_$name.log" | head -14 | tee -a "$OUT/summary.txt"
}
t new ${TEST_S:-75} X=1 bin/build_index_gpu_test --gtest_filter='*/vertical_slash:*/flex_prefill:BuildIndexOnGpuEstimateTest.FlexSelect*:*RepeatedBuilds*'
bench() {  # variant len methods repeat recall_rows env...
  local v=$1 len=$2 m=$3 rep=$4 rr=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-110} ]; then note "skipped $v $len $m"; return; fi
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
bench sel0 32768 $M 7 16 $P SPATTN_FLEX_SEL=0
bench pool0 32768 $M 7 16 $P SPATTN_FLEX_POOL=0
bench new 131072 $M 3 4 $P
bench base 131072 $M 3 4 $P
bench newNP 131072 $M 3 4 X=1
bench baseNP 131072 $M 3 4 X=1
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "sel0", "pool0", "baseNP", "newNP"):
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
python3 builder_stages.py $(for v in base new sel0 pool0; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
cat "$OUT/summary.txt"
