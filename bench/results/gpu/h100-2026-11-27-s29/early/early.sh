#!/usr/bin/env bash
# Session 29, the lead's early call (main 0685884, bundle by tests/gpu/pack.sh .gpu-early): the
# recall estimate's overflow fix on a GPU (mass_recall_test; the guarded path with the
# sampled_lines-only search at 1M keys, which failed in session 28's call 2 with an illegal memory
# access), then where sampled_lines' 1M build goes (322.8 ms in session 27; PROFILE stage
# medians, 128-row blocks). cuDNN's chunk is not rerun here (1820.6 ms in session 28's call 2).
set -u
cd "$(dirname "$0")"
W=/tmp/spattn_gpu_early && rm -rf $W && mkdir -p $W && tar -xJf bundle.tar.xz -C $W
cp builder_stages.py $W/
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
cd $W && export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s29early_t && mkdir -p $TEST_TMPDIR
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
timeout 60 bin/mass_recall_test > "$OUT/mass_recall_test.log" 2>&1
note "mass_recall_test rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/mass_recall_test.log" | tr '\n' ' ')"
C1M="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=32 --seq_len=1048576 --q_len=65536 --warmup=1 --repeat=2
  --gpu_workspace_bytes=51539607552"
timeout 170 bin/spattn-bench $C1M --search_len=16384 --search_target_recall=0.95 --methods=guarded \
  --search_candidates=sampled_lines --search_sampled_lines_margin=0.01 \
  --guard_adaptive=sampled_lines,flex_prefill 2> "$OUT/guarded_sl.err" \
  | sed -E 's/"method":"guarded"/"method":"guarded_sl"/' > "$OUT/guarded_sl.jsonl"
note "guarded_sl 1M rc=${PIPESTATUS[0]}"
if [ "$SECONDS" -lt "${CUT:-200}" ]; then
  SPATTN_GPU_BUILDER_PROFILE=1 timeout 120 bin/spattn-bench $C1M --methods=sampled_lines \
    --block_m=128 > "$OUT/sl1m.jsonl" 2> "$OUT/sl1m.err"
  note "sampled_lines bm128 1M PROFILE rc=$?"
  python3 builder_stages.py sl1m="$OUT/sl1m" | tee -a "$OUT/summary.txt"
fi
/usr/bin/env python3 - "$OUT"/guarded_sl.jsonl "$OUT"/sl1m.jsonl <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for p in sys.argv[1:]:
    try: lines = open(p).read().splitlines()
    except OSError: continue
    for l in lines:
        try: d = json.loads(l)
        except Exception: continue
        if "error" in d:
            print(f"{d['method']:14s} {d['seq_len']}/{d.get('q_len')}: error {d['error']}"); continue
        print(f"{d['method']:14s} {d['seq_len']}/{d.get('q_len')}: index {d['index_build_ms']:.2f} kernel "
              f"{d['kernel_ms']:.2f} density {d['density']:.4f} recall {d['recall']:.4f} head min "
              f"{d.get('recall_head_min', 0):.4f} cols {d.get('index_cols')}")
PY
