#!/usr/bin/env bash
# s34-saap run 2 (warm, right after run1.sh in the same lease; cwd /tmp/device_ab left by ab_unpack):
# ncu of main's SaapClassifyKernel at 32K (the bench's first classify launch). Output: run1/ncu_base_classify.txt.
cd /tmp/device_ab || exit 1
export LD_LIBRARY_PATH=$PWD/lib
timeout 40 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats -k regex:SaapClassify -c 1 bin/spattn-bench-base --device=cuda \
  --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all \
  --recall_rows=4 --warmup=0 --repeat=1 --seq_len=32768 --methods=saap --calibrate \
  --calibrate_len=3072 --calibrate_steps=3 > "$OUT/ncu_base.txt" 2>&1
