# Functions for an A/B device run script packed by pack.sh; source it from the script's folder:
#
#   #!/usr/bin/env bash
#   . "$(dirname "$0")/lib.sh" && ab_unpack
#   ab_test build_index 60 bin/build_index_gpu_test --gtest_filter='*Anchor*'
#   for r in 1 2; do
#     ab_bench base 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1
#     ab_bench new  32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1
#   done
#   ab_finish
#
# Results go under $OUT (the run tool's folder): summary.txt (one line per step, with the
# seconds since the start), shares.txt (build / kernel / share / density / recall per bench line,
# then each variant's mean ms and TFLOP/s against the base variant's),
# stages.txt (builder_stages.py over the profiled variants), raw.tar.xz (every log).
set -u
AB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/out}

ab_note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }

# Unpacks the binaries into $W (default /tmp/device_ab), checks them against md5.txt and enters $W.
ab_unpack() {
  W=${W:-/tmp/device_ab}
  rm -rf "$W" && mkdir -p "$W/bin" "$OUT/raw"
  tar -xJf "$AB_DIR/lib.tar.xz" -C "$W"
  local z="env LD_LIBRARY_PATH=$AB_DIR/zl $AB_DIR/zl/zstd -q -d --long=27" whole p
  whole=$(ls "$AB_DIR"/*.zst | grep -v '\.patch\.zst$')
  $z "$whole" -o "$W/bin/$(basename "${whole%.zst}")"
  for p in "$AB_DIR"/*.patch.zst; do
    [ -e "$p" ] || continue
    $z --patch-from="$W/bin/$(basename "${whole%.zst}")" "$p" -o "$W/bin/$(basename "${p%.patch.zst}")"
  done
  chmod +x "$W"/bin/*
  cp "$AB_DIR"/*.py "$W/"
  cd "$W"
  (cd bin && md5sum -c "$AB_DIR/md5.txt") | tr '\n' ' ' | tee "$OUT/raw/md5.txt"; echo
  export LD_LIBRARY_PATH=$W/lib TEST_TMPDIR=$W/test_tmp
  mkdir -p "$TEST_TMPDIR"
  SECONDS=0
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader |
    tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
}

# ab_test NAME TIMEOUT_S [VAR=VALUE...] BINARY ARGS...: a gtest binary; its PASSED / FAILED /
# SKIPPED lines and the first failures go to summary.txt.
ab_test() {
  local name=$1 to=$2; shift 2
  timeout "$to" env "$@" > "$OUT/raw/test_$name.log" 2>&1
  ab_note "test $name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE '^\[  FAILED|Failure' -A3 "$OUT/raw/test_$name.log" | head -30 | tee -a "$OUT/summary.txt"
}

# ab_bench VARIANT LEN REPEAT RECALL_ROWS METHODS [VAR=VALUE...]: one spattn-bench process
# (llm_mix, 32 q / 8 kv heads, d 128, bf16, group_by=all; AB_BENCH_FLAGS adds flags) appending
# to raw/bench_VARIANT.jsonl (.err: stderr, with the builder profile's stage lines). VARIANT
# base* runs bin/spattn-bench-base, anything else bin/spattn-bench. Skipped once the run is
# past AB_STOP_AFTER seconds (default 400), so a long script still returns its results.
ab_bench() {
  local v=$1 len=$2 rep=$3 rr=$4 m=$5; shift 5
  if [ "$SECONDS" -gt "${AB_STOP_AFTER:-400}" ]; then ab_note "skipped bench $v $len $m"; return; fi
  local bin=bin/spattn-bench
  case $v in base*) bin=bin/spattn-bench-base ;; esac
  timeout "${AB_BENCH_S:-60}" env "$@" $bin --device=cuda --workload=llm_mix --heads=32 --kv_heads=8 \
    --head_dim=128 --dtype=bf16 --group_by=all --recall_rows="$rr" --warmup=$((rep < 5 ? 1 : 2)) \
    --repeat="$rep" --seq_len="$len" --methods="$m" ${AB_BENCH_FLAGS:-} \
    >> "$OUT/raw/bench_$v.jsonl" 2>> "$OUT/raw/bench_$v.err"
  ab_note "bench $v $len $m rc=$?"
}

# ab_finish: shares.txt, stages.txt, raw.tar.xz.
ab_finish() {
  local args=() f jsonl=()
  for f in "$OUT"/raw/bench_*.jsonl; do [ -e "$f" ] && jsonl+=("$f"); done
  [ ${#jsonl[@]} -gt 0 ] && python3 shares.py "${jsonl[@]}" | tee "$OUT/shares.txt"
  for f in "$OUT"/raw/bench_*.err; do
    [ -e "$f" ] && grep -q "gpu builder" "$f" && args+=("$(basename "${f%.err}" | sed 's/^bench_//')=${f%.err}")
  done
  [ ${#args[@]} -gt 0 ] && python3 builder_stages.py "${args[@]}" > "$OUT/stages.txt" 2>&1 && cat "$OUT/stages.txt"
  (cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
  ab_note done
}
