#!/usr/bin/env bash
# s19-sl1m device run (on the GPU machine; issue 11 item 5 at 1M): `new` = this branch (Score
# validates only its slot; sampled_lines' entries bucketed by assembler segment). In order:
# build_index_gpu_test (sampled_lines + the long-key tests; then sampled_lines with buckets
# forced on every row), PyTorch SDPA cuDNN on the 1M chunk (sdpa_chunk.py), then spattn-bench
# (llm_mix 32/8 heads d 128 bf16, SPATTN_GPU_BUILDER_PROFILE=1, stderr lines time-stamped):
#   1M chunk (last 64K queries of 1M keys): guarded + sampled_lines at block_m 64 (recall_rows 32,
#   warmup 1 repeat 2, as run_1m.sh); sampled_lines at block_m 128 (recall_rows 8);
#   32K and 128K prompts: sampled_lines (default, and at 128K SPATTN_SL_ASM_BUCKET=0: the old
#   assembler path, every segment reading the whole slice);
#   last: 1M sampled_lines block_m 64 with SPATTN_SL_ASM_BUCKET=0 (warmup 0, repeat 1).
set -u
cd "$(dirname "$0")"
HERE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
rm -rf /tmp/sl1m && mkdir -p /tmp/sl1m && tar -xJf new.tar.xz -C /tmp/sl1m
export TEST_TMPDIR=/tmp/spattn_test; mkdir -p "$TEST_TMPDIR"
cd /tmp/sl1m
export LD_LIBRARY_PATH=$PWD/lib
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 150 bin/build_index_gpu_test --gtest_filter='*sampled_lines*:*LongKeys*' > "$OUT/test.log" 2>&1
  note "build_index_gpu_test sampled_lines+LongKeys rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test.log" | tr '\n' ' ')"
  SPATTN_SL_ASM_BUCKET=1 timeout 60 bin/build_index_gpu_test --gtest_filter='*sampled_lines*' > "$OUT/test_bucket.log" 2>&1
  note "build_index_gpu_test sampled_lines, buckets forced rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/test_bucket.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A6 "$OUT/test.log" "$OUT/test_bucket.log" | head -30
fi
timeout 60 python3 "$HERE/sdpa_chunk.py" --k_len 1048576 --q_len 65536 --iters 3 --warmup 1 \
  > "$OUT/sdpa_chunk.jsonl" 2> "$OUT/sdpa_chunk.err"
note "sdpa chunk rc=$? $(cat "$OUT/sdpa_chunk.jsonl")"
stamp() { python3 -u -c '
import sys, time
t0 = time.time()
for l in sys.stdin: sys.stdout.write("%7.1f %s" % (time.time() - t0, l)); sys.stdout.flush()'; }
bench() {  # tag timeout_s env... -- flags...
  local tag=$1 t=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env SPATTN_GPU_BUILDER_PROFILE=1 "${envs[@]}" timeout "$t" bin/spattn-bench --device=cuda \
    --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all "$@" \
    > "$OUT/bench_$tag.jsonl" 2> >(stamp > "$OUT/bench_$tag.err")
  note "bench $tag rc=$?"
  sleep 1
}
M1="--seq_len=1048576 --q_len=65536 --gpu_workspace_bytes=34359738368"
bench 1m_bm64 ${T1:-200} X=1 -- $M1 --recall_rows=32 --warmup=1 --repeat=2 --search_len=16384 \
  --search_target_recall=0.95 --methods=guarded,sampled_lines
bench 1m_bm128 ${T2:-120} X=1 -- $M1 --recall_rows=8 --warmup=1 --repeat=2 --block_m=128 \
  --methods=sampled_lines
bench 32k ${T3:-30} X=1 -- --seq_len=32768 --recall_rows=64 --warmup=1 --repeat=3 --methods=sampled_lines
bench 128k ${T3:-40} X=1 -- --seq_len=131072 --recall_rows=64 --warmup=1 --repeat=2 --methods=sampled_lines
bench 128k_nobucket ${T3:-40} SPATTN_SL_ASM_BUCKET=0 -- --seq_len=131072 --recall_rows=64 --warmup=1 \
  --repeat=2 --methods=sampled_lines
bench 1m_bm64_nobucket ${T4:-100} SPATTN_SL_ASM_BUCKET=0 -- $M1 --recall_rows=8 --warmup=0 --repeat=1 \
  --methods=sampled_lines
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
sd = [json.loads(l) for l in open(os.path.join(out, "sdpa_chunk.jsonl")) if l.strip()]
sdms = sd[0]["ms"] if sd else None
for f in sorted(glob.glob(os.path.join(out, "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    for line in open(f):
        r = json.loads(line)
        if "error" in r:
            print(tag, r.get("method"), "ERROR", r["error"][:300]); continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        ratio = ("x%.3f cuDNN chunk" % ((b + k) / sdms)) if (sdms and "1m" in tag) else ""
        print("%-18s %-14s index %8.2f kernel %8.2f = %8.2f ms %s density %.4f recall %.4f min %.4f %s" %
              (tag, r["method"], b, k, b + k, ratio, r["density"], r["recall"], r["recall_min"], r["device"]))
PY
grep -h "gpu builder sampled_lines" "$OUT"/bench_*.err | tail -40
