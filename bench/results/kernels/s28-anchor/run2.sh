#!/usr/bin/env bash
# s28-anchor run 2 (kept short: the helper's device share): build_index_gpu_test's anchor cases
# on the new binary (six key buffers), then spattn-bench anchor 32K PROFILE base / new (six) /
# new2 (0d12f43: two key buffers; dropped before the call for the device share, not run), 128K
# PROFILE new (STOP_AFTER=24).
set -u
cd "$(dirname "$0")"
W=/tmp/s28anchor && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test spattn-bench-new2; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s28anchort
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
timeout 40 bin/build_index_gpu_test --gtest_filter='*/anchor:*Anchor*' > "$OUT/raw/test_build_index.log" 2>&1
note "build_index rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/raw/test_build_index.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure|pooled anchors compared" "$OUT/raw/test_build_index.log" | head -12 | tee -a "$OUT/summary.txt"
bench() {  # variant len repeat recall_rows env...
  local v=$1 len=$2 rep=$3 rr=$4; shift 4
  if [ $SECONDS -gt ${STOP_AFTER:-50} ]; then note "skipped $v $len"; return; fi
  local bin=bin/spattn-bench
  case $v in base*) bin=bin/spattn-bench-base;; new2*) bin=bin/spattn-bench-new2;; esac
  env "$@" timeout 30 $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=$rr --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat=$rep --seq_len=$len --methods=anchor >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  note "spattn-bench $v $len rc=$?"
}
P=SPATTN_GPU_BUILDER_PROFILE=1
bench base 32768 7 16 $P
bench new 32768 7 16 $P
bench new 131072 3 4 $P
python3 - "$OUT/raw" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new2", "new", "newNP"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-6s %-8s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f recall %.6f entries %s/%s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"],
               r["recall"], r.get("index_ranges"), r.get("index_cols")))
PY
python3 builder_stages.py $(for v in base new2 new newNP; do [ -f "$OUT/raw/bench_$v.jsonl" ] && echo "$v=$OUT/raw/bench_$v"; done) > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
