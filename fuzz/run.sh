#!/usr/bin/env bash
# Runs each libFuzzer binary of fuzz/out/ (fuzz/build.sh) for SECONDS seconds on one core:
#   fuzz/run.sh SECONDS [target ...]
# New inputs go to fuzz/out/work/<target>/ (the committed seeds in fuzz/corpus/<target>/ are
# read, not written); crash inputs to fuzz/out/crashes/<target>/. Prints one summary line per
# target and exits 1 if any target crashed (then: copy the input into fuzz/corpus/<target>/,
# fix the code; //fuzz:<target>_corpus_test replays it from then on).
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse_request npy safetensors record_codec config_json method_config)
# FUZZ_OUT: where the binaries are and results go (default fuzz/out); FUZZ_RESULTS: a file that
# gets one "PASS fuzz:<target>" / "FAIL fuzz:<target>" line per target (deploy/test.sh counts them).
OUT=${FUZZ_OUT:-fuzz/out}
RESULTS=${FUZZ_RESULTS:-/dev/null}
failed=0
for t in "${targets[@]}"; do
  bin=$OUT/${t}_fuzzer
  [ -x "$bin" ] || { echo "fuzz: $t: $bin missing (run fuzz/build.sh)"; echo "FAIL fuzz:$t" >>"$RESULTS"; failed=1; continue; }
  work=$OUT/work/$t
  crashes=$OUT/crashes/$t
  mkdir -p "$work" "$crashes"
  log=$OUT/$t.log
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  ncrash=$(find "$crashes" -type f | wc -l)
  echo "fuzz: $t: ${secs}s, ${runs:-0} runs, coverage ${cov:-?} edges, corpus $(ls "$work" | wc -l) new inputs, crashes $ncrash, rc $rc"
  if [ $rc -ne 0 ] || [ "$ncrash" -ne 0 ]; then
    echo "FAIL fuzz:$t" >>"$RESULTS"
    failed=1
    grep -m1 -A25 "ERROR: \|runtime error\|deadly signal" "$log" || tail -30 "$log"
  else
    echo "PASS fuzz:$t" >>"$RESULTS"
  fi
done
exit $failed
