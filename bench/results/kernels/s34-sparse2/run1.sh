#!/usr/bin/env bash
# s34-sparse2 call 1: the sparse stream's per-item timeline (SPATTN_HOPPER_TRACE) at 32K on the
# range methods (spattn-bench llm_mix, one process per method, launch 1 traced) and on
# cuda_bench's dense index + ranges 0.1 through the same stream (block_m 128), to size the
# per-item cost (fit period = a + b tiles) against the per-tile cost. Binaries: main 4efa45b.
. "$(dirname "$0")/lib.sh" && ab_unpack
cp "$AB_DIR"/sparse_timeline.py . 2>/dev/null
T=$OUT/raw
export AB_BENCH_S=30
for m in a_shape block_sparse vertical_slash sampled_lines; do
  ab_bench tr 32768 3 4 $m SPATTN_HOPPER_TRACE=$T/trace_$m.jsonl SPATTN_HOPPER_TRACE_TAG=$m \
    SPATTN_HOPPER_TRACE_LAUNCH=1
done
timeout 60 bin/cuda_bench --seq_lens=32768 --variants=5 --sparse_variants=5 --block_ms=128 \
  --range_densities=0.1 --col_densities= --iters=3 --warmup=1 --index_stats=1 \
  --knob_sets="tr:SPATTN_HOPPER_TRACE=$T/trace_cb.jsonl" --sparse_knobs=1 \
  > "$T/cuda_bench.jsonl" 2> "$T/cuda_bench.err"
ab_note "cuda_bench rc=$?"
for f in "$T"/trace_*.jsonl; do
  python3 sparse_timeline.py "$f" | tee -a "$OUT/timeline.txt"
  python3 sparse_timeline.py "$f" --json >> "$OUT/timeline.jsonl"
done
grep -h '"tflops"' "$T"/bench_tr.jsonl "$T/cuda_bench.jsonl" | cut -c1-400 > "$OUT/lines.txt"
ab_finish
