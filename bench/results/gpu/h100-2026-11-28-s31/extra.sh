#!/usr/bin/env bash
# Session 31, after run.sh in the same call (its /tmp/spattn_gpu bundle): the sparse kernel's
# per-launch K/V ring (s31-sparse; SPATTN_HOPPER_SPARSE_RING=0, the default) against the k2 ring
# alone (=22, main's before) on sampled_lines bm128's index, one process per cell, alternating,
# while the call has time (S0 = the call's start in epoch seconds; cells stop at CUT seconds).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; X=/tmp/extra && rm -rf $X && mkdir -p $X
W=/tmp/spattn_gpu; cd $W && export LD_LIBRARY_PATH=$PWD/lib
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16
  --group_by=all --recall_rows=16 --warmup=1 --repeat=5 --block_m=128 --methods=sampled_lines"
cell() {  # name len env
  local el=$(( $(date +%s) - ${S0:-$(date +%s)} ))
  [ "$el" -gt "${CUT:-560}" ] && { echo "$1 skipped at ${el}s" | tee -a $X/summary.txt; return; }
  env $3 timeout 40 bin/spattn-bench $C --seq_len=$2 > $X/$1.jsonl 2> $X/$1.err
  echo "$1 rc=$? at ${el}s" | tee -a $X/summary.txt
}
for r in a b c; do
  cell ring0_32768_$r 32768 SPATTN_HOPPER_SPARSE_RING=0
  cell ring22_32768_$r 32768 SPATTN_HOPPER_SPARSE_RING=22
done
cell ring0_131072_a 131072 SPATTN_HOPPER_SPARSE_RING=0
cell ring22_131072_a 131072 SPATTN_HOPPER_SPARSE_RING=22
python3 - $X <<'PY' | tee -a $X/summary.txt
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(f):
        try: r = json.loads(line)
        except Exception: continue
        print(os.path.basename(f)[:-6], r["seq_len"], "kernel_ms %.4f" % r["kernel_ms"],
              "pairs", r["pairs"], "rel_l2 %.6f" % r.get("rel_l2_error", -1), "tflops %.1f" % r["tflops"])
PY
tar -czf "$OUT/extra.tar.gz" -C $X .
