#!/usr/bin/env bash
# s29-saap run 2 (H100/H200; run 1's --calibrate_len=2048 left no query past Saap's local window
# of 2047 keys: no assets, no profile): (1) build_index_gpu_test's
# BuildIndexOnGpuSaapTest.WgmmaClassifierIsTheMmaSyncClassifier (the wgmma classifier's classes
# and index against mma.sync's); (2) Saap's GPU build stages, SPATTN_GPU_BUILDER_PROFILE=1,
# --methods=saap at 32K and 128K (assets from --calibrate --calibrate_steps=5, s28-saap's
# settings: the stage times do not depend on how well it is trained), this branch's spattn-bench
# and main 0685884's, one process per cell, interleaved. Device command:
#   timeout 120 bash .device/s29-saap/run2.sh; tar -C /tmp/s29out -czf $OUT/run2.tar.gz .
set -u
cd "$(dirname "$0")"
W=/tmp/s29saap && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for b in spattn-bench build_index_gpu_test; do
  $Z --patch-from="$W/bin/spattn-bench-base" $b.patch.zst -o "$W/bin/$b"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib
# Outputs under /tmp/s29out (the device command tars them into $OUT, also after a timeout).
OUT=/tmp/s29out; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
timeout 45 bin/build_index_gpu_test \
  --gtest_filter='BuildIndexOnGpuSaapTest.WgmmaClassifierIsTheMmaSyncClassifier' \
  > "$OUT/raw/twin.txt" 2>&1
note "twin test rc=$? $(grep -E 'compared|PASSED|FAILED' "$OUT/raw/twin.txt" | head -3 | tr '\n' ' ')"
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
for len in 32768 131072; do
  rep=10; [ "$len" -gt 65536 ] && rep=5
  for who in new base; do
    bin=bin/spattn-bench; [ $who = base ] && bin=bin/spattn-bench-base
    SPATTN_GPU_BUILDER_PROFILE=1 timeout 60 $bin $COMMON --recall_rows=16 \
      --calibrate --calibrate_steps=5 --seq_len=$len --warmup=2 \
      --repeat=$rep --methods=saap >> "$OUT/raw/$who.jsonl" 2>> "$OUT/raw/$who.err"
    note "profile saap $who $len rc=$?"
  done
done
