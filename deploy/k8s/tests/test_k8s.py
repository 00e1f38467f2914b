"""Renders deploy/k8s with `kubectl kustomize` and checks the rendered objects' key fields:
probes, GPU, /dev/shm, ports that line up between config, containers, Services and
ServiceMonitors, the index StatefulSet's volumes and backup CronJob, the sidecar overlay; and
that every flag in the manifests/config files is a flag of the real binaries
($SPATTN_WORKER_BIN, $SPATTN_INDEX_BIN). Skipped where kubectl is missing.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # deploy/k8s
KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl")
                                      else None)


KUBECTL_DEBIAN = next((p for p in ["/opt/spattn-tools/bin/kubectl-debian"] if os.path.exists(p)),
                      None)
_copy = None


def render(path, kubectl=None):
    # kustomize refuses files that are symlinks leading out of its root (Bazel runfiles): render
    # a real copy.
    global _copy
    if _copy is None:
        _copy = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), "k8s")
        shutil.copytree(HERE, _copy, ignore=shutil.ignore_patterns("tests", "BUILD"))
    p = subprocess.run([kubectl or KUBECTL, "kustomize", os.path.join(_copy, path)], capture_output=True,
                       text=True, timeout=120,
                       env=dict(os.environ, HOME=os.environ.get("TEST_TMPDIR", "/tmp")))
    if p.returncode:
        raise RuntimeError(f"kubectl kustomize {path} failed: {p.stderr}")
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def flags_of(binary):
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"^\s+--([a-z0-9_]+)", out.stdout + out.stderr, re.M))


def conf_keys(text):
    return {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip()
            for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#")}


def arg_flags(args):
    return {a[2:].split("=", 1)[0] for a in args if a.startswith("--")}


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or
                                                       o["metadata"]["name"] == name)]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def pod_spec(obj):
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def containers(obj):
    s = pod_spec(obj)
    return s.get("initContainers", []) + s["containers"]


def container(obj, name):
    return next(c for c in containers(obj) if c["name"] == name)


@unittest.skipIf(KUBECTL is None, "kubectl not installed (deploy/tools.sh installs it)")
class K8sTestBase(unittest.TestCase):
    overlay = None

    @classmethod
    def setUpClass(cls):
        cls.objs = render(cls.overlay) if cls.overlay else []

    def check_services_select_pods(self):
        workloads = [o for o in self.objs if o["kind"] in ("Deployment", "StatefulSet")]
        for svc in (o for o in self.objs if o["kind"] == "Service"):
            sel = svc["spec"]["selector"]
            match = [w for w in workloads
                     if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v
                            for k, v in sel.items())]
            self.assertEqual(len(match), 1, f"Service {svc['metadata']['name']} selects {sel}")
            ports = {p["name"]: p["containerPort"] for c in containers(match[0])
                     for p in c.get("ports", [])}
            for p in svc["spec"]["ports"]:
                self.assertIn(p["targetPort"], ports, f"{svc['metadata']['name']} {p}")

    def check_prometheusrule(self):
        rule = one(self.objs, "PrometheusRule", "spattn")
        self.assertEqual(rule["apiVersion"], "monitoring.coreos.com/v1")
        alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
        self.assertIn("SpattnIndexLinkDown", alerts)

    def check_servicemonitors(self):
        for sm in (o for o in self.objs if o["kind"] == "ServiceMonitor"):
            self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
            sel = sm["spec"]["selector"]["matchLabels"]
            svcs = [s for s in self.objs if s["kind"] == "Service" and
                    all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
            self.assertEqual(len(svcs), 1, f"ServiceMonitor {sm['metadata']['name']}")
            port = sm["spec"]["endpoints"][0]["port"]
            self.assertIn(port, [p["name"] for p in svcs[0]["spec"]["ports"]])
            self.assertEqual(sm["spec"]["endpoints"][0]["path"], "/metrics")

    def check_config_volumes_exist(self):
        cms = {o["metadata"]["name"] for o in self.objs if o["kind"] == "ConfigMap"}
        pvcs = {o["metadata"]["name"] for o in self.objs if o["kind"] == "PersistentVolumeClaim"}
        for w in (o for o in self.objs if o["kind"] in ("Deployment", "StatefulSet", "CronJob")):
            for v in pod_spec(w).get("volumes", []):
                if "configMap" in v:
                    self.assertIn(v["configMap"]["name"], cms)
                if "persistentVolumeClaim" in v:
                    self.assertIn(v["persistentVolumeClaim"]["claimName"], pvcs)

    def worker_conf(self):
        cm = next(o for o in self.objs if o["kind"] == "ConfigMap" and
                  o["metadata"]["name"].startswith("spattn-worker-config-"))
        return conf_keys(cm["data"]["worker.conf"])

    @staticmethod
    def listens(conf):
        """(tcp host, tcp port, unix path or None) of the worker's --listen list."""
        tcp, unix = None, None
        for a in conf["listen"].split(","):
            a = a.strip()
            if a.startswith("unix:"):
                unix = a[len("unix:"):]
            else:
                tcp = a.rsplit(":", 1)
        return tcp[0], int(tcp[1]), unix

    def check_worker_container(self, c, conf):
        host, grpc_port, _ = self.listens(conf)
        # The kubelet's probes connect to the pod IP, not loopback.
        self.assertNotIn(host, ("127.0.0.1", "localhost"))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], grpc_port, probe)
        self.assertEqual(c["readinessProbe"]["grpc"]["service"], "spattn.v1.AttentionService")
        self.assertEqual(c["livenessProbe"]["grpc"]["service"], "")
        self.assertGreaterEqual(c["startupProbe"]["failureThreshold"] *
                                c["startupProbe"]["periodSeconds"], 60)
        self.assertIn("/dev/shm", [m["mountPath"] for m in c["volumeMounts"]])
        metrics_port = int(conf["metrics"].rsplit(":", 1)[1])
        self.assertIn(metrics_port, [p["containerPort"] for p in c["ports"]])
        self.assertEqual(c["args"], ["--config=/etc/spattn/worker.conf"])
        if os.environ.get("SPATTN_WORKER_BIN"):
            self.assertLessEqual(set(conf), flags_of(os.environ["SPATTN_WORKER_BIN"]))

    def check_index(self):
        ss = one(self.objs, "StatefulSet", "spattn-index")
        headless = one(self.objs, "Service", ss["spec"]["serviceName"])
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        self.assertEqual(ss["spec"]["replicas"], 1)
        c = container(ss, "index")
        args = dict(a[2:].split("=", 1) for a in c["args"])
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        self.assertEqual([t["metadata"]["name"] for t in ss["spec"]["volumeClaimTemplates"]], ["data"])
        self.assertTrue(args["data_dir"].startswith(mounts["data"] + "/"))
        self.assertEqual(args["backup_root"], mounts["backups"])
        port = int(args["listen"].rsplit(":", 1)[1])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], port)
        if os.environ.get("SPATTN_INDEX_BIN"):
            self.assertLessEqual(arg_flags(c["args"]), flags_of(os.environ["SPATTN_INDEX_BIN"]))
        cj = one(self.objs, "CronJob", "spattn-index-backup")
        self.assertEqual(len(cj["spec"]["schedule"].split()), 5)
        self.assertEqual(cj["spec"]["concurrencyPolicy"], "Forbid")
        b = container(cj, "backup")
        self.assertIn("backup", b["args"])
        server = next(a for a in b["args"] if a.startswith("--server=")).split("=", 1)[1]
        host, sport = server.rsplit(":", 1)
        svc = one(self.objs, "Service", host)
        self.assertIn(int(sport), [p["port"] for p in svc["spec"]["ports"]])
        # The worker's --index names this Service and port.
        ihost, iport = self.worker_conf()["index"].rsplit(":", 1)
        self.assertEqual(ihost, "spattn-index")
        self.assertIn(int(iport), [p["port"] for p in svc["spec"]["ports"]])

    def check_namespaced(self, ns):
        for o in self.objs:
            if o["kind"] != "Namespace":
                self.assertEqual(o["metadata"].get("namespace"), ns, o["metadata"]["name"])


class StandaloneTest(K8sTestBase):
    overlay = "."

    def test_kinds(self):
        kinds = sorted(o["kind"] for o in self.objs)
        self.assertEqual(kinds, sorted(["Namespace", "ConfigMap", "Service", "Service", "Service",
                                        "Deployment", "StatefulSet", "PersistentVolumeClaim",
                                        "CronJob", "ServiceMonitor", "ServiceMonitor",
                                        "PrometheusRule"]))
        self.check_namespaced("spattn")

    def test_worker_deployment(self):
        d = one(self.objs, "Deployment", "spattn-worker")
        c = container(d, "worker")
        self.assertEqual(str(c["resources"]["limits"]["nvidia.com/gpu"]), "1")
        self.check_worker_container(c, self.worker_conf())
        dshm = next(v for v in pod_spec(d)["volumes"] if v["name"] == "dshm")
        self.assertEqual(dshm["emptyDir"]["medium"], "Memory")
        conf = self.worker_conf()
        drain = int(conf["drain_grace_s"]) + int(conf["drain_timeout_s"])
        self.assertGreater(pod_spec(d)["terminationGracePeriodSeconds"], drain)
        self.assertTrue(c["image"].startswith("spattn/worker:"))

    def test_index_statefulset_and_backup(self):
        self.check_index()

    def test_services_and_monitors(self):
        self.check_services_select_pods()
        self.check_servicemonitors()
        self.check_prometheusrule()
        self.check_config_volumes_exist()


class SidecarTest(K8sTestBase):
    overlay = "overlays/sidecar"

    def test_worker_in_llm_pod(self):
        self.assertFalse([o for o in self.objs if o["kind"] == "Deployment" and
                          o["metadata"]["name"] == "spattn-worker"])
        d = one(self.objs, "Deployment", "llm-server")
        spec = pod_spec(d)
        self.assertTrue(spec["shareProcessNamespace"])
        w = container(d, "spattn-worker")
        self.assertEqual(w["restartPolicy"], "Always")  # native sidecar
        conf = self.worker_conf()
        self.check_worker_container(w, conf)
        llm = container(d, "llm")
        self.assertIn("/dev/shm", [m["mountPath"] for m in llm["volumeMounts"]])
        # The LLM server reaches the worker through its Unix socket (shared memory and CUDA IPC
        # are accepted only there), in a directory both containers mount.
        _, _, sock = self.listens(conf)
        self.assertIsNotNone(sock)
        env = {e["name"]: e["value"] for e in llm["env"]}
        self.assertEqual(env["SPATTN_ADDRESS"], "unix:" + sock)
        sock_dir = os.path.dirname(sock)
        vols = {m["mountPath"]: m["name"] for m in w["volumeMounts"]}
        self.assertIn(sock_dir, vols)
        self.assertIn((vols[sock_dir], sock_dir),
                      [(m["name"], m["mountPath"]) for m in llm["volumeMounts"]])
        self.assertIn("emptyDir", next(v for v in spec["volumes"] if v["name"] == vols[sock_dir]))
        # One uid for both containers (segments are 0600, the worker checks the peer's uid).
        self.assertIn("runAsUser", spec["securityContext"])
        for c in (w, llm):
            self.assertNotIn("runAsUser", c.get("securityContext", {}))
        self.assertTrue(conf["shm_prefix"].startswith("/"))
        dshm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        self.assertEqual(dshm["emptyDir"]["medium"], "Memory")
        self.check_namespaced("llm")

    def test_index_and_monitors(self):
        self.check_index()
        self.check_services_select_pods()
        self.check_servicemonitors()
        self.check_prometheusrule()
        self.check_config_volumes_exist()


@unittest.skipIf(KUBECTL is None or KUBECTL_DEBIAN is None,
                 "Debian's kubectl (kustomize v2) not extracted (deploy/tools.sh)")
class KustomizeV2Test(unittest.TestCase):
    def test_same_objects_with_debian_kubectl(self):
        # Debian's kubernetes-client (kubectl 1.20) embeds kustomize v2: the manifests stay within
        # what it reads (bases:, patchesJson6902), and it renders the same objects (only the
        # ConfigMap name hash differs between kustomize versions).
        norm = lambda objs: re.sub(r"spattn-worker-config-[a-z0-9]{10}", "spattn-worker-config-H",
                                   json.dumps(sorted(objs, key=lambda o: (o["kind"], o["metadata"]["name"])),
                                              sort_keys=True))
        for overlay in (".", "overlays/sidecar"):
            self.assertEqual(norm(render(overlay, KUBECTL_DEBIAN)), norm(render(overlay)), overlay)


if __name__ == "__main__":
    unittest.main()
