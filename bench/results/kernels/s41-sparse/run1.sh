#!/usr/bin/env bash
# s41-sparse device call: is the block_m 64 sparse stream bound by its K/V tiles' bytes or by the
# consumer's step? SPATTN_HOPPER_DIAG_NO_KV (diagnostic, wrong output): 1 = range tiles' V not
# loaded, 2 = neither K nor V (the producer arrives without the copy; gathered tiles still load).
# The pair-step tests at the default first. One binary, one process a cell, alternating: 32K off / 1 / 2 x2, 128K off / 1 / 2 x1 (dense +
# the three range methods at block_m 64), a block_m 128 control at 32K (off / 2), then ncu of the
# default (SpeedOfLight, memory and compute workload) at 32K.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=${AB_STOP_AFTER:-150}
ab_test pair 60 bin/attention_cuda_test --gtest_filter='*PairStep*'
M=dense,a_shape,vertical_slash,block_sparse
K=SPATTN_HOPPER_DIAG_NO_KV
for r in 1 2; do
  ab_bench off 32768 7 16 $M $K=0
  ab_bench v 32768 7 16 $M $K=1
  ab_bench kv 32768 7 16 $M $K=2
done
AB_BENCH_S=40 ab_bench kv 131072 3 4 $M $K=2
AB_BENCH_S=40 ab_bench off 131072 3 4 $M $K=0
AB_BENCH_S=40 ab_bench v 131072 3 4 $M $K=1
AB_BENCH_FLAGS=--block_m=128 ab_bench off128 32768 7 16 dense,a_shape,vertical_slash $K=0
AB_BENCH_FLAGS=--block_m=128 ab_bench kv128 32768 7 16 dense,a_shape,vertical_slash $K=2
if [ "$SECONDS" -lt 130 ]; then
  timeout 60 ncu --clock-control none -k 'regex:PersistentFa3|DenseFa3' --launch-count 10 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
    --dtype=bf16 --group_by=all --recall_rows=4 --warmup=0 --repeat=1 --seq_len=32768 \
    --methods=$M > "$OUT/ncu.txt" 2> "$OUT/raw/ncu.err"
  ab_note "ncu rc=$?"
  grep -E 'Fa3Kernel|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Duration|L2 Hit Rate|Memory Throughput|Executed Ipc A|Issue Slots Busy' \
    "$OUT/ncu.txt" | cut -c1-160 >> "$OUT/summary.txt"
fi
ab_finish
