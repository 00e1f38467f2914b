#!/usr/bin/env bash
# s30-sa run 1: span rows in the row assembler (sample_attention's rows assembled from their
# sorted spans, one warp a row, instead of the bitmap passes).
#  1. row_assembly_gpu_test (bitmap rows as before + span rows vs their union, caps 512 / 3 / 0),
#     build_index_gpu_test: sample_attention cases (CPU twin, resident kernel, repeated builds,
#     long workload, SpanRowsBuildTheBitmapIndex[OnLlmMix]: span path == bitmap path bit for
#     bit) and the assembled error codes; then sampled_lines / anchor / saap cases if time is left.
#  2. spattn-bench sample_attention 32K base (main e9c159b) vs new, one process each, alternating,
#     NP (no profile) and PROFILE (SPATTN_GPU_BUILDER_PROFILE=1); new with
#     SPATTN_ASM_SPAN_CAP=0 (same binary, bitmap passes) and with SPATTN_SA_STAGES=3 / 4 (the one
#     pass with 3 / 4 K tile buffers); 128K one each while time is left (STOP_AFTER).
set -u
cd "$(dirname "$0")"
W=/tmp/s30sa && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for p in *.patch.zst; do
  $Z --patch-from="$W/bin/spattn-bench-base" $p -o "$W/bin/${p%.patch.zst}"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s30sat
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env binary args...
  local name=$1 to=$2 e=$3; shift 3
  env $e timeout $to "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure|rows differ" -A2 "$OUT/raw/test_$name.log" | head -24 | tee -a "$OUT/summary.txt"
}
t row_assembly 30 X=1 bin/row_assembly_gpu_test
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
S3=SPATTN_SA_STAGES=3
S4=SPATTN_SA_STAGES=4
bench baseNP 32768 10 16 X=1
bench newNP 32768 10 16 X=1
bench base 32768 7 16 $P
bench new 32768 7 16 $P
bench new3 32768 7 16 $P $S3
bench new4 32768 7 16 $P $S4
bench new3NP 32768 10 16 $S3
bench new4NP 32768 10 16 $S4
bench newNP 32768 10 16 X=1
bench baseNP 32768 10 16 X=1
bench newcap0NP 32768 10 16 SPATTN_ASM_SPAN_CAP=0
bench new4NP 32768 10 16 $S4
bench new3NP 32768 10 16 $S3
bench baseNP 32768 10 16 X=1
bench newNP 32768 10 16 X=1
bench baseNP 131072 3 4 X=1
bench newNP 131072 3 4 X=1
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new", "new3", "new4", "baseNP", "newNP", "new3NP", "new4NP", "newcap0NP"):
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
python3 builder_stages.py $(for v in base new new3 new4; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
if [ $SECONDS -le ${STOP_AFTER2:-80} ]; then
  t build_index_other ${TEST2_S:-30} X=1 bin/build_index_gpu_test --gtest_filter='*/sampled_lines:*/anchor:*/saap'
fi
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
note done
