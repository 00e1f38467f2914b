#!/usr/bin/env bash
# s18-sldensity run2 (on the GPU machine, bundle of pack.sh): spattn-bench --device=cuda
# --methods=sampled_lines at 128K and 32K, llm_mix 32/8 heads d 128 bf16, per head kind, 256 recall
# rows per head, (diagonal floor, gamma) = (3, 0.95), (3.5, 0.95), (4, 0.955) (run1 has the oracle
# and floors 2/4/5 at gamma 0.95: recall 0.948 at 128K with floor 4).
set -u
cd "$(dirname "$0")"
WORK=/tmp/s18sld && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf bundle.tar.xz -C "$WORK"
cd "$WORK"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
for len in 131072 32768; do
  for v in ${VARIANTS:-3:0.95 3.5:0.95 4:0.955}; do
    floor=${v%:*} gamma=${v#*:}
    timeout 60 bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
      --head_dim=128 --dtype=bf16 --group_by=kind --recall_rows=256 --seq_len=$len \
      --warmup=1 --repeat=3 --methods=sampled_lines --sampled_lines.gamma=$gamma \
      --sampled_lines.diagonal_floor=$floor \
      > "$OUT/bench_f${floor}_g${gamma}_$len.jsonl" 2> "$OUT/bench_f${floor}_g${gamma}_$len.err"
    note "bench floor $floor gamma $gamma $len rc=$?"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    for line in open(f):
        r = json.loads(line)
        if "error" in r:
            print(tag, "ERROR", r["error"][:200]); continue
        print("%-22s %-15s index %7.2f kernel %7.2f density %.4f recall %.4f min_row %.3f %s" %
              (tag, r["group"], r["index_build_ms"], r["kernel_ms"], r["density"], r["recall"],
               r["recall_min"], r["device"]))
PY
