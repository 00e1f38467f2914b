#!/usr/bin/env bash
# s24-build run 1 (profile, main 9a51e16's spattn-bench only): per-stage builder times
# (SPATTN_GPU_BUILDER_PROFILE=1) of flex_prefill, sample_attention, anchor and saap at 32K, then
# an nsys timeline (CUDA API + GPU trace) of one process building flex_prefill,
# sample_attention and anchor at 32K (no stage events): kernel times vs gaps of each build.
set -u
cd "$(dirname "$0")"
W=/tmp/s24b && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  [ -f $b.patch.zst ] && $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=16"
CAL="--calibrate --calibrate_steps=3 --calibrate_len=2048"
SPATTN_GPU_BUILDER_PROFILE=1 timeout 40 bin/spattn-bench-base $C --warmup=2 --repeat=5 --seq_len=32768 \
  --methods=flex_prefill,sample_attention,anchor,saap $CAL >> "$OUT/bench_base.jsonl" 2>> "$OUT/bench_base.err"
note "profile base 32K rc=$?"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
note "nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  timeout 60 $NSYS profile -t cuda --sample=none --cpuctxsw=none -o "$W/tl" -f true \
    bin/spattn-bench-base $C --warmup=1 --repeat=2 --seq_len=32768 \
    --methods=flex_prefill,sample_attention,anchor > "$OUT/nsys_run.txt" 2>&1
  note "nsys profile rc=$?"
  $NSYS stats -q --report cuda_gpu_trace --format csv -o "$W/gpu" "$W/tl.nsys-rep" > /dev/null 2>&1
  $NSYS stats -q --report cuda_api_trace --format csv -o "$W/api" "$W/tl.nsys-rep" > /dev/null 2>&1
  ls "$W" | tee -a "$OUT/summary.txt"
  tar -czf "$OUT/nsys_csv.tgz" -C "$W" $(cd "$W" && ls *.csv)
  note "nsys stats done"
fi
python3 builder_stages.py $(for v in new base newNP baseNP; do [ -f "$OUT/bench_$v.jsonl" ] && echo "$v=$OUT/bench_$v"; done) 2>&1 | tee "$OUT/stages.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/shares.txt"
import json, sys, os
for v in ("base", "new"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-5s %-16s %7d build %7.3f kernel %8.3f share %5.2f%% density %.8f pairs_ms %s" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r.get("pairs_count_ms")))
PY
grep -h "gpu builder" "$OUT"/bench_base.err > "$OUT/stage_lines.txt"
cat "$OUT/summary.txt"
