#!/usr/bin/env bash
# s18-build device run: build_index_gpu_test + cuda_engine_test, then spattn-bench (this branch
# and the base binary, back to back) with per-stage builder times at 32K and 128K, then
# block_sparse on one 1M-key chunk (last 65536 queries), this branch and the base.
set -u
cd "$(dirname "$0")"
W=/tmp/s18b && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s18bt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for t in build_index_gpu_test cuda_engine_test; do
  timeout ${TEST_S:-120} bin/$t > "$OUT/test_$t.log" 2>&1
  note "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_$t.log" | tr '\n' ' ')"
done
grep -hE "^\[  FAILED|Failure|rows differ" "$OUT"/test_*.log | head -20
export SPATTN_GPU_BUILDER_PROFILE=1
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=3"
M=${METHODS:-vertical_slash,block_sparse,flex_prefill,sample_attention,anchor}
for len in ${LENS:-32768 131072}; do for v in new base; do
  set -- $v $len
  bin=bin/spattn-bench; [ "$1" = base ] && bin=bin/spattn-bench-base
  timeout 60 $bin $COMMON --seq_len=$2 --methods=$M >> "$OUT/bench_$1.jsonl" 2>> "$OUT/bench_$1.err"
  note "spattn-bench $1 $2 rc=$?"
done; done
if [ "${ONEM:-1}" = 1 ]; then
  for v in new base; do
    bin=bin/spattn-bench; [ "$v" = base ] && bin=bin/spattn-bench-base
    timeout ${ONEM_S:-60} $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
      --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=8 --seq_len=1048576 --q_len=65536 \
      --warmup=1 --repeat=2 --methods=block_sparse \
      > "$OUT/bench_1m_$v.jsonl" 2> "$OUT/bench_1m_$v.err"
    note "spattn-bench $v 1M/64K rc=$?"
  done
fi
python3 - "$OUT" <<'PY'
import json, sys, os
for v in ("new", "base", "1m_new", "1m_base"):
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
cat "$OUT/summary.txt"
