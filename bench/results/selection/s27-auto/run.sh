#!/usr/bin/env bash
# s27-auto's device call: the guarded line on the new defaults (this branch's spattn-bench, no
# search / guard flags: --search_candidates=auto, --guard_adaptive=auto) against main b58a3b6's
# spattn-bench with its defaults (the search over all candidates, guard adaptive flex_prefill),
# at 32K and 128K, run.sh's COMMON flags without --calibrate (no saap assets: ~37 s per prompt).
# Four files back in $OUT: gpu.txt, summary.txt, bench.jsonl, bench.err.
set -u
cd "$(dirname "$0")"
W=/tmp/s27auto && rm -rf "$W" && mkdir -p "$W" && tar -xJf bundle.tar.xz -C "$W"
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
COMMON="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=64 --warmup=2 --methods=guarded"
run() {  # tag binary length repeat
  local tag=$1 bin=$2 len=$3 rep=$4
  echo "=== $tag" >> "$OUT/bench.err"
  timeout 45 "bin/$bin" $COMMON --seq_len="$len" --repeat="$rep" 2>> "$OUT/bench.err" \
    | sed -E "s/\"method\":\"guarded\"/\"method\":\"guarded_$tag\"/" >> "$OUT/bench.jsonl"
  echo "$tag rc=${PIPESTATUS[0]} (${SECONDS}s)" | tee -a "$OUT/summary.txt"
}
# Call 1 (default): all four in this order (main_128k was cut by the call's 65 s limit).
# Call 2 (CALL=2): the 128K pair, main's first.
if [ "${CALL:-1}" = 2 ]; then
  run main_128k spattn-bench-main 131072 5
  run new_128k spattn-bench 131072 5
else
  run new_32k spattn-bench 32768 10
  run main_32k spattn-bench-main 32768 10
  run new_128k spattn-bench 131072 5
  run main_128k spattn-bench-main 131072 5
fi
