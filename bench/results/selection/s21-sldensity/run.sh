#!/usr/bin/env bash
# s21-sldensity device run (on the GPU machine, bundle of pack.sh): the twin tests (GPU
# sampled_lines builder against its CPU twin; the diagonal bar is now one __host__ __device__
# function), then spattn-bench --device=cuda --group_by=all (one build of all 32 heads, per-head
# recall in recall_heads) --methods=oracle,sampled_lines for LENS x VARIANTS, llm_mix 32/8 heads
# d 128 bf16 causal, 256 recall rows per head. VARIANTS "block_m:rows:edge_rows:floor:gamma[:cost]";
# the oracle (at --search_target_recall = gamma) once per (length, block_m, gamma).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s21sld && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
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
declare -A seen
for len in ${LENS:-32768 131072}; do
  for v in ${VARIANTS:-128:3:true:7:0.95}; do
    IFS=: read -r bm rows edges floor gamma cost <<< "$v"; cost=${cost:-0}
    methods=sampled_lines; [ -z "${seen[$len$bm$gamma]:-}" ] && methods=oracle,sampled_lines; seen[$len$bm$gamma]=1
    tag="b${bm}_r${rows}_e${edges}_f${floor}_g${gamma}_c${cost}"
    timeout 100 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
      --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=256 --seq_len=$len --block_m=$bm \
      --warmup=1 --repeat=3 --methods=$methods --search_target_recall=$gamma \
      --sampled_lines.gamma=$gamma --sampled_lines.rows_per_block=$rows \
      --sampled_lines.edge_rows=$edges --sampled_lines.diagonal_floor=$floor \
      --sampled_lines.diagonal_cost=$cost > "$OUT/bench_${tag}_$len.jsonl" 2> "$OUT/bench_${tag}_$len.err"
    note "bench $tag $len rc=$?"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import glob, json, os, sys
orc = {}
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        r["tag"] = os.path.basename(f)[6:-6]
        rows.append(r)
for r in rows:
    if r.get("method") == "oracle":
        t = r["tag"]; orc[(r["seq_len"], t.split("_")[0], t.split("_g")[1].split("_")[0])] = r["column_density"]
for r in rows:
    if "error" in r:
        print(r["tag"], "ERROR", r["error"][:200]); continue
    if r["method"] == "oracle": continue
    t = r["tag"]; g = t.split("_g")[1].split("_")[0]
    o = orc.get((r["seq_len"], t.split("_")[0], g), 0)
    hs = [float(x.split(":")[1]) for x in r.get("recall_heads", "").split(",") if x]
    within = sum(1 for x in hs if x >= float(g) - 0.02)
    print("%-30s index %7.2f kernel %7.2f density %.4f oracle_col %.4f (%.3fx) recall %.4f head_min %.4f within0.02 %d/%d kept %s %s" %
          (t, r["index_build_ms"], r["kernel_ms"], r["density"], o, r["density"] / o if o else 0,
           r["recall"], min(hs) if hs else 0, within, len(hs),
           "yes" if r["recall"] >= float(g) and within >= 0.95 * len(hs) else "no", r["device"]))
PY
# One archive for the per-bench files (the tool brings back only a few files per run).
(cd "$OUT" && tar -czf raw.tgz bench_* && rm -f bench_*)
