#!/usr/bin/env bash
# s35-sa run 1: sample_attention's one pass with its two warpgroups out of phase (SPATTN_SA_PING),
# the kernels after it by programmatic dependent launch (SPATTN_SA_PDL), the combine's loads four
# spans at a time (SPATTN_SA_COMB); all default on, =0 is main's path in the same binary.
#  1. build_index_gpu_test: the sample_attention cases + DependentLaunchAndBatchedCombineBuildMainsIndex
#     + OutOfPhaseWarpgroupsBuildMainsIndex.
#  2. spattn-bench sample_attention 32K, base (main b18b37e's code) vs new, one process per cell,
#     alternating: NP x3 each, PROFILE x3 each; new with one knob off (PROFILE: PING=0 x2, COMB=0;
#     NP: PDL=0);
#     128K NP once each.
#  3. ncu on the one pass (SaPassKernel, wgmma) at 32K: where its time goes (for the next session).
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 60 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*'
grep -hE "indexes compared|rows differ" "$OUT/raw/test_sa.log" | tail -6 | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3; do
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
  ab_bench base 32768 7 16 $M $P
  ab_bench new 32768 7 16 $M $P
done
ab_bench newPing0 32768 7 16 $M $P SPATTN_SA_PING=0
ab_bench newC0 32768 7 16 $M $P SPATTN_SA_COMB=0
ab_bench newPing0 32768 7 16 $M $P SPATTN_SA_PING=0
ab_bench newPdl0NP 32768 7 16 $M SPATTN_SA_PDL=0
ab_bench baseNP 131072 3 4 $M X=1
ab_bench newNP 131072 3 4 $M X=1
for v in base new newPing0 newC0; do
  echo "$v host lines (launch / wait / post / upload-done / prep us):" >> "$OUT/summary.txt"
  grep -h "sample_attention host" "$OUT/raw/bench_$v.err" 2>/dev/null |
    awk '$4 < 1000 {l+=$4; w+=$7; p+=$10; u+=$13; q+=$16; n++} END {if (n) printf "  n=%d launch %.1f wait %.1f post %.1f upload %.1f prep %.1f\n", n, l/n, w/n, p/n, u/n, q/n}' >> "$OUT/summary.txt"
done
if [ "$SECONDS" -lt "${NCU_BEFORE:-90}" ]; then
  timeout "${NCU_S:-25}" ncu --clock-control none --kernel-name regex:SaPassKernel --launch-skip 0 \
    --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
    --section SourceCounters bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 \
    --repeat=1 --seq_len=32768 --methods=$M > "$OUT/ncu_pass1.txt" 2>&1
  ab_note "ncu pass1 rc=$?"
fi
ab_finish
