#!/usr/bin/env bash
# s34-sparse3 call 2 (warm): this branch with the knob off (off) against main (base), sampled_lines 32K, 2 each alternating.
. "$(dirname "$0")/lib.sh" && ab_unpack
export AB_STOP_AFTER=14 AB_BENCH_S=10
for r in 1 2; do ab_bench base 32768 7 16 sampled_lines; ab_bench off 32768 7 16 sampled_lines; done
ab_finish
