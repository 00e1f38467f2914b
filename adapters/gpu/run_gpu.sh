#!/usr/bin/env bash
# On the GPU machine (run tool, carry [".gpu-h6"], packed by adapters/gpu/pack_gpu.sh):
#   bash .gpu-h6/pypkg/run_gpu.sh
# Starts the CUDA worker (cuda:0 + cpu for fp32), runs the Python client tests against it (with
# a Python that has grpcio: python3 if it has one, else Debian 12's python3.11 carried as .debs),
# then the stand-in LLM layer (standin_torch.py with the machine's torch). Results under $OUT.
set -uo pipefail
D=.gpu-h6
W=/tmp/h6
OUT=${OUT:-/tmp/h6-out}
mkdir -p "$W" "$OUT"
tar -xJf "$D/bundle.tar.xz" -C "$W"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# Shared memory and CUDA IPC are accepted only through the Unix socket.
LD_LIBRARY_PATH="$W/lib" "$W/bin/spattn-worker" --listen="127.0.0.1:0,unix:$W/w.sock" --metrics= \
  --devices="${DEVICES:-cuda:0,cpu}" --gpu_staging_bytes=2147483648 >"$W/w.out" 2>"$OUT/worker.log" &
wpid=$!
for _ in $(seq 1 300); do grep -q "listening on" "$W/w.out" 2>/dev/null && break; sleep 0.1; done
cat "$W/w.out"
addr=$(awk '/listening on/ {print $4}' "$W/w.out")
[ -n "$addr" ] || { echo "worker did not start"; tail -20 "$OUT/worker.log"; exit 1; }
export PYTHONPATH="$PWD/$D/pypkg" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if python3 -c "import grpc, google.protobuf, numpy" 2>/dev/null; then
  PYC=(python3)
  torch_ipc=1
else
  mkdir -p "$W/deb"
  for f in "$D"/debs/*.deb; do dpkg -x "$f" "$W/deb"; done
  L="$W/deb/usr/lib/x86_64-linux-gnu"
  PYC=(env PYTHONHOME="$W/deb/usr" PYTHONPATH="$PWD/$D/pypkg:$W/deb/usr/lib/python3/dist-packages"
       LD_LIBRARY_PATH="$L:$W/deb/lib/x86_64-linux-gnu:$L/blas:$L/lapack:$W/lib"
       "$W/deb/usr/bin/python3.11")
  torch_ipc=0
fi
"${PYC[@]}" -c "import sys, grpc; print('client python', sys.version.split()[0], 'grpcio', grpc.__version__)"
SPATTN_WORKER_ADDRESS="unix:$W/w.sock" SPATTN_WORKER_TCP_ADDRESS="$addr" SPATTN_TEST_TORCH_CUDA=$torch_ipc "${PYC[@]}" \
  "$D/pypkg/junit_runner.py" --xml="$OUT/client_tests.xml" "$D/pypkg/test_client.py" \
  >"$OUT/client_tests.log" 2>&1
echo "client tests rc=$?"; grep -E "^(Ran|OK|FAILED)|\.\.\. (FAIL|ERROR)" "$OUT/client_tests.log"
rc=0
if [ "${STANDIN:-1}" = 1 ]; then
  python3 "$D/pypkg/standin_torch.py" --address="unix:$W/w.sock" \
    --client="${PYC[*]} $PWD/$D/pypkg/standin_client.py" --out="$OUT" 2>&1 | tee "$OUT/standin.log"
  rc=${PIPESTATUS[0]}
fi
kill -TERM "$wpid"; wait "$wpid"; echo "worker exit $?"
grep -E "event=(device_failed|slow_teardown)" "$OUT/worker.log" || true
exit $rc
