#!/usr/bin/env bash
# s22-sldensity device run (on the GPU machine, bundle of pack.sh): the twin tests (GPU
# sampled_lines builder against its CPU twin, clip_diagonals included), then spattn-bench
# --device=cuda --group_by=all (one build of all 32 heads, per-head recall in recall_heads)
# --methods=sampled_lines (plus the oracle where ORACLE=1) for each "LEN:block_m:rows:edge_rows:
# floor:gamma:cost:clip[:short_floor]" in RUNS, llm_mix seed 0, 32/8 heads d 128 bf16 causal, 256 recall rows
# per head, --warmup=0 --repeat=1 (densities and recall; timings not claimed).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s22sld && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/spattn_test
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 120 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' > "$OUT/test_gpu.log" 2>&1
  note "build_index_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_gpu.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test_gpu.log" | head -40
  timeout 60 bin/sampled_lines_gpu_test > "$OUT/test_sl_gpu.log" 2>&1
  note "sampled_lines_gpu_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_sl_gpu.log" | tr '\n' ' ')"
fi
for v in ${RUNS:-32768:128:3:true:7:0.95:0:false}; do
  IFS=: read -r len bm rows edges floor gamma cost clip short <<< "$v"; short=${short:-0}
  methods=sampled_lines; [ "${ORACLE:-0}" = 1 ] && methods=oracle,sampled_lines
  tag="b${bm}_r${rows}_e${edges}_f${floor}_g${gamma}_c${cost}_k${clip}_s${short}"
  timeout ${CAP:-60} bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=256 --seq_len=$len --block_m=$bm \
    --warmup=0 --repeat=1 --methods=$methods --search_target_recall=$gamma \
    --sampled_lines.gamma=$gamma --sampled_lines.rows_per_block=$rows \
    --sampled_lines.edge_rows=$edges --sampled_lines.diagonal_floor=$floor \
    --sampled_lines.diagonal_cost=$cost --sampled_lines.clip_diagonals=$clip --sampled_lines.short_floor=$short \
    > "$OUT/bench_${tag}_$len.jsonl" 2> "$OUT/bench_${tag}_$len.err"
  note "bench $tag $len rc=$?"
done
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    for line in open(f):
        r = json.loads(line)
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        if r["method"] == "oracle":
            print("%-44s oracle column_density %.4f sample_blocks %s" % (tag, r["column_density"], r.get("sample_blocks"))); continue
        hs = [float(x.split(":")[1]) for x in r.get("recall_heads", "").split(",") if x]
        w95 = sum(1 for x in hs if x >= 0.93)
        w98 = sum(1 for x in hs if x >= 0.96)
        print("%-44s %6d index %7.2f kernel %7.2f density %.4f recall %.4f head_min %.4f heads>=0.93 %d/%d heads>=0.96 %d/%d %s" %
              (tag, r["seq_len"], r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"], min(hs) if hs else 0,
               w95, len(hs), w98, len(hs), r["device"]))
PY
(cd "$OUT" && tar -czf raw.tgz bench_* && rm -f bench_*)
