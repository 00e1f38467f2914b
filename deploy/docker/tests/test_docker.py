"""deploy/docker, checked without a container engine (none runs here): stages, runtime packages
against ldd of the Bazel-built binaries, HEALTHCHECK commands run for real against live servers,
default flags accepted by the binaries, ports and user agreeing with deploy/k8s.
$SPATTN_WORKER_BIN, $SPATTN_INDEX_BIN, $SPATTN_CTL_BIN come from Bazel.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # deploy/docker
K8S = os.path.join(os.path.dirname(HERE), "k8s")
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
BASE_PACKAGES = {"libc6", "libgcc-s1"}  # in every Debian image


def dockerfile(name):
    with open(os.path.join(HERE, name)) as f:
        text = f.read().replace("\\\n", " ")
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    stages, cur = [], None
    for l in lines:
        word, _, rest = l.partition(" ")
        word = word.upper()
        if word == "FROM":
            cur = {"from": rest.split()[0], "name": rest.split()[-1] if " AS " in rest.upper()
                   else None, "ins": []}
            stages.append(cur)
        elif cur is not None:
            cur["ins"].append((word, rest.strip()))
    return stages


def ins(stage, word):
    return [r for w, r in stage["ins"] if w == word]


def exec_form(rest):
    """HEALTHCHECK/ENTRYPOINT/CMD json array (after options)."""
    return json.loads(rest[rest.index("["):])


def packages_of(binary):
    """Debian packages owning the shared libraries `binary` loads (one dpkg -S for all; paths
    tried as ldd prints them and with /usr toggled, for merged-/usr systems)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = re.findall(r"=>\s+(/\S+)", out)
    cands = {}
    for path in paths:
        real = os.path.realpath(path)
        for c in (path, real):
            cands[c] = path
            cands[c[4:] if c.startswith("/usr/") else "/usr" + c] = path
    p = subprocess.run(["dpkg", "-S", *cands], capture_output=True, text=True)
    owned, pkgs = set(), set()
    for line in p.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path in cands:
            owned.add(cands[path])
            pkgs.add(pkg.split(":")[0])
    missing = set(paths) - owned
    if missing:
        raise AssertionError(f"no Debian package owns {sorted(missing)}")
    return pkgs


def runtime_packages(stage):
    pkgs = set()
    for run in ins(stage, "RUN"):
        m = re.search(r"apt-get install [^&]*", run)
        if m:
            pkgs |= {w for w in m.group(0).split()[2:] if not w.startswith("-")}
    return pkgs


def flags_of(binary):
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"^\s+--([a-z0-9_]+)", out.stdout + out.stderr, re.M))


def k8s_container(path, name):
    with open(os.path.join(K8S, path)) as f:
        obj = yaml.safe_load(f)
    spec = obj["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


class DockerfileTest(unittest.TestCase):
    maxDiff = None

    def check_common(self, name, binaries, ports, k8s_path, k8s_name):
        stages = dockerfile(name)
        self.assertGreaterEqual(len(stages), 2, "multi-stage")
        self.assertEqual(stages[0]["name"], "build")
        rt = stages[-1]
        self.assertEqual(rt["from"], "debian:bookworm-slim")
        self.assertIn("--from=build /out/ /", ins(rt, "COPY")[0])
        self.assertTrue(any("bazel build -c opt" in r for r in ins(stages[0], "RUN")))
        # Runtime packages = exactly what the binaries link.
        need = set()
        for b in binaries:
            need |= packages_of(b)
        have = runtime_packages(rt)
        self.assertEqual(need - have - BASE_PACKAGES, set(), f"{name} misses packages")
        self.assertEqual(have - need, set(), f"{name} installs packages nothing links")
        # Ports and user agree with the Kubernetes manifests.
        self.assertEqual(sorted(int(p) for p in " ".join(ins(rt, "EXPOSE")).split()), sorted(ports))
        c = k8s_container(k8s_path, k8s_name)
        self.assertEqual(sorted(p["containerPort"] for p in c["ports"]), sorted(ports))
        self.assertEqual(ins(rt, "USER"), [str(c["securityContext"]["runAsUser"])])
        hc = ins(rt, "HEALTHCHECK")
        self.assertEqual(len(hc), 1)
        return rt, exec_form(hc[0])

    def test_worker_image(self):
        rt, hc = self.check_common("worker.Dockerfile", [os.environ["SPATTN_WORKER_BIN"],
                                                         os.environ["SPATTN_CTL_BIN"]],
                                   [50051, 9464], "base/worker/deployment.yaml", "worker")
        self.assertIn("NVIDIA_VISIBLE_DEVICES=all", " ".join(ins(rt, "ENV")))
        self.assertEqual(exec_form(ins(rt, "ENTRYPOINT")[0]), ["/usr/local/bin/spattn-worker"])
        cmd = exec_form(ins(rt, "CMD")[0])
        self.assertLessEqual({a[2:].split("=")[0] for a in cmd},
                             flags_of(os.environ["SPATTN_WORKER_BIN"]))
        # The HEALTHCHECK command against a live worker on its port: SERVING -> exit 0.
        w = subprocess.Popen([os.environ["SPATTN_WORKER_BIN"], "--listen=127.0.0.1:0",
                              "--metrics=", "--devices=cpu"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        try:
            addr = re.search(r"listening on (\S+)", w.stdout.readline()).group(1)
            self.assertEqual(hc[0], "/usr/local/bin/spattnctl")
            args = [a.replace("127.0.0.1:50051", addr) for a in hc[1:]]
            p = subprocess.run([os.environ["SPATTN_CTL_BIN"], *args], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual((p.returncode, p.stdout.strip()), (0, "SERVING"), p.stderr)
        finally:
            w.terminate()
            w.wait(timeout=30)
        # ... and fails when nothing listens there.
        p = subprocess.run([os.environ["SPATTN_CTL_BIN"],
                            *[a.replace("127.0.0.1:50051", "127.0.0.1:1") for a in hc[1:]]],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)

    def test_index_image(self):
        rt, hc = self.check_common("index.Dockerfile", [os.environ["SPATTN_INDEX_BIN"],
                                                        os.environ["SPATTN_CTL_BIN"]],
                                   [50061, 9461], "base/index/statefulset.yaml", "index")
        cmd = exec_form(ins(rt, "CMD")[0])
        self.assertLessEqual({a[2:].split("=")[0] for a in cmd},
                             flags_of(os.environ["SPATTN_INDEX_BIN"]))
        data = tempfile.mkdtemp(dir=TMP)
        port_file = os.path.join(data, "ports")
        p = subprocess.Popen([os.environ["SPATTN_INDEX_BIN"], f"--data_dir={data}/db",
                              "--listen=127.0.0.1:0", f"--port_file={port_file}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                if os.path.exists(port_file):
                    break
                time.sleep(0.05)
            with open(port_file) as f:
                port = f.read().split()[0]
            args = [a.replace("127.0.0.1:50061", f"127.0.0.1:{port}") for a in hc[1:]]
            r = subprocess.run([os.environ["SPATTN_CTL_BIN"], *args], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("SERVING", r.stdout)
        finally:
            p.terminate()
            p.wait(timeout=30)
        # The backup CronJob's command exists in this image.
        self.assertIn("/usr/local/bin/spattnctl", " ".join(ins(dockerfile("index.Dockerfile")[0], "RUN")))

    def test_dockerignore(self):
        for name in ("worker.Dockerfile.dockerignore", "index.Dockerfile.dockerignore"):
            with open(os.path.join(HERE, name)) as f:
                lines = f.read().split()
            self.assertIn("bazel-*", lines)
            self.assertIn(".git", lines)

    @unittest.skipUnless(shutil.which("docker") and subprocess.run(
        ["docker", "info"], capture_output=True).returncode == 0, "no container engine runs here")
    def test_build_images(self):  # pragma: no cover - needs a daemon and network
        for name, tag in (("worker.Dockerfile", "spattn/worker:test"),
                          ("index.Dockerfile", "spattn/index:test")):
            root = os.path.dirname(os.path.dirname(HERE))
            subprocess.run(["docker", "build", "-f", os.path.join(HERE, name), "-t", tag, root],
                           check=True)


if __name__ == "__main__":
    unittest.main()
