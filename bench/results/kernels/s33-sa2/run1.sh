#!/usr/bin/env bash
# s33-sa2 run 1: sample_attention's count stage folded into the span count kernel's last CTA
# (where no row is left to the bitmap kernels), the host's wait on the pinned totals' published
# word instead of the stream, the metadata upload from pinned staging, attributes set once
# (SPATTN_SA_LEAN unset; =3: s33-sa's path, =0: main's, in the same binary).
#  1. build_index_gpu_test: the sample_attention cases + FoldedScanAndPublishedTotalsBuildMainsIndex.
#  2. spattn-bench sample_attention 32K, base (main 8cfc259) vs new, one process per cell,
#     alternating: NP (no profile) x4 each, PROFILE x2 each, new SPATTN_SA_LEAN=3 PROFILE x1;
#     128K NP once each.
. "$(dirname "$0")/lib.sh" && ab_unpack
ab_test sa 60 bin/build_index_gpu_test --gtest_filter='*sample_attention*:*SampleAttention*:*Assembl*'
grep -hE "indexes compared|rows differ" "$OUT/raw/test_sa.log" | tail -8 | tee -a "$OUT/summary.txt"
P=SPATTN_GPU_BUILDER_PROFILE=1
M=sample_attention
for r in 1 2 3 4; do
  ab_bench baseNP 32768 7 16 $M X=1
  ab_bench newNP 32768 7 16 $M X=1
  if [ $r -le 2 ]; then
    ab_bench base 32768 7 16 $M $P
    ab_bench new 32768 7 16 $M $P
  fi
done
ab_bench new3 32768 7 16 $M $P SPATTN_SA_LEAN=3
ab_bench baseNP 131072 3 4 $M X=1
ab_bench newNP 131072 3 4 $M X=1
grep -h "sample_attention host" "$OUT"/raw/bench_new*.err 2>/dev/null | head -4 >> "$OUT/summary.txt"
for v in new new3; do
  echo "$v host lines (launch / wait / post us):" >> "$OUT/summary.txt"
  grep -h "sample_attention host" "$OUT/raw/bench_$v.err" 2>/dev/null |
    awk '{l+=$4; w+=$7; p+=$10; n++} END {if (n) printf "  n=%d launch %.1f wait %.1f post %.1f\n", n, l/n, w/n, p/n}' >> "$OUT/summary.txt"
done
ab_finish
