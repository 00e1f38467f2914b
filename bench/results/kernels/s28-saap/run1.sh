#!/usr/bin/env bash
# s28-saap run 1 (H100): (b) Saap's GPU build stages, main 4fe01c0's spattn-bench,
# SPATTN_GPU_BUILDER_PROFILE=1, --methods=saap at 32K and 128K (assets from --calibrate with 5
# classifier steps: the stage times do not depend on how well it is trained); (a) this branch's
# spattn-bench on the call-2 command of session 27 (bench/results/gpu/h100-2026-11-27-s27/call2:
# the defaults with Saap assets, --calibrate --calibrate_steps=30, searched + guarded at 32K,
# reported as searched_saap / guarded_saap), then the defaults without assets at 32K; then main's
# binary on the with-assets command while time is left (STOP_AFTER).
set -u
cd "$(dirname "$0")"
W=/tmp/s28saap && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
$Z --patch-from="$W/bin/spattn-bench-base" spattn-bench.patch.zst -o "$W/bin/spattn-bench"
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
# (b) profile, base binary.
for len in 32768 131072; do
  rep=10; [ "$len" -gt 65536 ] && rep=5
  SPATTN_GPU_BUILDER_PROFILE=1 timeout 60 bin/spattn-bench-base $COMMON --recall_rows=16 \
    --calibrate --calibrate_steps=5 --seq_len=$len --warmup=2 --repeat=$rep --methods=saap \
    >> "$OUT/raw/profile.jsonl" 2>> "$OUT/raw/profile_$len.err"
  note "profile saap $len rc=$?"
done
# (a) the default search with Saap assets, this branch.
SAAP="--recall_rows=64 --calibrate --calibrate_steps=30 --seq_len=32768 --warmup=2 --repeat=10 --methods=searched,guarded"
timeout 100 bin/spattn-bench $COMMON $SAAP 2>> "$OUT/raw/new_saap.err" \
  | sed -E 's/"method":"(searched|guarded)"/"method":"\1_saap"/' >> "$OUT/raw/new.jsonl"
note "new defaults + saap assets 32K rc=${PIPESTATUS[0]}"
timeout 40 bin/spattn-bench $COMMON --recall_rows=64 --seq_len=32768 --warmup=2 --repeat=10 \
  --methods=searched,guarded >> "$OUT/raw/new.jsonl" 2>> "$OUT/raw/new_nosaap.err"
note "new defaults, no saap assets 32K rc=$?"
if [ $SECONDS -lt ${STOP_AFTER:-110} ]; then
  timeout 100 bin/spattn-bench-base $COMMON $SAAP 2>> "$OUT/raw/base_saap.err" \
    | sed -E 's/"method":"(searched|guarded)"/"method":"\1_saap"/' >> "$OUT/raw/base.jsonl"
  note "base defaults + saap assets 32K rc=${PIPESTATUS[0]}"
else
  note "skipped base defaults + saap assets (time)"
fi
cd "$OUT" && tar -czf /tmp/run1.tar.gz summary.txt raw && rm -rf raw summary.txt && mv /tmp/run1.tar.gz .
