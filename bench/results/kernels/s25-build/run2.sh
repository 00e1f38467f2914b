#!/usr/bin/env bash
# s25-build run 2 (warm, right after run 1): anchor 128K, base then new (run 1 ran new first),
# with stage events, to separate Keep's copy (the gap outside the stages) from the stages' drift.
set -u
cd "$(dirname "$0")"
W=/tmp/s25b
if ! (cd "$W/bin" 2>/dev/null && md5sum -c ../md5.txt >/dev/null 2>&1); then
  rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
  Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
  $Z base.zst -o "$W/bin/spattn-bench-base"
  $Z --patch-from="$W/bin/spattn-bench-base" spattn-bench.patch.zst -o "$W/bin/spattn-bench"
  chmod +x "$W"/bin/*; cp *.py md5.txt "$W/"
fi
cd "$W"
export LD_LIBRARY_PATH=$PWD/lib
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SECONDS=0
C="--device=cuda --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all --recall_rows=64 --warmup=1 --repeat=3 --seq_len=131072 --methods=anchor"
for v in base new; do
  bin=bin/spattn-bench; [ $v = base ] && bin=bin/spattn-bench-base
  SPATTN_GPU_BUILDER_PROFILE=1 timeout 30 $bin $C > "$OUT/bench_$v.jsonl" 2> "$OUT/bench_$v.err"
  echo "$v rc=$? (${SECONDS}s)"
done
python3 builder_stages.py base=$OUT/bench_base new=$OUT/bench_new | tee "$OUT/stages.txt"
