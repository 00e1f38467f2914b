#!/usr/bin/env bash
# s34-saap run 1: the classifier in CTA clusters of 2 / 4 (SPATTN_SAAP_CLS_CLUSTER=2 / 4, variants
# new2 / new4) against main 384f218 (base).
# (1) build_index_gpu_test '*Saap*:*/saap' (this branch's binary: the clusters test, the wgmma
# twin, the packed test, MatchesCpuOnPlantedClusters, the */saap cases); (2) Saap's build stages,
# base (main's spattn-bench) and new2 / new4 (this branch, knob 2 / 4) alternating, one process
# per cell: 32K x2 each, 128K x1 each; (3) if time is left, ncu of SaapClassifyKernel base / new2.
# Bundle: kernels/cuda/bench/device_ab/pack.sh (DEST=/work/main/.device/s34-saap), carry
# ".device/s34-saap", device command: bash .device/s34-saap/run1.sh
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test saap 60 bin/build_index_gpu_test --gtest_filter='*Saap*:*/saap'
grep -h "compared" "$OUT/raw/test_saap.log" | tee -a "$OUT/summary.txt"
export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
export AB_STOP_AFTER=${AB_STOP_AFTER:-140}
P=SPATTN_GPU_BUILDER_PROFILE=1
NEW=SPATTN_SAAP_CLS_CLUSTER=2
# The brief's cells first (32K x2, 128K x1 of base and new2), new4's second cells last.
ab_bench base 32768 7 16 saap $P
ab_bench new2 32768 7 16 saap $P SPATTN_SAAP_CLS_CLUSTER=2
ab_bench new4 32768 7 16 saap $P SPATTN_SAAP_CLS_CLUSTER=4
ab_bench base 131072 3 4 saap $P
ab_bench new2 131072 3 4 saap $P SPATTN_SAAP_CLS_CLUSTER=2
ab_bench base 32768 7 16 saap $P
ab_bench new2 32768 7 16 saap $P SPATTN_SAAP_CLS_CLUSTER=2
ab_bench new4 131072 3 4 saap $P SPATTN_SAAP_CLS_CLUSTER=4
ab_bench new4 32768 7 16 saap $P SPATTN_SAAP_CLS_CLUSTER=4
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
for r in load("new2") + load("new4") + load("base"):
    b = base.get(r.get("seq_len"))
    diff = [k for k in keys if b is None or r.get(k) != b.get(k)]
    print("seq_len", r.get("seq_len"), "fingerprint vs first base:", "equal" if not diff else "DIFFERS " + ",".join(diff),
          {k: r.get(k) for k in keys}, "build %.3f kernel %.3f" % (r.get("index_build_ms", -1), r.get("kernel_ms", -1)))
PY
if [ "$SECONDS" -lt "${NCU_BEFORE:-120}" ] && command -v ncu > /dev/null; then
  for v in base new2; do
    bin=bin/spattn-bench; envv=$NEW; [ $v = base ] && { bin=bin/spattn-bench-base; envv=X=1; }
    timeout 60 env $envv ncu --section MemoryWorkloadAnalysis --section SpeedOfLight --section Occupancy \
      --section LaunchStats -k regex:SaapClassify -c 1 $bin --device=cuda --workload=llm_mix --heads=32 \
      --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=4 --warmup=0 --repeat=1 \
      --seq_len=32768 --methods=saap $AB_BENCH_FLAGS > "$OUT/raw/ncu_$v.txt" 2>&1
    ab_note "ncu $v rc=$?"
  done
fi
ab_finish
