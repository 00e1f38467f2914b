#!/usr/bin/env bash
# s30-saap run 1 (H100/H200): (1) build_index_gpu_test's Saap tests with this branch's defaults
# (the classifier's weight stream, SaapKnobs().cls_stream, and the paired key tiles,
# SaapKnobs().keys_pair): WgmmaClassifierIsTheMmaSyncClassifier (stream + wgmma vs mma.sync),
# PairedKeyTilesAssignTheOneTileCentroids, MatchesCpuOnPlantedClusters, and the */saap cases
# (MatchesCpuTwin, KernelRunsOnTheResidentIndex, RepeatedBuildsAreIdentical,
# LongWorkloadKeepsCpuFidelity); (2) Saap's GPU build stages, SPATTN_GPU_BUILDER_PROFILE=1,
# --methods=saap at 32K and 128K (assets from --calibrate, calibrate_len 3072 > the local window
# of 2047, 3 steps: the stage times depend on the classifier's size, not on its training), this
# branch's spattn-bench (new) and main e9c159b's (base), one process per cell, interleaved; then,
# if the run has time left, new at 32K with SPATTN_SAAP_KEYS_PAIR=1 (the paired key-assign kernel
# at one CTA per SM instead of two). Fingerprints (pairs, ranges, columns, density, recalls) of
# every new cell against base's of its length.
# Device command:
#   timeout 118 bash .device/s30-saap/run1.sh; tar -C /tmp/s30out -czf $OUT/run1.tar.gz .
set -u
cd "$(dirname "$0")"
W=/tmp/s30saap && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
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
export TEST_TMPDIR=/tmp/s30saap_test; mkdir -p "$TEST_TMPDIR"
OUT=/tmp/s30out; rm -rf "$OUT"; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
timeout 40 bin/build_index_gpu_test \
  --gtest_filter='BuildIndexOnGpuSaapTest.*:*/saap' > "$OUT/raw/tests.txt" 2>&1
note "saap tests rc=$? $(grep -E 'compared|^\[  PASSED|^\[  FAILED' "$OUT/raw/tests.txt" | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|differ" -A3 "$OUT/raw/tests.txt" | head -30
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
# Cells: LEN:WHO[:VAR=VALUE] (WHO new = this branch, base = main e9c159b), one process each.
# The last cell (the paired key tiles at one CTA per SM) only if the others left time.
for cell in 32768:new 32768:base 131072:new 131072:base 32768:new:SPATTN_SAAP_KEYS_PAIR=1; do
  IFS=: read -r len who envv <<< "$cell"
  cap=200; [ -n "$envv" ] && cap=${CAP:-85}
  [ $SECONDS -lt $cap ] || { note "skipped $cell (cap $cap s)"; continue; }
  rep=8; [ "$len" -gt 65536 ] && rep=4
  bin=bin/spattn-bench; [ $who = base ] && bin=bin/spattn-bench-base
  tag=$who; [ -n "$envv" ] && tag=${who}_${envv##*=}
  env ${envv:+"$envv"} SPATTN_GPU_BUILDER_PROFILE=1 timeout 45 $bin $COMMON --recall_rows=16 \
    --calibrate --calibrate_len=3072 --calibrate_steps=3 --seq_len=$len --warmup=2 \
    --repeat=$rep --methods=saap >> "$OUT/raw/$tag.jsonl" 2>> "$OUT/raw/$tag.err"
  note "profile saap $cell rc=$?"
done
args=(); for lt in base:base new:new pair1cta:new_1 nopair:new_0; do
  [ -s "$OUT/raw/${lt#*:}.err" ] && args+=("${lt%%:*}=$OUT/raw/${lt#*:}"); done
python3 builder_stages.py "${args[@]}" | tee -a "$OUT/summary.txt"
python3 - "$OUT/raw" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
keys = ["pairs", "index_ranges", "index_cols", "density", "recall", "recall_min", "recall_heads"]
rows = {}
for who in ("new", "base", "new_1", "new_0"):
    try: lines = open(f"{sys.argv[1]}/{who}.jsonl").readlines()
    except OSError: continue
    for line in lines:
        try: r = json.loads(line)
        except Exception: continue
        rows.setdefault(who, []).append(r)
base = {r.get("seq_len"): r for r in rows.get("base", [])}
for who in ("new", "new_1", "new_0"):
    for n in rows.get(who, []):
        b = base.get(n.get("seq_len"))
        if b is None: continue
        diff = [k for k in keys if n.get(k) != b.get(k)]
        print(who, "seq_len", n.get("seq_len"), "fingerprint vs base:",
              "equal" if not diff else "DIFFERS " + ",".join(diff),
              {k: n.get(k) for k in keys if k != "recall_heads"},
              "build %.3f kernel %.3f total %.3f" % (n["index_build_ms"], n["kernel_ms"], n["total_ms"]))
for b in rows.get("base", []):
    print("base seq_len", b.get("seq_len"), "build %.3f kernel %.3f total %.3f" % (b["index_build_ms"], b["kernel_ms"], b["total_ms"]))
PY
note "done"
