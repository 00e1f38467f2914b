#!/usr/bin/env bash
# sampled_lines alone (no guard, every head, 128-row blocks, 256 recall rows per head) at the
# cells issue 11 item 3's table left unrun: 64K and 96K at gamma 0.90 (target 0.90), 96K at gamma
# 0.99 (target 0.98). Same binary as the session's combined run (.gpu-all bundle).
set -u
WORK=/tmp/slcells && rm -rf "$WORK" && mkdir -p "$WORK" && tar -xJf .gpu-all/bundle.tar.xz -C "$WORK" bin/spattn-bench lib
cd "$WORK"; export LD_LIBRARY_PATH=$PWD/lib
O=/tmp/sl; mkdir -p $O; SECONDS=0
M="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=256 --block_m=128 --warmup=0 --repeat=1 --methods=sampled_lines"
for v in 65536:0.90 98304:0.90 98304:0.99; do
  IFS=: read -r len g <<< "$v"
  timeout 120 bin/spattn-bench $M --seq_len=$len --sampled_lines.gamma=$g > $O/sl_${len}_g$g.jsonl 2> $O/sl_${len}_g$g.err
  echo "sl $len g$g rc=$? (${SECONDS}s)"
done
python3 - $O <<'PY'
import json, glob, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for l in open(f):
        r = json.loads(l)
        if "error" in r: print(os.path.basename(f), r["error"]); continue
        hs = [float(x.split(":")[1]) for x in r["recall_heads"].split(",")]
        print(os.path.basename(f), "recall %.4f head_min %.4f density %.4f block_m %s" % (r["recall"], r["recall_head_min"], r["density"], r.get("block_m")),
              "within0.02(0.90) %d within0.02(0.98) %d of %d" % (sum(h >= 0.88 for h in hs), sum(h >= 0.96 for h in hs), len(hs)))
PY
tar -czf $OUT/sl.tar.gz -C $O .
