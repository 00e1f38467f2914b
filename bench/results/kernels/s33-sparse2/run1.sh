#!/usr/bin/env bash
# s33-sparse2 call 1 (this branch's binaries; SPATTN_HOPPER_PD_PROBE=0 is main 8cfc259's path):
#  pd32 / pd128: cuda_bench dense lines, variants 5 (dense kernel) and 6 (the persistent dense
#    kernel), knob sets (all at CAUSAL_BN=128: v5 at 128-key tiles): base, p2 (sleeping producer),
#    p4 (L2-section order), p16 (descriptors from addresses, (d)), p32 (diagonal tile first, (e)),
#    p48 (both), interleaved rounds; 32K 3 rounds, 128K 2 rounds (p2 / p4 alone there: (f)).
#  ncu (clocks unlocked) of variant 6 at 32K: base and the probe with the best 32K v6 time.
#  attention_cuda_test, all tests, in 6 shards at once.
. "$(dirname "$0")/lib.sh" && ab_unpack
O=$OUT/raw
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
B=bin/cuda_bench
T=bin/attention_cuda_test
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --block_ms=128"
P=SPATTN_HOPPER_PD_PROBE
BN=SPATTN_HOPPER_CAUSAL_BN=128
KS="--knob_sets=base:$BN;p2:$BN+$P=2;p4:$BN+$P=4;p16:$BN+$P=16;p32:$BN+$P=32;p48:$BN+$P=48"
timeout 60 $B $C --variants=5,6 --sparse_variants= --seq_lens=32768 --iters=10 --warmup=3 --workspace_mb=2048 --range_densities= --col_densities= --sampled_lines=0 --rounds=3 "$KS" --tag=pd32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
ab_note "pd32 rc=$?"
KS128="--knob_sets=base:$BN;p2:$BN+$P=2;p4:$BN+$P=4;p16:$BN+$P=16;p32:$BN+$P=32"
timeout 80 $B $C --variants=5,6 --sparse_variants= --seq_lens=131072 --iters=3 --warmup=1 --workspace_mb=2048 --range_densities= --col_densities= --sampled_lines=0 --rounds=2 "$KS128" --tag=pd128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
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
PY
# The probe whose 32K v6 summed ms is lowest (ncu'd next to base).
BEST=$(python3 - "$O/bench.jsonl" <<'PY'
import json, sys, collections
t = collections.defaultdict(float)
for l in open(sys.argv[1]):
    if not l.startswith("{") or '"ms"' not in l: continue
    r = json.loads(l); tag, s = r["tag"].split("/")
    if tag == "pd32" and "ersist" in r["kernel"] and s != "base": t[s] += r["ms"]
print(min(t, key=t.get)[1:] if t else 16)
PY
)
ab_note "best probe at 32K: $BEST"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=1 --warmup=0 --col_densities= --sampled_lines=0 --workspace_mb=2048 --variants=6 --sparse_variants= --block_ms= --range_densities="
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section InstructionStats"
prof() {  # name probe
  env $P=$2 timeout 40 $NCU --clock-control none -k regex:PersistentFa3Kernel --launch-count 1 $SEC -o "$W/$1" -f $B $S --tag=ncu > "$O/ncu_${1}_log.txt" 2>&1
  ab_note "ncu $1 rc=$?"
  timeout 10 $NCU --import "$W/$1.ncu-rep" --print-details all > "$O/ncu_$1.txt" 2>&1
  timeout 15 $NCU --import "$W/$1.ncu-rep" --page source --csv --print-source sass > "$W/sass_$1.csv" 2>&1
  xz -4 -T4 -c "$W/sass_$1.csv" > "$O/sass_$1.csv.xz"
}
prof pd0 0
prof pd$BEST $BEST
G1='*LongContexts*'
G2='*DenseKernelMatchesReference*'
G3='*DenseOneGroupSections*'
G4='*PersistentDenseProbes*:*SparseKernelWithDenseIndex*'
G5='*SparsePackTails*:*SparseEarlyDesc*:*SparseTmaStore*:*SparseTimeline*'
ab_test t1 100 $T --gtest_filter="$G1" &
ab_test t2 100 $T --gtest_filter="$G2" &
ab_test t3 100 $T --gtest_filter="$G3" &
ab_test t4 100 $T --gtest_filter="$G4" &
ab_test t5 100 $T --gtest_filter="$G5" &
ab_test t6 100 $T --gtest_filter="-$G1:$G2:$G3:$G4:$G5" &
wait
ab_note "tests: $(cat $O/test_t*.log | grep -cE '^\[       OK \]') OK, $(cat $O/test_t*.log | grep -cE '^\[  FAILED  \] [A-Z]') FAILED"
grep -hE '^\[ +(OK|FAILED) ' "$O"/test_t*.log | sort | uniq -c | sort -rn | head -40 >> "$OUT/summary.txt"
ab_finish
