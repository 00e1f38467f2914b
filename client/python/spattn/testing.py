"""Starting a real spattn-worker for tests (loopback TCP on a free port + a Unix socket, which
the worker requires for shared memory)."""
import os
import re
import shutil
import subprocess
import tempfile


class WorkerProcess:
    """`spattn-worker` on 127.0.0.1:0 and unix:<tmp>/worker.sock. `.unix` (shm and CUDA IPC),
    `.tcp`, `.metrics_port` (0 when metrics are off). Stop with `.stop()` (SIGTERM, drain)."""

    def __init__(self, binary, *args, metrics=True, log_dir=None):
        # Unix socket paths are limited to 108 bytes: keep it short, outside Bazel's deep tmp.
        self._dir = tempfile.mkdtemp(prefix="spattn-w-", dir="/tmp")
        self.socket = os.path.join(self._dir, "worker.sock")
        log_dir = log_dir or os.environ.get("TEST_TMPDIR") or self._dir
        self.log_path = os.path.join(log_dir, f"worker-{os.getpid()}-{id(self):x}.log")
        cmd = [binary, f"--listen=127.0.0.1:0,unix:{self.socket}",
               "--metrics=127.0.0.1:0" if metrics else "--metrics=", *args]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+) metrics_port (\d+)", line)
        if not m:
            self.proc.kill()
            self.proc.wait()
            with open(self.log_path) as f:
                raise RuntimeError(f"worker did not start: {line!r}\n{f.read()[-2000:]}")
        self.tcp = m.group(1)
        self.metrics_port = int(m.group(2))
        self.unix = "unix:" + self.socket

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.proc.returncode
