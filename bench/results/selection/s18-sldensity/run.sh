#!/usr/bin/env bash
# s18-sldensity device run (on the GPU machine): the GPU sampled_lines builder against its CPU twin
# (build_index_gpu_test *sampled_lines*), PyTorch SDPA cuDNN, then spattn-bench --device=cuda
# --methods=oracle,sampled_lines at 32K and 128K, llm_mix 32/8 heads d 128 bf16, gamma 0.95, per
# head kind, for diagonal floors 2 (the old floor, with the new column test), 4 (the new default)
# and 5; 256 recall rows per head (the oracle on 256/16 = 16 query blocks per head).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s18sld && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cp sdpa_reference.py "$WORK/"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' > "$OUT/test_gpu.log" 2>&1
note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu.log" | head -40
timeout 40 python3 sdpa_reference.py --seq_lens 32768,131072 --backends cudnn --iters 5 --warmup 2 \
  > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"; note "sdpa rc=$?"
cat "$OUT/sdpa.jsonl" 2>/dev/null
for len in 32768 131072; do
  first=1
  for floor in ${FLOORS:-4 2 5}; do
    methods=sampled_lines; [ $first = 1 ] && methods=oracle,sampled_lines; first=0
    timeout 60 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
      --head_dim=128 --dtype=bf16 --group_by=kind --recall_rows=256 --seq_len=$len \
      --search_target_recall=0.95 --warmup=1 --repeat=3 --methods=$methods \
      --sampled_lines.gamma=0.95 --sampled_lines.diagonal_floor=$floor \
      > "$OUT/bench_floor${floor}_$len.jsonl" 2> "$OUT/bench_floor${floor}_$len.err"
    note "bench floor $floor $len rc=$?"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
orc = {}
files = sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl")),
               key=lambda f: (f.split("_")[-1], "floor4" not in f, f))
for f in files:
    tag = os.path.basename(f)[6:-6]
    if "floor4" in tag: orc = {}
    for line in open(f):
        r = json.loads(line)
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        if r["method"] == "oracle":
            orc[r["group"]] = r["column_density"]; continue
        o = orc.get(r["group"], 0)
        print("%-18s %-15s index %7.2f kernel %7.2f density %.4f oracle_col %.4f (%.2fx) recall %.4f min_row %.3f %s" %
              (tag, r["group"], r["index_build_ms"], r["kernel_ms"], r["density"], o,
               r["density"] / o if o else 0, r["recall"], r["recall_min"], r["device"]))
PY
