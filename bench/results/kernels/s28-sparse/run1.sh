#!/usr/bin/env bash
# s28-sparse call 1 (main 4fe01c0's binaries only): is the sparse kernel's item change bound by
# bandwidth? ncu (locked base clock) of the sparse kernel on 32K block_m 128 ranges 0.069 / 0.11
# and 128K ranges 0.033 vs the dense kernel at 32K; the schedule's L2 knobs A/B in one process
# (sections off: SPATTN_HOPPER_L2_MB=0; block-major order: SPATTN_HOPPER_ORDER=1); the
# timeline of 32K ranges 0.069 (period per tiles-per-item bucket).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s28sp1 && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cp sparse_timeline.py "$WORK/"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
note "ncu=$NCU"
B=bin/base/cuda_bench
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5 --block_ms=128 --col_densities="
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy"
MET="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__average_gcomp_input_sector_success_rate.pct,sm__inst_executed_pipe_tensor.sum"
prof() {  # name, timeout, ncu args...
  local name=$1 to=$2; shift 2
  echo "=== $name" >> "$O/ncu.txt"
  timeout $to "$NCU" --clock-control base $SEC --metrics "$MET" "$@" >> "$O/ncu.txt" 2>&1
  note "ncu $name rc=$?"
}
if [ -n "$NCU" ]; then
  prof sparse32k 60 -k regex:PersistentFa3Kernel --launch-count 4 $B $S --seq_lens=32768 --range_densities=0.03,0.1 --iters=1 --warmup=1 --tag=ncu
  prof dense32k 60 -k regex:DenseFa3Kernel --launch-skip 1 --launch-count 1 $B $S --seq_lens=32768 --sparse_variants= --block_ms= --iters=1 --warmup=1 --tag=ncu
  prof sparse128k 80 -k regex:PersistentFa3Kernel --launch-count 1 $B $S --seq_lens=131072 --range_densities=0.03 --iters=1 --warmup=0 --workspace_mb=8192 --tag=ncu
fi
KS="--knob_sets=def:;nosec:SPATTN_HOPPER_L2_MB=0;ord1:SPATTN_HOPPER_ORDER=1"
timeout 40 $B $S --seq_lens=32768 --range_densities=0.03,0.1 --sampled_lines=0.95 --iters=3 --warmup=1 --sparse_knobs=1 --rounds=2 "$KS" --index_stats=1 --tag=ab32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab32 rc=$?"
timeout 60 $B $S --seq_lens=131072 --range_densities=0.03 --iters=2 --warmup=1 --workspace_mb=8192 --sparse_knobs=1 --rounds=1 "$KS" --index_stats=1 --tag=ab128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab128 rc=$?"
T=$O/trace.jsonl
timeout 30 $B $S --seq_lens=32768 --range_densities=0.03,0.1 --iters=1 --warmup=1 --sparse_knobs=1 "--knob_sets=tl:SPATTN_HOPPER_TRACE=$T" --tag=tl >> "$O/timeline_bench.jsonl" 2>> "$O/errors.log"
note "timeline rc=$? $(wc -c < "$T") bytes"
python3 sparse_timeline.py "$T" > "$O/timeline.txt" 2>> "$O/errors.log"
python3 - "$T" > "$O/tiles_buckets.txt" 2>> "$O/errors.log" <<'PY'
# Per dump: items by tiles bucket, the median item period (first S -> next first S) per bucket,
# and the share of all consumer time (sum of periods) each bucket takes.
import json, sys, collections
dumps = []; cur = None
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "trace" in r: cur = (r, []); dumps.append(cur); continue
    cur[1].append(r)
for head, recs in dumps:
    by = collections.defaultdict(list)
    for r in recs: by[r["c"]].append(r)
    B = collections.defaultdict(list)
    for c, rs in by.items():
        rs.sort(key=lambda r: r["n"])
        for i in range(len(rs) - 1):
            if rs[i]["q"][3] >= 0 and rs[i + 1]["q"][3] >= 0:
                B[rs[i]["tiles"]].append(rs[i + 1]["q"][3] - rs[i]["q"][3])
    tot = sum(sum(v) for v in B.values()); n = sum(len(v) for v in B.values())
    print(head.get("trace"), "items", n, "cycles", tot)
    for lo, hi in ((1, 1), (2, 2), (3, 3), (4, 5), (6, 8), (9, 12), (13, 20), (21, 40), (41, 10**9)):
        v = [p for t in range(lo, min(hi, 4096) + 1) for p in B.get(t, [])]
        if not v: continue
        v.sort(); ts = [t for t in range(lo, min(hi, 4096) + 1) for _ in B.get(t, [])]
        print("  tiles %d-%d: items %d (%.1f%%) time %.1f%% median period %d cycles, %.0f / tile" % (
            lo, hi, len(v), 100.0 * len(v) / n, 100.0 * sum(v) / tot, v[len(v) // 2], sum(v) / max(sum(ts), 1)))
PY
rm -f "$T"
python3 - "$O/bench.jsonl" "$O/timeline_bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if r["kernel"] == "index_stats": continue
        R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"]].append((r["tflops"], r.get("vs_dense", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x for x in v)) for t, v in sorted(R[k].items())))
PY
grep -E "^===|==PROF== Profiling|PersistentFa3Kernel|DenseFa3Kernel|Duration|SM Frequency|gpu__time|lts__|dram__|l1tex__m|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Max Bandwidth|L2 Cache Throughput|Mem Busy|Mem Pipes|Stall|Warp Cycles Per Issued|Compute \(SM\)" "$O/ncu.txt" > "$O/ncu_short.txt"
tar -cf "${OUT:-/tmp/out}/run1.tar" -C "$O" . && cp "$O/summary.txt" "$O/ncu_short.txt" "$O/tiles_buckets.txt" "$O/timeline.txt" "${OUT:-/tmp/out}/" 2>/dev/null
cat "$O/ncu_short.txt" | head -150
cat "$O/tiles_buckets.txt"
