#!/usr/bin/env bash
# s30-saap run 2 (NOT RUN in session 30: my device share was spent by run 1; for the lead or the
# next session). Tests the hypothesis of run 1 (NOTES "Session 30 — s30-saap"): the classifier's
# weight slabs are slow to arrive because a slab's 256 rows lie 2 KB apart (row-major w1t) while
# every CTA reads the same head's slabs; SPATTN_SAAP_CLS_PACKED=1 uploads them slab by slab (32 KB
# contiguous). (1) build_index_gpu_test: PackedWeightSlabsBuildTheRowMajorIndex, the wgmma twin,
# MatchesCpuOnPlantedClusters and the */saap cases; (2) the Saap build stages at 32K and 128K,
# new with SPATTN_SAAP_CLS_PACKED=1 and main e9c159b (base), one process per cell, fingerprints
# against base. Bundle: pack.sh (DEST=/work/main/.device/s30-saap, carry ".device/s30-saap").
# Device command (~75 s wall; LENS="32768" TESTS=short: ~35 s, the packed test and 32K only):
#   timeout 110 bash .device/s30-saap/run2.sh; tar -C /tmp/s30out -czf $OUT/run2.tar.gz .
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
  --gtest_filter="$([ "${TESTS:-all}" = short ] && echo 'BuildIndexOnGpuSaapTest.Packed*' || echo 'BuildIndexOnGpuSaapTest.*:*/saap')" \
  > "$OUT/raw/tests.txt" 2>&1
note "saap tests rc=$? $(grep -E 'compared|^\[  PASSED|^\[  FAILED' "$OUT/raw/tests.txt" | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|differ" -A3 "$OUT/raw/tests.txt" | head -30
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all"
# Cells: LEN:WHO[:VAR=VALUE] (WHO new = this branch, base = main e9c159b), one process each.
for cell in 32768:new:SPATTN_SAAP_CLS_PACKED=1 32768:base 131072:new:SPATTN_SAAP_CLS_PACKED=1 \
            131072:base; do
  IFS=: read -r len who envv <<< "$cell"
  [[ " ${LENS:-32768 131072} " == *" $len "* ]] || continue
  cap=${CAP:-95}
  [ $SECONDS -lt $cap ] || { note "skipped $cell (cap $cap s)"; continue; }
  rep=8; [ "$len" -gt 65536 ] && rep=4
  bin=bin/spattn-bench; [ $who = base ] && bin=bin/spattn-bench-base
  tag=$who
  env ${envv:+"$envv"} SPATTN_GPU_BUILDER_PROFILE=1 timeout 45 $bin $COMMON --recall_rows=16 \
    --calibrate --calibrate_len=3072 --calibrate_steps=3 --seq_len=$len --warmup=2 \
    --repeat=$rep --methods=saap >> "$OUT/raw/$tag.jsonl" 2>> "$OUT/raw/$tag.err"
  note "profile saap $cell rc=$?"
done
args=(); for lt in base:base packed:new; do
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
