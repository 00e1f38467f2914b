#!/usr/bin/env bash
# s19-sldensity device run (on the GPU machine, bundle of pack.sh): the GPU sampled_lines builder
# against its CPU twin (build_index_gpu_test *sampled_lines*), then spattn-bench --device=cuda
# --methods=oracle,sampled_lines at 32K and 128K, llm_mix 32/8 heads d 128 bf16 causal, gamma
# 0.95, per head kind, 256 recall rows per head (the oracle on 16 query blocks per head), for
# VARIANTS "rows:edge_rows:floor"; then --group_by=all (one build of all 32 heads) for the
# ONE_BUILD variants, whose index_build_ms is the build time of one call.
set -u
cd "$(dirname "$0")"
WORK=/tmp/s19sld && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' > "$OUT/test_gpu.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu.log" | head -40
bench() {  # len group_by methods rows edges floor tag
  timeout 90 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=$2 --recall_rows=256 --seq_len=$1 \
    --warmup=1 --repeat=3 --methods=$3 --sampled_lines.gamma=0.95 \
    --sampled_lines.rows_per_block=$4 --sampled_lines.edge_rows=$5 \
    --sampled_lines.diagonal_floor=$6 > "$OUT/bench_$7_$1.jsonl" 2> "$OUT/bench_$7_$1.err"
  note "bench $7 $1 rc=$?"
}
for len in 32768 131072; do
  first=1
  for v in ${VARIANTS:-2:false:3 2:true:3 3:true:6 3:true:7 3:true:8}; do
    IFS=: read -r rows edges floor <<< "$v"
    methods=sampled_lines; [ $first = 1 ] && methods=oracle,sampled_lines; first=0
    bench $len kind $methods $rows $edges $floor "r${rows}_e${edges}_f${floor}"
  done
  for v in ${ONE_BUILD:-2:false:3 3:true:7}; do
    IFS=: read -r rows edges floor <<< "$v"
    bench $len all sampled_lines $rows $edges $floor "all_r${rows}_e${edges}_f${floor}"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import glob, json, os, sys
orc = {}
for length in ("32768", "131072"):
    files = sorted(glob.glob(os.path.join(sys.argv[1], "bench_*_%s.jsonl" % length)))
    for f in files:  # the oracle first
        for line in open(f):
            r = json.loads(line)
            if r.get("method") == "oracle": orc[(length, r["group"])] = r["column_density"]
    for f in files:
        tag = os.path.basename(f)[6:-6]
        for line in open(f):
            r = json.loads(line)
            if "error" in r:
                print(tag, "ERROR", r["error"][:200]); continue
            if r["method"] == "oracle": continue
            o = orc.get((length, r["group"]), 0)
            print("%-24s %-15s index %7.2f kernel %7.2f density %.4f oracle_col %.4f (%.2fx) recall %.4f min_row %.3f %s" %
                  (tag, r["group"], r["index_build_ms"], r["kernel_ms"], r["density"], o,
                   r["density"] / o if o else 0, r["recall"], r["recall_min"], r["device"]))
PY
