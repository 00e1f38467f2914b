#!/usr/bin/env bash
# CPU cell: sampled_lines alone, llm_mix seed 0, 32/8 heads d128 bf16, 128-row blocks, 256 recall rows, 2 threads.
len=$1; gamma=$2
cd /tmp/s23cpu
LD_LIBRARY_PATH=$PWD/b/lib /usr/bin/time -f "%e s" nice -n 5 b/bin/spattn-bench --device=cpu --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
  --group_by=all --recall_rows=256 --seq_len=$len --block_m=128 --warmup=0 --repeat=1 --threads=2 \
  --methods=sampled_lines --search_target_recall=$gamma --sampled_lines.gamma=$gamma > sl_${len}_g${gamma}.jsonl 2> sl_${len}_g${gamma}.err
