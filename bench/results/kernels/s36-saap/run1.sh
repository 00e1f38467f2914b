#!/usr/bin/env bash
# s36-saap run 1: the RoPE table's illegal address (session 35). This branch's
# build_index_gpu_test has the table (SPATTN_SAAP_CLS_ROPE_TABLE, off by default), the s35 test
# RopeTablePerItemBuildsThePerHeadIndex, RopeTableAfterAnotherEnginesTableBuilds, and diagnostic
# knobs SPATTN_SAAP_DEBUG_SYNC / _PRELOAD / _UPLOAD_SYNC (saap_knobs.h).
# (1) the failing pair (table on, the packed test first) with each step synced and named; the
# same with CUDA_LAUNCH_BLOCKING, eager module loading, the preload and the upload sync;
# (2) the Saap tests with the table on (+ the first knob that passed), and with main's default;
# (3) if a variant passed, saap 32K base / new alternating (x2) and 128K (x1), new = table on
# (+ that variant), while time is left; (4) compute-sanitizer memcheck on the failing pair (if no
# variant passed or time is left).
# Bundle: device_ab/pack.sh (DEST=/work/main/.device/s36-saap); carry ".device/s36-saap".
. "$(dirname "$0")/lib.sh" && ab_unpack
T=bin/build_index_gpu_test
PAIR='--gtest_filter=*PackedWeight*:*RopeTablePerItem*'
TAB=SPATTN_SAAP_CLS_ROPE_TABLE=1
ab_test pair 30 $TAB $T "$PAIR"
ab_test pair_debug 30 SPATTN_SAAP_DEBUG_SYNC=1 $TAB $T "$PAIR"
grep -h "saap debug: [a-z].*:" "$OUT/raw/test_pair_debug.log" | grep -v "preload\|classify d" | head -5 | tee -a "$OUT/summary.txt"
ab_test pair_blocking 30 CUDA_LAUNCH_BLOCKING=1 $TAB $T "$PAIR"
ab_test pair_eager 40 CUDA_MODULE_LOADING=EAGER $TAB $T "$PAIR"
ab_test pair_preload 30 SPATTN_SAAP_PRELOAD=1 $TAB $T "$PAIR"
ab_test pair_upsync 30 SPATTN_SAAP_UPLOAD_SYNC=1 $TAB $T "$PAIR"
ab_test after_engine 30 SPATTN_SAAP_DEBUG_SYNC=1 $T '--gtest_filter=*RopeTableAfterAnother*'
FIX= REPRO=0 BENCH=0
grep -q '^\[  PASSED  \] 2 tests' "$OUT/raw/test_pair.log" || REPRO=1
for v in preload:SPATTN_SAAP_PRELOAD=1 upsync:SPATTN_SAAP_UPLOAD_SYNC=1; do
  if [ $REPRO = 1 ] && grep -q '^\[  PASSED  \] 2 tests' "$OUT/raw/test_pair_${v%%:*}.log"; then FIX=${v#*:}; break; fi
done
ab_note "reproduced: $REPRO, fix variant: ${FIX:-none}"
ab_test saap_table 60 $TAB ${FIX:+$FIX} $T '--gtest_filter=*Saap*:*/saap'
grep -h "compared" "$OUT/raw/test_saap_table.log" | tee -a "$OUT/summary.txt"
ab_test saap_main 60 $T '--gtest_filter=*Saap*:*/saap'
{ [ -n "$FIX" ] || [ $REPRO = 0 ]; } && BENCH=1
if [ $BENCH = 1 ] && grep -q '^\[  PASSED  \]' "$OUT/raw/test_saap_table.log" && ! grep -q FAILED "$OUT/raw/test_saap_table.log"; then
  export AB_BENCH_FLAGS="--calibrate --calibrate_len=3072 --calibrate_steps=3"
  export AB_STOP_AFTER=${AB_STOP_AFTER:-105}
  P=SPATTN_GPU_BUILDER_PROFILE=1
  ab_bench base 32768 7 16 saap $P
  ab_bench new 32768 7 16 saap $P $TAB $FIX
  ab_bench base 32768 7 16 saap $P
  ab_bench new 32768 7 16 saap $P $TAB $FIX
  ab_bench base 131072 3 4 saap $P
  ab_bench new 131072 3 4 saap $P $TAB $FIX
fi
if [ $BENCH = 0 ] || [ "$SECONDS" -lt 100 ]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$CS" ]; then
    timeout 60 env $TAB "$CS" --tool memcheck --print-limit 20 $T "$PAIR" > "$OUT/raw/memcheck_pair.log" 2>&1
    ab_note "memcheck pair rc=$? $(grep -cE '^=+ +(Invalid|Address|Out of)' "$OUT/raw/memcheck_pair.log") reports"
    grep -E "ERROR SUMMARY|Invalid|is out of bounds|at .*in |by thread|Address" "$OUT/raw/memcheck_pair.log" | head -12 | tee -a "$OUT/summary.txt"
  fi
fi
ab_finish
