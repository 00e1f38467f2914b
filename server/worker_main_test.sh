#!/usr/bin/env bash
# The spattn-worker binary: starts on free ports, answers spattnctl, serves /metrics, drains and
# exits 0 on SIGTERM.
set -euo pipefail
WORKER="$1"
CTL="$2"
out="$TEST_TMPDIR/worker.out"
err="$TEST_TMPDIR/worker.err"
cfg="$TEST_TMPDIR/worker.conf"
sock="/tmp/spattn-wmt-$$-$RANDOM.sock"  # Short: unix socket paths have 107 bytes at most.
printf '# test config\nlisten = 127.0.0.1:0,unix:%s\nmetrics = 127.0.0.1:0\nqueue_capacity = 8\nsaap_assets_bytes = 1048576\nrecall_adaptive = sampled_lines,flex_prefill\n' \
  "$sock" > "$cfg"
"$WORKER" --config="$cfg" --log_level=debug >"$out" 2>"$err" &
pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$out" 2>/dev/null && break
  sleep 0.1
done
addr=$(awk '/listening on/ {print $4}' "$out")
[ -n "$addr" ] || { echo "worker did not start"; cat "$err"; exit 1; }
"$CTL" --address="$addr" health | grep -x SERVING >/dev/null
# The metrics endpoint listens where --metrics says (127.0.0.1), not on every interface.
mport=$(awk '/listening on/ {print $6}' "$out")
hexport=$(printf '%04X' "$mport")
grep -q " 0100007F:$hexport 00000000:0000 0A " /proc/net/tcp || { echo "metrics not on 127.0.0.1:$mport"; exit 1; }
if grep -q " 00000000:$hexport 00000000:0000 0A " /proc/net/tcp; then echo "metrics on 0.0.0.0"; exit 1; fi
"$CTL" --address="$addr" metadata | grep "ComputeAttentionStream   yes" >/dev/null
# Shared memory goes through the Unix socket (the worker checks the caller owns the segment);
# over TCP it is refused.
"$CTL" --address="unix:$sock" attention --seq_len=300 --q_heads=4 --kv_heads=2 --head_dim=64 \
  --method=a_shape --transport=shm --layers=2 --check > "$TEST_TMPDIR/attention.out"
if "$CTL" --address="$addr" attention --seq_len=64 --q_heads=4 --kv_heads=2 --head_dim=64 \
  --transport=shm > "$TEST_TMPDIR/tcp_shm.out" 2>&1; then
  echo "shared memory over TCP accepted"; exit 1
fi
grep -q "PERMISSION_DENIED" "$TEST_TMPDIR/tcp_shm.out" || { cat "$TEST_TMPDIR/tcp_shm.out"; exit 1; }
grep -q "layer 1  device=cpu" "$TEST_TMPDIR/attention.out"
grep -q "relative L2 error" "$TEST_TMPDIR/attention.out"
"$CTL" --address="$addr" regions list | grep "^name" >/dev/null
# A bad flag is refused before anything starts.
if "$WORKER" --no_such_flag=1 2>/dev/null; then echo "bad flag accepted"; exit 1; fi
"$WORKER" --help 2>&1 | grep -- "--saap_assets_bytes: per GPU: Saap layer assets" >/dev/null
"$WORKER" --help 2>&1 | grep -- "--recall_length_exponent: recall guard" >/dev/null
if "$WORKER" --recall_length_exponent=steep 2>"$TEST_TMPDIR/bad_exp.err"; then echo "bad recall_length_exponent accepted"; exit 1; fi
grep -q -- "--recall_length_exponent: not a number" "$TEST_TMPDIR/bad_exp.err" || { cat "$TEST_TMPDIR/bad_exp.err"; exit 1; }
"$WORKER" --help 2>&1 | grep -- "--recall_adaptive: recall guard: the adaptive tries" >/dev/null
if "$WORKER" --recall_adaptive=sampled_lines,block_sparse 2>"$TEST_TMPDIR/bad_adaptive.err"; then
  echo "bad recall_adaptive accepted"; exit 1
fi
grep -q -- "--recall_adaptive: recall guard: adaptive method 'block_sparse'" "$TEST_TMPDIR/bad_adaptive.err" || {
  cat "$TEST_TMPDIR/bad_adaptive.err"; exit 1; }
# "auto" (the default) picks the tries per head; it takes no other method.
"$WORKER" --help 2>&1 | grep -- "--recall_adaptive: .*(default auto)" >/dev/null
if "$WORKER" --recall_adaptive=auto,flex_prefill 2>"$TEST_TMPDIR/bad_auto.err"; then
  echo "recall_adaptive auto in a list accepted"; exit 1
fi
grep -q -- "--recall_adaptive: recall guard: 'auto' picks the adaptive tries per head" "$TEST_TMPDIR/bad_auto.err" || {
  cat "$TEST_TMPDIR/bad_auto.err"; exit 1; }
if "$WORKER" --saap_assets_bytes=lots 2>"$TEST_TMPDIR/bad_saap.err"; then echo "bad saap_assets_bytes accepted"; exit 1; fi
grep -q -- "--saap_assets_bytes: not an integer: 'lots'" "$TEST_TMPDIR/bad_saap.err"
if "$WORKER" --saap_assets_bytes=-1 --listen=127.0.0.1:0 --metrics= --devices=cpu 2>"$TEST_TMPDIR/neg_saap.err"; then
  echo "negative saap_assets_bytes accepted"; exit 1
fi
grep -q "saap_assets_bytes must be >= 0" "$TEST_TMPDIR/neg_saap.err" || { cat "$TEST_TMPDIR/neg_saap.err"; exit 1; }
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || { echo "exit status $rc"; cat "$err"; exit 1; }
grep -q "event=worker_stopped" "$err"
[ ! -e "$sock" ] || { echo "socket file left behind"; exit 1; }
grep -q "event=request_done" "$err"
echo PASS
