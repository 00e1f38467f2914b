#!/usr/bin/env bash
# s16-columns device run: run_matrix.sh (tests, SDPA, cuda_bench sets) then ncu on one column launch.
set -u
cd "$(dirname "$0")"
HERE=$PWD
set -a; . "$HERE/run.env"; set +a
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# Probe the block_m 64 hopper path first (a hang must not eat the run): on failure the rest of
# the run uses the variant-4 fallback (SPATTN_HOPPER_BM64=0).
if [ -n "${BM64_PROBE:-}" ]; then
  P=/tmp/s16probe && rm -rf $P && mkdir -p $P && tar -xJf bundle.tar.xz -C $P
  (cd $P && LD_LIBRARY_PATH=$P/lib timeout 60 bin/cuda_bench $BM64_PROBE >> "$OUT/errors.log" 2>&1)
  rc=$?
  echo "bm64 probe rc=$rc (${SECONDS}s)" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || export SPATTN_HOPPER_BM64=0
fi
bash "$HERE/run_matrix.sh"
OUT=${OUT:-/tmp/out}
cd /tmp/spattn_matrix && export LD_LIBRARY_PATH=$PWD/lib
# attention_cuda_test again under more knob settings (EXTRA_KNOB_TESTS, ';'-separated).
IFS=';' read -ra KT <<< "${EXTRA_KNOB_TESTS:-}"
for e in "${KT[@]}"; do
  [ -n "$e" ] || continue
  env $e timeout "${TEST_TIMEOUT:-150}" bin/attention_cuda_test --gtest_filter="${KNOB_TEST_FILTER:-*}" >> "$OUT/tests.log" 2>&1
  echo "attention_cuda_test [$e] rc=$? $(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -1) (${SECONDS}s)" | tee -a "$OUT/summary.txt"
done
if [ -z "${NCU_ENVS:-}" ]; then
  :
elif command -v ncu >/dev/null; then
  IFS=';' read -ra NE <<< "$NCU_ENVS"
  for e in "${NE[@]}"; do
    echo "=== ncu [$e]" >> "$OUT/ncu.txt"
    env $e timeout 120 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      --section WarpStateStats --section SchedulerStats \
      bin/cuda_bench ${NCU_BENCH:---seq_lens=32768 --variants= --sparse_variants=5 --block_ms=128 --range_densities= --col_densities=0.2 --iters=1 --warmup=0} \
      >> "$OUT/ncu.txt" 2>&1
    echo "ncu rc=$? (${SECONDS}s)" >> "$OUT/ncu.txt"
  done
  if [ -n "${NCU_RANGES:-}" ]; then
    echo "=== ncu [ranges $NCU_RANGES]" >> "$OUT/ncu.txt"
    timeout 120 ncu --clock-control none -k regex:PersistentFa3Kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      bin/cuda_bench --seq_lens=32768 --variants= --sparse_variants=5 --block_ms=128 --range_densities=$NCU_RANGES \
      --col_densities= --iters=1 --warmup=0 >> "$OUT/ncu.txt" 2>&1
    echo "ncu rc=$? (${SECONDS}s)" >> "$OUT/ncu.txt"
  fi
else
  echo "no ncu: $(command -v ncu)" >> "$OUT/ncu.txt"
fi
grep -E "^=== ncu|Duration|Throughput|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issued Warp|No Eligible|Active Warps|ncu rc" "$OUT/ncu.txt" | head -80
