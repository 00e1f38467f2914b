#!/usr/bin/env bash
# Lead, session 26, second call (warm, after run.sh): guarded_sl's promise at 64K / 128K on model
# seeds 0 and 1 (two processes, 16 GiB CUDA workspace each), the sampled_lines twins under
# SPATTN_SL_SPLIT_TILES=1 and SPATTN_SL_WGMMA=0, and block_sparse's phase profile.
set -u
cd "$(dirname "$0")"
W=/tmp/spattn_gpu
[ -x $W/bin/spattn-bench ] || { rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W; }
export LD_LIBRARY_PATH=$W/lib
OUT=${OUT:-/tmp/out}; R=$OUT/call2; mkdir -p $R
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader > $R/gpu.txt
SL="--search_candidates=sampled_lines --search_sampled_lines_margin=0.01 --guard_adaptive=sampled_lines,flex_prefill"
for seed in 0 1; do
  ( cd $W && timeout ${CAP:-170} bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
      --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=128 --seq_len=16384 \
      --search_len=16384 --seed=$seed --threads=7 --methods=promise \
      --promise_targets=0.90,0.95,0.98 --promise_min_len=65536 --promise_max_len=131072 \
      --gpu_workspace_bytes=17179869184 $SL > $R/promise_s$seed.jsonl 2> $R/promise_s$seed.err
    echo "promise seed $seed rc=$? ${SECONDS}s" >> $R/summary.txt ) &
done
wait
cd $W
for env in SPATTN_SL_SPLIT_TILES=1 SPATTN_SL_WGMMA=0; do
  env $env timeout 90 bin/build_index_gpu_test --gtest_filter='*SampledLines*' > $R/twins_$env.log 2>&1
  echo "build_index_gpu_test *SampledLines* $env rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' $R/twins_$env.log | tr '\n' ' ') ${SECONDS}s" >> $R/summary.txt
done
SPATTN_GPU_BUILDER_PROFILE=1 timeout 60 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
  --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --seq_len=32768 \
  --warmup=1 --repeat=2 --methods=block_sparse > $R/bs_profile.jsonl 2> $R/bs_profile.err
echo "block_sparse profile rc=$? phases lines: $(grep -c 'block_sparse rows phases' $R/bs_profile.err) ${SECONDS}s" >> $R/summary.txt
cat $R/summary.txt
/usr/bin/env python3 - $R/promise_s0.jsonl $R/promise_s1.jsonl <<'PY'
import json, sys
print("| seed | target | seq_len | recall mean / min | heads within 0.02 | density | kept |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for path in sys.argv[1:]:
    seed = path.rsplit("_s", 1)[1].split(".")[0]
    for l in open(path):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if r.get("summary") or "seq_len" not in r: continue
        print("| %s | %.2f | %d | %.4f / %.4f | %d/%d | %.4f | %s |" % (seed, r["target"], r["seq_len"],
              r["recall_mean"], r["recall_min"], r["heads_within_0_02"], r["num_heads"], r["density"],
              "kept" if r["kept"] else "NOT kept"))
PY
(cd $OUT && tar -czf call2.tar.gz call2 && rm -rf call2)
