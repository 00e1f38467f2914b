#!/usr/bin/env bash
# s34-sparse2 call 2: call 1 put the range methods' gap in the block_m 64 kernel's tile step
# (spattn-bench indexes a_shape / vertical_slash / block_sparse at 64 rows; b = 2335-2396
# cycles per 64 x 64 tile and CTA, 2 CTAs an SM; per-item cost <= 3 %). Here: (1) the same
# methods indexed at 128 rows (--block_m=128, block_sparse block_size 128 with top_k 50: the
# same keys a row) against the default 64, per pair and in total kernel ms, 2 processes each,
# alternating; (2) ncu (clocks unlocked, one launch after the warm-up) of a_shape's sparse
# launch at 64 and 128 rows: the step's pipes and stalls. main 4efa45b's spattn-bench.
. "$(dirname "$0")/lib.sh" && ab_unpack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$OUT/raw/clocks.csv" 2>/dev/null &
CLK=$!
M=dense,a_shape,vertical_slash,block_sparse
export AB_BENCH_S=25
B128="--block_m=128 --block_sparse.block_size=128 --block_sparse.top_k=50"
for r in 1 2; do
  ab_bench bm64 32768 7 16 $M
  AB_BENCH_FLAGS="$B128" ab_bench bm128 32768 7 16 $M
done
kill $CLK 2>/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SEC="--section WarpStateStats --section SpeedOfLight --section InstructionStats --section ComputeWorkloadAnalysis"
prof() {  # name flags...
  local n=$1; shift
  timeout 30 $NCU --clock-control none -k regex:PersistentFa3 --launch-skip 1 --launch-count 1 $SEC \
    -o "$W/$n" -f bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --warmup=1 --repeat=1 \
    --seq_len=32768 --methods=a_shape "$@" > "$OUT/raw/ncu_${n}_log.txt" 2>&1
  ab_note "ncu $n rc=$?"
  timeout 10 $NCU --import "$W/$n.ncu-rep" --print-details all > "$OUT/raw/ncu_$n.txt" 2>&1
  grep -E 'SM Active Cycles|Executed Ipc Active|Issue Slots Busy|Compute \(SM\) Throughput|Duration|Registers Per|Block Size|Grid Size' "$OUT/raw/ncu_$n.txt" | tr -s ' ' | sed "s/^/ncu $n:/" >> "$OUT/summary.txt"
}
[ "$SECONDS" -lt 45 ] && prof a64
[ "$SECONDS" -lt 60 ] && prof a128 --block_m=128
python3 - "$OUT"/raw/bench_bm64.jsonl "$OUT"/raw/bench_bm128.jsonl <<'PY' | tee "$OUT/table.txt"
import json, sys, collections
v = collections.defaultdict(list)
for fn in sys.argv[1:]:
    arm = fn.rsplit("bench_", 1)[1][:-6]
    for l in open(fn):
        try: r = json.loads(l)
        except ValueError: continue
        if "tflops" in r: v[(r["method"], arm)].append((r["tflops"], r.get("vs_dense", 0), r["kernel_ms"], r.get("pairs"), r.get("recall", 0), r.get("density", 0)))
for k in sorted(v):
    x = v[k]
    print("%-15s %-6s tflops %s vs_dense %s kernel_ms %s pairs %s recall %s density %s" % (k[0], k[1],
          " ".join("%.0f" % a[0] for a in x), " ".join("%.3f" % a[1] for a in x),
          " ".join("%.3f" % a[2] for a in x), sorted({a[3] for a in x}),
          sorted({round(a[4], 4) for a in x}), sorted({round(a[5], 4) for a in x})))
PY
ab_finish
