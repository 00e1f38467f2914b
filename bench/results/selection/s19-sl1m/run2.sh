#!/usr/bin/env bash
# s19-sl1m device run 2 (on the GPU machine): `new` = this branch with the buckets written in place
# (run 1's separate bucket list overflowed the 32 GiB workspace at 1M / block_m 64).
# build_index_gpu_test (sampled_lines + the long-key tests; sampled_lines with buckets forced on
# every row), PyTorch SDPA cuDNN on the 1M chunk, then spattn-bench on the 1M chunk (last 64K
# queries of 1M keys, llm_mix 32/8 heads d 128 bf16): sampled_lines at block_m 64, recall_rows 32,
# warmup 1 repeat 2, SPATTN_GPU_BUILDER_PROFILE=1 (stderr time-stamped). Outputs in one tarball.
set -u
cd "$(dirname "$0")"
HERE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/sl1m_out; rm -rf $R; mkdir -p $R
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$R/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
rm -rf /tmp/sl1m && mkdir -p /tmp/sl1m && tar -xJf new.tar.xz -C /tmp/sl1m
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/sl1m
export LD_LIBRARY_PATH=$PWD/lib
timeout 150 bin/build_index_gpu_test --gtest_filter='*sampled_lines*:*LongKeys*' > "$R/test.log" 2>&1
note "build_index_gpu_test sampled_lines+LongKeys rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$R/test.log" | tr '\n' ' ')"
SPATTN_SL_ASM_BUCKET=1 timeout 60 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' > "$R/test_bucket.log" 2>&1
note "build_index_gpu_test sampled_lines, buckets forced rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$R/test_bucket.log" | tr '\n' ' ')"
grep -hE "^\[  FAILED|Failure" -A6 "$R/test.log" "$R/test_bucket.log" | head -30
timeout 60 python3 "$HERE/sdpa_chunk.py" --k_len 1048576 --q_len 65536 --iters 3 --warmup 1 \
  > "$R/sdpa_chunk.jsonl" 2> "$R/sdpa_chunk.err"
note "sdpa chunk rc=$? $(cat "$R/sdpa_chunk.jsonl")"
stamp() { python3 -u -c '
import sys, time
t0 = time.time()
for l in sys.stdin: sys.stdout.write("%7.1f %s" % (time.time() - t0, l)); sys.stdout.flush()'; }
SPATTN_GPU_BUILDER_PROFILE=1 timeout ${T1:-170} bin/spattn-bench --device=cuda --workload=llm_mix \
  --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --seq_len=1048576 \
  --q_len=65536 --gpu_workspace_bytes=34359738368 --recall_rows=32 --warmup=1 --repeat=2 \
  --methods=sampled_lines > "$R/bench_1m_bm64.jsonl" 2> >(stamp > "$R/bench_1m_bm64.err")
note "bench 1m_bm64 rc=$?"
sleep 1
python3 - "$R" <<'PY'
import json, os, sys
out = sys.argv[1]
sd = [json.loads(l) for l in open(os.path.join(out, "sdpa_chunk.jsonl")) if l.strip()]
sdms = sd[0]["ms"] if sd else None
for line in open(os.path.join(out, "bench_1m_bm64.jsonl")):
    r = json.loads(line)
    if "error" in r:
        print(r.get("method"), "ERROR", r["error"][:300]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    print("1m_bm64 %-14s index %8.2f kernel %8.2f = %8.2f ms x%.3f cuDNN chunk (%.1f ms) density %.4f recall %.4f min %.4f %s" %
          (r["method"], b, k, b + k, (b + k) / sdms if sdms else -1, sdms or -1, r["density"], r["recall"], r["recall_min"], r["device"]))
PY
cat "$R/bench_1m_bm64.err"
(cd "$R" && tar -czf "$OUT/run2.tgz" .)
