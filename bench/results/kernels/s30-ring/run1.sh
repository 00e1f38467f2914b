#!/usr/bin/env bash
# s30-ring call 1: the sparse stream's deeper K/V ring (PersistTraits::kKStages). New build:
# default k3 = 3 K slots + 2 V slots; SPATTN_HOPPER_SPARSE_KSLOTS=2 (k2) = the 2 + 2 ring of
# 1abaa94 / e9c159b; SPATTN_HOPPER_SPARSE_VSLOTS=3 (v3) = 2 K + 3 V slots. Benches first on a
# quiet GPU: in-process A/B k3 / k2 / v3 (32K block_m 128, 5 cells, 2 interleaved rounds; 128K
# ranges 0.03 / 0.1, 1 round), base (1abaa94's binary) / new (default) one process each at 32K
# block_m 128. Then ncu (SpeedOfLight + L2 sectors read by the SMs) of the sparse kernel at 32K
# (dense index, ranges 0.069), k3 / k2 / v3. Then every attention GPU test (gtest shards in
# parallel), and the sparse subset under SPATTN_HOPPER_PACK_TAILS=1 (tests/gpu/run.sh's filter).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s30ring && rm -rf "$WORK" && mkdir -p "$WORK/o" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK" && export LD_LIBRARY_PATH=$PWD/lib
O=$WORK/o
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -l 1 > "$O/clocks.csv" 2>/dev/null &
CLK=$!
C="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --variants=5 --sparse_variants=5"
C32="$C --seq_lens=32768 --iters=3 --warmup=1 --workspace_mb=4096 --range_densities=0.03,0.1 --col_densities=0.05 --sampled_lines=0.95"
KS="--knob_sets=k3:;k2:SPATTN_HOPPER_SPARSE_KSLOTS=2;v3:SPATTN_HOPPER_SPARSE_VSLOTS=3"
timeout 40 bin/cuda_bench $C32 --block_ms=128 --sparse_knobs=1 --rounds=2 "$KS" --tag=ab32 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab32 rc=$?"
timeout 40 bin/cuda_bench $C --seq_lens=131072 --iters=2 --warmup=1 --workspace_mb=2048 --range_densities=0.03,0.1 --col_densities= --sampled_lines=0 --block_ms=128 --sparse_knobs=1 --rounds=1 "$KS" --tag=ab128 >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "ab128 rc=$?"
timeout 25 bin/base/cuda_bench $C32 --block_ms=128 --tag=base >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "base32 rc=$?"
timeout 25 bin/cuda_bench $C32 --block_ms=128 --tag=new >> "$O/bench.jsonl" 2>> "$O/errors.log"
note "new32 rc=$?"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S="--kv_heads=8 --head_dim=128 --causal=1 --dtype=bf16 --seq_lens=32768 --iters=1 --warmup=0 --col_densities= --sampled_lines=0 --workspace_mb=2048 --variants=5 --sparse_variants=5 --block_ms=128 --range_densities=0.03"
M="gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_bytes.sum,sm__inst_executed_pipe_tensor.sum,smsp__inst_executed.sum"
for v in k3: k2:SPATTN_HOPPER_SPARSE_KSLOTS=2 v3:SPATTN_HOPPER_SPARSE_VSLOTS=3; do
  n=${v%%:*}; e=${v#*:}
  env $e timeout 30 $NCU --clock-control none -k regex:PersistentFa3Kernel --launch-count 2 --section SpeedOfLight --metrics "$M" -o "$WORK/ncu_$n" -f \
    bin/cuda_bench $S --tag=ncu_$n > "$O/ncu_${n}_log.txt" 2>&1
  note "ncu $n rc=$?"
  timeout 10 $NCU --import "$WORK/ncu_$n.ncu-rep" --print-details all > "$O/ncu_$n.txt" 2>&1
done
T=bin/attention_cuda_test
F1='*Sparse*:*Columns*:*AShape*:*Nan*:*LongContexts*'
P=""
for i in 0 1 2 3 4 5; do
  mkdir -p /tmp/spt_$i
  TEST_TMPDIR=/tmp/spt_$i GTEST_TOTAL_SHARDS=6 GTEST_SHARD_INDEX=$i timeout 90 $T > "$O/tests_s$i.txt" 2>&1 &
  P="$P $!"
done
for i in 0 1 2 3; do
  mkdir -p /tmp/spp_$i
  TEST_TMPDIR=/tmp/spp_$i SPATTN_HOPPER_PACK_TAILS=1 GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 90 $T --gtest_filter="$F1" > "$O/tests_pt1_s$i.txt" 2>&1 &
  P="$P $!"
done
for p in $P; do wait $p; echo "pid rc=$?" >> "$O/summary.txt"; done
note "tests all: $(cat $O/tests_s*.txt | grep -cE '^\[       OK \]') OK, $(cat $O/tests_s*.txt | grep -cE '^\[  FAILED  \] [A-Z]') FAILED; PACK_TAILS=1: $(cat $O/tests_pt1_s*.txt | grep -cE '^\[       OK \]') OK, $(cat $O/tests_pt1_s*.txt | grep -cE '^\[  FAILED  \] [A-Z]') FAILED"
grep -hE "^\[ +(OK|FAILED) " "$O"/tests_*.txt | tee -a "$O/summary.txt"
python3 - "$O/bench.jsonl" <<'PY' | tee -a "$O/summary.txt"
import json, sys, collections
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["kernel"] == "index_stats": continue
    R[(r["seq_len"], 0 if r["kernel"].startswith("dense") else r["block_m"], r["kernel"], round(r["density"], 3))][r["tag"] + ":" + r.get("knobs", "")].append((r["tflops"], r.get("vs_dense", 0), r["ms"], r.get("ms_min", 0)))
for k in sorted(R):
    print(k, " | ".join("%s %s" % (t, " ".join("%.0f(%.2f)" % x[:2] for x in v)) for t, v in sorted(R[k].items())))
PY
kill $CLK 2>/dev/null
tar -cf "${OUT:-/tmp/out}/run1.tar" -C "$O" . && cp "$O/summary.txt" "${OUT:-/tmp/out}/"
