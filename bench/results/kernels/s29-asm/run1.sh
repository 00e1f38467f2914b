#!/usr/bin/env bash
# s29-asm run 1 (s29-sa's run1.sh): the row assembler's kept words (the count pass stores each
# row's final words, the fill pass reads them instead of building the bitmaps again).
#  1. row_assembly_gpu_test, sampled_lines_gpu_test, build_index_gpu_test of every builder that
#     ends in the bitmap assembler (sampled_lines, sample_attention, anchor, saap), default (kept
#     words) and SPATTN_ASM_KEEP_MB=1 (a few rows kept, the rest on the bitmaps: both in one build).
#  2. spattn-bench base (main ccabe17) vs new, SPATTN_GPU_BUILDER_PROFILE=1, one process each,
#     alternating: sampled_lines --block_m=128 gamma 0.95 at 128K, sample_attention at 32K,
#     anchor 32K, sampled_lines 32K; new with SPATTN_ASM_KEEP_MB=0 (the knob: bitmaps in both
#     passes) at 128K if time is left (STOP_AFTER).
set -u
cd "$(dirname "$0")"
W=/tmp/s29asm && rm -rf "$W" && mkdir -p "$W/bin" && tar -xJf lib.tar.xz -C "$W"
Z="env LD_LIBRARY_PATH=$PWD/zl $PWD/zl/zstd -q -d --long=27"
$Z base.zst -o "$W/bin/spattn-bench-base"
for p in *.patch.zst; do
  $Z --patch-from="$W/bin/spattn-bench-base" $p -o "$W/bin/${p%.patch.zst}"
done
chmod +x "$W"/bin/*
cp *.py md5.txt "$W/"
cd "$W"
(cd bin && md5sum -c ../md5.txt) | tr '\n' ' '; echo
export LD_LIBRARY_PATH=$PWD/lib TEST_TMPDIR=/tmp/s29asmt
mkdir -p "$TEST_TMPDIR"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
SECONDS=0
note() { echo "$* (${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/raw/gpu.txt" "$OUT/summary.txt"
t() {  # name timeout env binary args...
  local name=$1 to=$2 e=$3; shift 3
  env $e timeout $to "$@" > "$OUT/raw/test_$name.log" 2>&1
  note "$name rc=$? $(grep -hE '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test' "$OUT/raw/test_$name.log" | tr '\n' ' ')"
  grep -hE "^\[  FAILED|Failure" -A4 "$OUT/raw/test_$name.log" | head -16 | tee -a "$OUT/summary.txt"
}
F='*sampled_lines*:*SampledLines*:*sample_attention*:*SampleAttention*:*anchor*:*Anchor*:*saap*:*Saap*:*Assembl*'
t row_assembly 30 X=1 bin/row_assembly_gpu_test
t sampled_lines 30 X=1 bin/sampled_lines_gpu_test
t build_index ${TEST_S:-60} X=1 bin/build_index_gpu_test --gtest_filter="${FILTER:-$F}"
bench() {  # variant len method block_m repeat env...
  local v=$1 len=$2 m=$3 bm=$4 rep=$5; shift 5
  if [ $SECONDS -gt ${STOP_AFTER:-100} ]; then note "skipped $v $len $m"; return; fi
  local bin=bin/spattn-bench; case $v in base*) bin=bin/spattn-bench-base;; esac
  local tag=${v}_${m}_$len
  env "$@" SPATTN_GPU_BUILDER_PROFILE=1 timeout $((len / 4096 + 15)) $bin --device=cuda \
    --workload=llm_mix --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 --group_by=all \
    --recall_rows=64 --warmup=1 --repeat=$rep --seq_len=$len --block_m=$bm --methods=$m \
    --sampled_lines.gamma=0.95 > "$OUT/raw/bench_$tag.jsonl" 2> "$OUT/raw/bench_$tag.err"
  note "bench $tag rc=$? | $(grep -h 'gpu builder' "$OUT/raw/bench_$tag.err" | tail -1 | grep -oE '(count|fill) [0-9.]+ ms' | tr '\n' ' ') $(grep -h 'row assembly:' "$OUT/raw/bench_$tag.err" | tail -1)"
}
K=131072
bench base1 $K sampled_lines 128 2 X=1
bench new1 $K sampled_lines 128 2 X=1
bench base1 32768 sample_attention 128 5 X=1
bench new1 32768 sample_attention 128 5 X=1
bench new2 32768 sample_attention 128 5 X=1
bench base2 32768 sample_attention 128 5 X=1
bench new2 $K sampled_lines 128 2 X=1
bench base2 $K sampled_lines 128 2 X=1
[ $SECONDS -le ${STOP_AFTER:-100} ] && t build_index_keep1 ${TEST_S:-60} SPATTN_ASM_KEEP_MB=1 bin/build_index_gpu_test --gtest_filter="${FILTER:-$F}"
bench base1 32768 anchor 128 5 X=1
bench new1 32768 anchor 128 5 X=1
bench base1 32768 sampled_lines 128 3 X=1
bench new1 32768 sampled_lines 128 3 X=1
bench newKEEP0 $K sampled_lines 128 2 SPATTN_ASM_KEEP_MB=0
python3 - "$OUT/raw" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
keys = ["pairs", "index_ranges", "index_cols", "density", "density_min", "density_max", "recall",
        "recall_min", "recall_heads", "rel_l2_error"]
R = sys.argv[1]
for f in sorted(glob.glob(os.path.join(R, "bench_*.jsonl"))):
    tag = os.path.basename(f)[6:-6]
    try: r = json.loads(open(f).readline())
    except Exception: print(tag, "no output"); continue
    if "error" in r: print(tag, "ERROR", str(r["error"])[:200]); continue
    b, k = r["index_build_ms"], r["kernel_ms"]
    v, rest = tag.split("_", 1)
    fb = os.path.join(R, "bench_base1_%s.jsonl" % rest)
    fp = ""
    if os.path.exists(fb) and f != fb:
        try:
            rb = json.loads(open(fb).readline())
            d = [x for x in keys if rb.get(x) != r.get(x)]
            fp = "fingerprint vs base1: " + ("equal" if not d else "DIFFERS " + ",".join(d))
        except Exception: pass
    print("%-36s build %7.3f kernel %8.3f share %5.2f%% density %.6f recall %.6f %s %s" %
          (tag, b, k, 100 * b / (b + k), r["density"], r["recall"], r.get("device", ""), fp))
PY
args=""
for f in "$OUT"/raw/bench_*.jsonl; do p=${f%.jsonl}; args="$args $(basename $p | cut -c7-)=$p"; done
python3 builder_stages.py $args > "$OUT/stages.txt" 2>&1
cat "$OUT/stages.txt"
(cd "$OUT" && tar -cJf raw.tar.xz raw && rm -rf raw)
note done
