#!/usr/bin/env bash
# s34-prep-sparse call 1 (branch s34-prep-sparse's binaries; SPATTN_HOPPER_PD_PROBE=0 is main's
# path): the dense persistent kernel (variant 6) with its tiles computed by the consumers from
# their own count (PD_PROBE bit 64, kFlagRingTiles: no TileDesc read at the step's start).
#  pd32: cuda_bench variants 5 (dense kernel) and 6, all sets at CAUSAL_BN=128 (v5 at 128-key
#    tiles): base, p64 (ring tiles), p80 (ring tiles + per-wgmma descriptors from addresses,
#    the dense kernel's step the closest), 3 interleaved rounds (iters 10).
#  pd128: the same at 128K with the L2-section order (bit 4) in both arms: p4, p68; 2 rounds.
#  ncu (clocks unlocked, one launch) of variant 6 at 32K: pd0 and pd64 (SASS CSVs for s32's
#    regions_all.py).
#  attention_cuda_test, all tests but the dense kernel's (t1-t3), in 3 shards at once.
. "$(dirname "$0")/lib.sh" && ab_unpack
O=$OUT/raw
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
B=bin/cuda_bench
T=bin/attention_cuda_test
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --block_ms=128"
P=SPATTN_HOPPER_PD_PROBE
BN=SPATTN_HOPPER_CAUSAL_BN=128
KS="--knob_sets=base:$BN;p64:$BN+$P=64;p80:$BN+$P=80"
timeout 60 $B $C --variants=5,6 --sparse_variants= --seq_lens=32768 --iters=10 --warmup=3 --workspace_mb=2048 --range_densities= --col_densities= --sampled_lines=0 --rounds=3 "$KS" --tag=pd32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
ab_note "pd32 rc=$?"
KS128="--knob_sets=p4:$BN+$P=4;p68:$BN+$P=68"
timeout 60 $B $C --variants=5,6 --sparse_variants= --seq_lens=131072 --iters=3 --warmup=1 --workspace_mb=2048 --range_densities= --col_densities= --sampled_lines=0 --rounds=2 "$KS128" --tag=pd128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
ab_note "pd128 rc=$?"
kill $CLK 2>/dev/null
python3 - "$O/bench.jsonl" <<'PY' | tee "$OUT/table.txt"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"ms"' in l]
ms = collections.defaultdict(list)
for r in rows:
    tag, s = r["tag"].split("/")
    ms[(tag, r["kernel"], r.get("density"), s)].append((r["ms"], r["tflops"]))
for k in sorted(ms):
    v = ms[k]
    print("%-6s %-24s %-7s %-5s ms %s  tflops %s" % (k[0], k[1], k[2], k[3],
          " ".join("%.3f" % a for a, b in v), " ".join("%.0f" % b for a, b in v)))
# v6 over the base set (32K: base, 128K: p4) by summed median ms, and v6 / v5 per set.
tot = collections.defaultdict(float)
for (tag, kern, dens, s), v in ms.items():
    tot[(tag, "v6" if "persist" in kern else "v5", s)] += sum(a for a, b in v)
for tag, base in (("pd32", "base"), ("pd128", "p4")):
    for s in sorted({k[2] for k in tot if k[0] == tag}):
        b6, b5 = tot.get((tag, "v6", base)), tot.get((tag, "v5", s))
        x6 = tot.get((tag, "v6", s))
        if b6 and x6 and b5:
            print("%-6s %-5s v6 vs %s %.3f   v6/v5 %.3f" % (tag, s, base, b6 / x6, b5 / x6))
PY
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=1 --warmup=0 --col_densities= --sampled_lines=0 --workspace_mb=2048 --variants=6 --sparse_variants= --block_ms= --range_densities="
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section InstructionStats"
prof() {  # name probe
  env $P=$2 timeout 40 $NCU --clock-control none -k regex:PersistentFa3Kernel --launch-count 1 $SEC -o "$W/$1" -f $B $S --tag=ncu > "$O/ncu_${1}_log.txt" 2>&1
  ab_note "ncu $1 rc=$?"
  timeout 10 $NCU --import "$W/$1.ncu-rep" --print-details all > "$O/ncu_$1.txt" 2>&1
  timeout 15 $NCU --import "$W/$1.ncu-rep" --page source --csv --print-source sass > "$W/sass_$1.csv" 2>&1
  xz -4 -T4 -c "$W/sass_$1.csv" > "$O/sass_$1.csv.xz"
  grep -E 'SM Active Cycles|Compute \(SM\) Throughput|Executed Ipc Active' "$O/ncu_$1.txt" | head -3 | tr -s ' ' | sed "s/^/ncu $1:/" >> "$OUT/summary.txt"
}
prof pd0 0
prof pd64 64
G1='*LongContexts*'
G2='*DenseKernelMatchesReference*'
G3='*DenseOneGroupSections*'
G4='*PersistentDenseProbes*:*SparseKernelWithDenseIndex*'
G5='*SparsePackTails*:*SparseEarlyDesc*:*SparseTmaStore*:*SparseTimeline*'
# (s34-sparse: t1-t3 -- the dense kernel's own tests, code untouched here -- left out to keep
# the call inside the share.)
ab_test t4 120 $T --gtest_filter="$G4" &
ab_test t5 120 $T --gtest_filter="$G5" &
ab_test t6 120 $T --gtest_filter="-$G1:$G2:$G3:$G4:$G5" &
wait
ab_note "tests: $(cat $O/test_t*.log | grep -cE '^\[       OK \]') OK, $(cat $O/test_t*.log | grep -cE '^\[  FAILED  \] [A-Z]') FAILED"
grep -hE '^\[ +(OK|FAILED) ' "$O"/test_t*.log | sort | uniq -c | sort -rn | head -40 >> "$OUT/summary.txt"
ab_finish
