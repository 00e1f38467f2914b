#!/usr/bin/env bash
# s19-build device run: build_index_gpu_test (every GPU builder against its CPU twin) +
# cuda_engine_test, then spattn-bench (this branch and the base binary, back to back) with
# per-stage builder times at 32K and 128K, this branch again with SPATTN_EST_WARPS=4 (the
# estimate's old 4-warp CTAs) for flex_prefill, PyTorch SDPA (cuDNN) on the same shapes, ncu
# of the estimate passes, and (ONEM=1) block_sparse on one 1M-key chunk.
set -u
cd "$(dirname "$0")"
W=/tmp/s19b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cp sdpa_reference.py "$W/"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s19bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for t in build_index_gpu_test cuda_engine_test; do
  timeout ${TEST_S:-150} bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
grep -hE "^\[  FAILED|Failure|rows differ" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3"
M=${METHODS:-vertical_slash,block_sparse,flex_prefill}
for len in ${LENS:-32768 131072}; do for v in new base est4; do
  bin=bin/spattn-bench; m=$M; e=
  [ "$v" = base ] && bin=bin/spattn-bench-base
  [ "$v" = est4 ] && { e="SPATTN_EST_WARPS=4"; m=flex_prefill; }
  [ "$v" = est4 ] && [ "$len" != "${EST4_LEN:-$len}" ] && continue
  env $e timeout 90 $bin $COMMON --seq_len=$len --methods=$m >> "$OUT/bench_$v.jsonl" 2>> "$OUT/bench_$v.err"
  note "spattn-bench $v $len rc=$?"
done; done
timeout 60 python3 sdpa_reference.py --seq_lens 32768,131072 > "$OUT/sdpa.jsonl" 2> "$OUT/sdpa.err"
note "sdpa rc=$?"
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  for e in "" "SPATTN_EST_WARPS=4"; do
    echo "=== ncu [$e]" >> "$OUT/ncu.txt"
    env $e timeout 90 ncu --clock-control none -k regex:EstimateKernel --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      bin/spattn-bench --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 \
      --dtype=bf16 --group_by=all --recall_rows=1 --warmup=0 --repeat=1 --seq_len=32768 \
      --methods=flex_prefill >> "$OUT/ncu.txt" 2>&1
    note "ncu [$e] rc=$?"
  done
fi
if [ "${ONEM:-0}" = 1 ]; then
  for v in ${ONEM_BINS:-new base}; do
    bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
    timeout ${ONEM_S:-90} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
      --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=1 --seq_len=1048576 --q_len=65536 \
      --warmup=${ONEM_WARMUP:-1} --repeat=${ONEM_REPEAT:-2} --methods=block_sparse \
      > "$OUT/bench_1m_$v.jsonl" 2> "$OUT/bench_1m_$v.err"
    note "spattn-bench $v 1M/64K rc=$?"
  done
fi
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base", "est4", "1m_new", "1m_base"):
    path = os.path.join(sys.argv[1], "bench_%s.jsonl" % v)
    if not os.path.exists(path): continue
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(v, r.get("method"), r.get("seq_len"), "ERROR", r["error"][:200]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print("%-7s %-16s %7d build %7.2f kernel %8.2f share %5.1f%% density %.4f recall %.4f" %
              (v, r["method"], r["seq_len"], b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
grep -E "^=== ncu|EstimateKernel|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible" "$OUT/ncu.txt" 2>/dev/null | head -120
cat "$OUT/summary.txt"
# Only 8 files come back from a run: everything in one archive.
(cd "$OUT" && tar -czf /tmp/s19b_all.tgz --exclude=all.tgz . && rm -f ./*.txt ./*.log ./*.jsonl ./*.err && mv /tmp/s19b_all.tgz all.tgz)
