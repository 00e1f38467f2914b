#!/usr/bin/env bash
# The binaries' security flags end to end, with certificates made here by openssl:
# spattn-index with mTLS required + --auth_tokens_file + --backup_root, spattn-worker with TLS,
# tokens and a unix: socket, its --index_tls_* link, and spattnctl's --tls_* / --token_file.
set -euo pipefail
INDEX=$(realpath "$1")
WORKER=$(realpath "$2")
CTL=$(realpath "$3")
d="$TEST_TMPDIR/pki"
mkdir -p "$d"
cd "$d"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ca.key -out ca.crt -subj /CN=test-ca \
  -addext basicConstraints=critical,CA:TRUE 2>/dev/null
cert() {  # name CN SAN
  openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\n%s\n' "${3:+subjectAltName=$3}" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -out "$1.crt" -extfile "$1.ext" 2>/dev/null
}
cert server localhost DNS:localhost,IP:127.0.0.1
cert worker worker-1 DNS:worker-1
cert ops ops ""
printf 'token ops-token-0123456789abcdef write ops\ncert worker-1 read\ncert ops write\n' > auth
chmod 600 auth
echo ops-token-0123456789abcdef > ops.token
echo reader-token-0123456789abc > bad.token

"$INDEX" --data_dir="$d/db" --listen=127.0.0.1:0 --port_file="$d/index.port" \
  --tls_cert=server.crt --tls_key=server.key --tls_ca=ca.crt --tls_require_client_cert \
  --auth_tokens_file=auth --backup_root="$d/backups" 2>"$d/index.err" &
index_pid=$!
for _ in $(seq 1 100); do [ -s "$d/index.port" ] && break; sleep 0.1; done
[ -s "$d/index.port" ] || { echo "index did not start"; cat "$d/index.err"; exit 1; }
iport=$(cut -d' ' -f1 "$d/index.port")
ix=(--server="localhost:$iport" --tls_ca=ca.crt)
# No client certificate: the handshake fails.
if "$CTL" index "${ix[@]}" --timeout=3 models list >/dev/null 2>&1; then echo "no-cert client accepted"; exit 1; fi
# The read identity lists, cannot write; the write identity (or the token) writes.
"$CTL" index "${ix[@]}" --tls_cert=worker.crt --tls_key=worker.key models list
if "$CTL" index "${ix[@]}" --tls_cert=worker.crt --tls_key=worker.key models put --model=m \
  --layers=2 --q_heads=2 --kv_heads=1 --head_dim=64 2>"$d/put.err"; then echo "read role wrote"; exit 1; fi
grep -q PERMISSION_DENIED "$d/put.err"
"$CTL" index "${ix[@]}" --tls_cert=worker.crt --tls_key=worker.key --token_file=ops.token \
  models put --model=m --layers=2 --q_heads=2 --kv_heads=1 --head_dim=64
if "$CTL" index "${ix[@]}" --tls_cert=worker.crt --tls_key=worker.key --token_file=bad.token \
  models list 2>"$d/bad.err"; then echo "bad token accepted"; exit 1; fi
grep -q UNAUTHENTICATED "$d/bad.err"
# Backups: a name under --backup_root, never a path.
"$CTL" index "${ix[@]}" --tls_cert=ops.crt --tls_key=ops.key backup nightly | grep "backup 1 written" >/dev/null
[ -d "$d/backups/nightly" ]
if "$CTL" index "${ix[@]}" --tls_cert=ops.crt --tls_key=ops.key backup /tmp/elsewhere 2>"$d/b.err"; then
  echo "backup path accepted"; exit 1
fi
grep -q INVALID_ARGUMENT "$d/b.err"

sock="/tmp/spattn-tls-$$-$RANDOM.sock"
"$WORKER" --listen="127.0.0.1:0,unix:$sock" --metrics= --devices=cpu \
  --tls_cert=server.crt --tls_key=server.key --tls_ca=ca.crt --auth_tokens_file=auth \
  --index="localhost:$iport" --index_tls_ca=ca.crt --index_tls_cert=worker.crt \
  --index_tls_key=worker.key >"$d/worker.out" 2>"$d/worker.err" &
worker_pid=$!
for _ in $(seq 1 100); do grep -q "listening on" "$d/worker.out" 2>/dev/null && break; sleep 0.1; done
waddr=$(awk '/listening on/ {print $4}' "$d/worker.out")
[ -n "$waddr" ] || { echo "worker did not start"; cat "$d/worker.err"; exit 1; }
wport=${waddr##*:}
w=(--address="localhost:$wport" --tls_ca=ca.crt)
"$CTL" "${w[@]}" health | grep -x SERVING >/dev/null                       # open
if "$CTL" "${w[@]}" --timeout_s=3 --address="127.0.0.1:$wport" --tls_ca= health >/dev/null 2>&1; then
  echo "plaintext client reached the TLS worker"; exit 1
fi
if "$CTL" "${w[@]}" regions list 2>"$d/r.err"; then echo "anonymous regions list"; exit 1; fi
grep -q UNAUTHENTICATED "$d/r.err"
"$CTL" "${w[@]}" --token_file=ops.token regions list | grep "^name" >/dev/null
# Through the Unix socket with the token: shared memory of this user, model configs from the
# index service over mTLS.
"$CTL" --address="unix:$sock" --token_file=ops.token attention --model=m --layer=1 --seq_len=128 \
  --q_heads=2 --kv_heads=1 --head_dim=64 --transport=shm --check | grep "relative L2 error" >/dev/null
kill -TERM "$worker_pid" "$index_pid"
wait "$worker_pid" "$index_pid"
echo PASS
