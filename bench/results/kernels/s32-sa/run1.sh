#!/usr/bin/env bash
# s32-sa run 1: sample_attention with fewer launches (SPATTN_SA_LEAN, default on; 0 = main's
# launches in the same binary).
#  1. build_index_gpu_test: sample_attention cases + LeanLaunchesBuildMainsIndex (lean vs main's
#     launches at span caps default / 4 / 0: every index array equal) and the earlier SA tests.
#  2. spattn-bench sample_attention 32K base (main b50f02c) vs new, one process per cell,
#     alternating, NP (no profile) and PROFILE (SPATTN_GPU_BUILDER_PROFILE=1); new with
#     SPATTN_SA_LEAN=0 (PROFILE, same binary: main's launches) and =1 (without the kept span
#     ranges); 128K NP base / new.
set -u
cd "$(dirname "$0")"
W=/tmp/s32sa && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for p in *.patch.zst; do
  $Z --patch-from="$W/bin/spattn-bench-base" $p -o "$W/bin/${p%.patch.zst}"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s32sat
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env binary args...
  local name=$1 to=$2 e=$3; shift 3
  env $e timeout $to "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ|indexes compared" -A2 "$OUT/raw/test_$name.log" | head -30 | tee -a "$OUT/summary.txt"
}
t build_index_sa ${TEST_S:-40} X=1 bin/build_index_gpu_test --gtest_filter='*/sample_attention:*SampleAttention*:*Assembl*'
bench() {  # variant len repeat recall_rows env...
  local v=$1 len=$2 rep=$3 rr=$4; shift 4
  if [ $SECONDS -gt ${STOP_AFTER:-70} ]; then note "skipped $v $len"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  env "$@" timeout ${BENCH_S:-25} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat=$rep --seq_len=$len --methods=sample_attention >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len rc=$?"
}
P=SPATTN_GPU_BUILDER_PROFILE=1
OFF=SPATTN_SA_LEAN=0
bench baseNP 32768 10 16 X=1
bench newNP 32768 10 16 X=1
bench base 32768 7 16 $P
bench new 32768 7 16 $P
bench newoff 32768 7 16 $P $OFF
bench new1 32768 7 16 $P SPATTN_SA_LEAN=1
bench newNP 32768 10 16 X=1
bench baseNP 32768 10 16 X=1
bench new 32768 7 16 $P
bench base 32768 7 16 $P
bench baseNP 32768 10 16 X=1
bench newNP 32768 10 16 X=1
bench baseNP 131072 3 4 X=1
bench newNP 131072 3 4 X=1
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "newoff", "new1", "baseNP", "newNP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-9s %-8s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f recall %.6f entries %s/%s pairs %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"],
               r["recall"], r.get("index_ranges"), r.get("index_cols"), r.get("pairs")))
PY
python3 builder_stages.py $(for v in base new newoff new1; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
note done
