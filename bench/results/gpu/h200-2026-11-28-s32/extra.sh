#!/usr/bin/env bash
# Session 32, after run.sh in the same call (its /tmp/spattn_gpu bundle): sample_attention's
# fewer launches (s32-sa, SPATTN_SA_LEAN unset = the default) against main's launches
# (SPATTN_SA_LEAN=0) and flex_prefill's estimate spans (s32-flex, default) against main's
# (SPATTN_EST_SPAN=1 SPATTN_EST_DB=0), 32K, one process per cell, alternating, while the call
# has time (S0 = the call's start in epoch seconds; cells stop at CUT seconds).
set -u
OUT=${OUT:-/tmp/out}; X=/tmp/extra && rm -rf $X && mkdir -p $X
W=/tmp/spattn_gpu; cd $W && export LD_LIBRARY_PATH=$PWD/lib
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=2 --repeat=10 --seq_len=32768"
cell() {  # name method env...
  local el=$(( $(date +%s) - ${S0:-$(date +%s)} ))
  [ "$el" -gt "${CUT:-560}" ] && { echo "$1 skipped at ${el}s" | tee -a $X/summary.txt; return; }
  env $3 timeout 40 bin/spattn-bench $C --methods=$2 > $X/$1.jsonl 2> $X/$1.err
  echo "$1 rc=$? at ${el}s" | tee -a $X/summary.txt
}
for r in a b; do
  cell sa_lean_$r sample_attention X=1
  cell sa_main_$r sample_attention SPATTN_SA_LEAN=0
  cell flex_span_$r flex_prefill X=1
  cell flex_main_$r flex_prefill "SPATTN_EST_SPAN=1 SPATTN_EST_DB=0"
done
python3 - $X <<'PY' | tee -a $X/summary.txt
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        b, k = r["index_build_ms"], r["kernel_ms"]
        print(os.path.basename(f)[:-6], r["method"], r["seq_len"], "build %.3f kernel %.3f share %.2f%% density %.6f recall %.6f" %
              (b, k, 100 * b / (b + k), r["density"], r["recall"]))
PY
tar -czf $OUT/extra.tar.gz -C $X .
