#!/usr/bin/env bash
# The main job, end to end on one machine: builds spattn, starts an index service (RocksDB in a
# temporary directory) and a worker on loopback, calibrates a model's per-head sparse-attention
# configs offline and publishes them (spattnctl calibrate), sends one realistic prefill layer
# through shared memory, prints the per-head report and the metrics endpoints, and shuts both
# servers down cleanly.
#
#   ./deploy/demo.sh [--seq_len=8192] [--q_heads=32] [--kv_heads=8] [--head_dim=128] [--keep]
#
# --keep leaves the servers running (their addresses are printed) until you press Enter.
set -euo pipefail
cd "$(dirname "$0")/.."

SEQ_LEN=8192
Q_HEADS=32
KV_HEADS=8
HEAD_DIM=128
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --seq_len=*) SEQ_LEN="${arg#*=}" ;;
    --q_heads=*) Q_HEADS="${arg#*=}" ;;
    --kv_heads=*) KV_HEADS="${arg#*=}" ;;
    --head_dim=*) HEAD_DIM="${arg#*=}" ;;
    --keep) KEEP=1 ;;
    *) echo "demo: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done

step() { printf '\n== %s\n' "$*"; }

step "set-up and build"
./deploy/setup.sh
CONFIG=$(cat .bazel-config)
bazel build $CONFIG -c opt //index:spattn-index //server:spattn-worker //client:spattnctl 2>&1 |
  grep -E "^(ERROR|FAILED)|Build completed|up-to-date" | tail -3
BIN=$(bazel info $CONFIG -c opt bazel-bin 2>/dev/null)
INDEX_BIN="$BIN/index/spattn-index"
WORKER_BIN="$BIN/server/spattn-worker"
CTL="$BIN/client/spattnctl"

WORK=$(mktemp -d /tmp/spattn-demo.XXXXXX)
INDEX_PID=""
WORKER_PID=""
cleanup() {
  # SIGTERM: both servers drain and exit 0; the temporary data goes with them.
  [ -n "$WORKER_PID" ] && kill -TERM "$WORKER_PID" 2>/dev/null && wait "$WORKER_PID" 2>/dev/null || true
  [ -n "$INDEX_PID" ] && kill -TERM "$INDEX_PID" 2>/dev/null && wait "$INDEX_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() {  # wait_for FILE PATTERN WHAT
  for _ in $(seq 1 200); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "demo: $3 did not start; its log:" >&2
  cat "$1" >&2
  exit 1
}

step "start the index service (RocksDB in $WORK/index-data)"
"$INDEX_BIN" --data_dir="$WORK/index-data" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --port_file="$WORK/index.ports" 2>"$WORK/index.log" &
INDEX_PID=$!
wait_for "$WORK/index.ports" . "spattn-index"
read -r INDEX_PORT INDEX_METRICS_PORT < "$WORK/index.ports"
export SPATTN_INDEX_ADDR="127.0.0.1:$INDEX_PORT"
sed 's/^/  /' "$WORK/index.log"

step "start the worker (index service at $SPATTN_INDEX_ADDR)"
# TCP for everything but shared memory, which the worker maps only for a caller on its Unix
# socket whose uid owns the segment (server/README.md, Security).
"$WORKER_BIN" --listen="127.0.0.1:0,unix:$WORK/worker.sock" --metrics=127.0.0.1:0 --index="$SPATTN_INDEX_ADDR" \
  >"$WORK/worker.out" 2>"$WORK/worker.log" &
WORKER_PID=$!
wait_for "$WORK/worker.out" "listening on" "spattn-worker"
WORKER_ADDR=$(awk '/listening on/ {print $4}' "$WORK/worker.out")
WORKER_METRICS_PORT=$(awk '/listening on/ {print $6}' "$WORK/worker.out")
export SPATTN_WORKER="$WORKER_ADDR"
sed 's/^/  /' "$WORK/worker.out"

step "calibrate and publish per-head configs for model demo-llama (32 layers, $Q_HEADS q-heads, $KV_HEADS kv-heads)"
# Every head defaults to A-shape; the offline pattern search (kernels/calibration/README.md)
# chooses layer 0's heads: per head, the cheapest method + parameters whose attention-mass recall
# reaches 0.95 on a calibration prompt. Its default candidates (--candidates=auto, session 27)
# at this length are sampled_lines alone at the worker guard's gamma (0.96 or more; dense where
# none reaches the target); --candidates=all searches every method. It calibrates on prompt 2
# and scores its choices on prompt 1 (the held-out column), which is the prompt sent below: same
# model (model_seed 1), different text; the worker's recall guard checks each head on it.
"$CTL" index models put --model=demo-llama --layers=32 --q_heads="$Q_HEADS" --kv_heads="$KV_HEADS" \
  --head_dim="$HEAD_DIM" --rope_theta=500000 --default_method=a_shape \
  --description="spattn demo model"
"$CTL" calibrate --workload=llm_mix --seed=2 --model_seed=1 --holdout_seed=1 \
  --seq_len="$SEQ_LEN" --q_heads="$Q_HEADS" --kv_heads="$KV_HEADS" --head_dim="$HEAD_DIM" \
  --layers=1 --target_recall=0.95 --publish --model=demo-llama
"$CTL" index versions demo-llama

step "one prefill layer: $SEQ_LEN tokens, $Q_HEADS q-heads / $KV_HEADS kv-heads, d=$HEAD_DIM, bf16, via shared memory"
"$CTL" --address="unix:$WORK/worker.sock" attention --model=demo-llama --layer=0 --seq_len="$SEQ_LEN" --q_heads="$Q_HEADS" \
  --kv_heads="$KV_HEADS" --head_dim="$HEAD_DIM" --dtype=bf16 --workload=llm_mix --seed=1 \
  --transport=shm --recall

step "metrics"
echo "  worker:        http://127.0.0.1:$WORKER_METRICS_PORT/metrics"
echo "  index service: http://127.0.0.1:$INDEX_METRICS_PORT/metrics"
curl -s "http://127.0.0.1:$WORKER_METRICS_PORT/metrics" |
  grep -E '^spattn_(requests_total|stage_duration_seconds_sum|attention_density_ratio_sum|method_selected_total|prefill_tokens_total|transfer_bytes_total)' |
  sed 's/^/  /' | head -30
curl -s "http://127.0.0.1:$INDEX_METRICS_PORT/metrics" |
  grep -E '^spattn_index_(published_version|rpc_requests_total)' | sed 's/^/  /' | head -12

if [ "$KEEP" -eq 1 ]; then
  step "servers left running: worker $WORKER_ADDR, index $SPATTN_INDEX_ADDR; press Enter to stop"
  read -r _
fi

step "shut down"
cleanup
trap - EXIT
echo "  both servers drained and exited; temporary data removed"
