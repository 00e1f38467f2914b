#!/usr/bin/env bash
# s35-saap run 1: the classifier's per-item RoPE table (SPATTN_SAAP_CLS_ROPE_TABLE, default on)
# against main b18b37e (base = main 2b8ae7e's prebuilt spattn-bench, same sm_90a code).
# (1) build_index_gpu_test '*Saap*:*/saap' (this branch: RopeTablePerItemBuildsThePerHeadIndex,
# the wgmma twin, the packed test, MatchesCpuOnPlantedClusters, the */saap cases); (2) Saap's
# build stages, base and new alternating, one process per cell: 32K x2 each, 128K x1 each; (3) if
# time is left, ncu of the new SaapClassifyKernel with source counters (where the stalls are).
# Bundle: kernels/cuda/bench/device_ab/pack.sh (DEST=/work/main/.device/s35-saap), carry
# ".device/s35-saap", device command: bash .device/s35-saap/run1.sh
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test saap 90 bin/build_index_gpu_test --gtest_filter='*Saap*:*/saap'
grep -h "compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
export AB_STOP_AFTER=${AB_STOP_AFTER:-150}
P=SPATTN_GPU_BUILDER_PROFILE=1
ab_bench base 32768 7 16 saap $P
ab_bench new 32768 7 16 saap $P
ab_bench base 131072 3 4 saap $P
ab_bench new 131072 3 4 saap $P
ab_bench base 32768 7 16 saap $P
ab_bench new 32768 7 16 saap $P
# Same index at scale: the bench's fingerprints, new against base.
python3 - "$OUT/raw" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
keys = ["pairs", "index_ranges", "index_cols", "density", "recall", "recall_min"]
def load(v):
    out = []
    try:
        for line in open(f"{sys.argv[1]}/bench_{v}.jsonl"):
            try: out.append(json.loads(line))
            except Exception: pass
    except OSError: pass
    return out
base = {}
for r in load("base"): base.setdefault(r.get("seq_len"), r)
for r in load("new") + load("base"):
    b = base.get(r.get("seq_len"))
    diff = [k for k in keys if b is None or r.get(k) != b.get(k)]
    print("seq_len", r.get("seq_len"), "fingerprint vs first base:", "equal" if not diff else "DIFFERS " + ",".join(diff),
          {k: r.get(k) for k in keys}, "build %.3f kernel %.3f" % (r.get("index_build_ms", -1), r.get("kernel_ms", -1)))
PY
if [ "$SECONDS" -lt "${NCU_BEFORE:-150}" ] && command -v ncu > /dev/null; then
  timeout 50 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section SourceCounters --section InstructionStats -k regex:SaapClassify -c 1 \
    --export "$OUT/raw/ncu_new" bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 \
    --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=4 --warmup=0 --repeat=1 \
    --seq_len=32768 --methods=saap $AB_BENCH_FLAGS > "$OUT/raw/ncu_new.txt" 2>&1
  ab_note "ncu new rc=$?"
  [ -f "$OUT/raw/ncu_new.ncu-rep" ] && timeout 20 ncu --import "$OUT/raw/ncu_new.ncu-rep" --page source \
    --print-source sass --csv > "$OUT/raw/ncu_new_sass.csv" 2>&1
  ab_note "ncu sass rc=$?"
fi
ab_finish
