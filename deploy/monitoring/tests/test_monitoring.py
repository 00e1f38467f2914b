"""deploy/monitoring: alert rules (promtool check/test rules), a live scrape of both servers
(promtool check metrics), and the Grafana dashboard (in sync with make_dashboard.py, every
expression parses, every metric and label it names is exported by the servers).

Needs $SPATTN_WORKER_BIN and $SPATTN_INDEX_BIN; promtool from PATH or
/opt/spattn-tools/bin/promtool (deploy/tools.sh), else the promtool cases are skipped.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np
import yaml

import spattn
from spattn.testing import WorkerProcess
from spattn_llm import config_convert

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # deploy/monitoring
PROMTOOL = shutil.which("promtool") or next(
    (p for p in ["/opt/spattn-tools/bin/promtool"] if os.path.exists(p)), None)
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
needs_promtool = unittest.skipIf(PROMTOOL is None, "promtool missing (deploy/tools.sh)")

# Labels Prometheus adds at scrape time, and the histogram bucket label.
TARGET_LABELS = {"job", "instance"}
PROMQL_WORDS = {"sum", "min", "max", "avg", "count", "rate", "irate", "increase", "by",
                "without", "histogram_quantile", "and", "or", "unless", "on", "ignoring",
                "group_left", "group_right", "bool", "offset", "topk", "bottomk", "abs",
                "clamp_min", "clamp_max", "absent", "time", "vector", "scalar", "le"}


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def parse_scrape(text):
    """{series name: set of label names} from the text exposition format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        if m:
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
            out.setdefault(m.group(1), set()).update(labels)
    return out


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def referenced(expr):
    """(metric names, {metric: matcher label names}, grouping label names) of a PromQL expr."""
    e = strip_strings(expr)
    metrics, matchers = set(), {}
    for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{([^}]*)\})?", e):
        name = m.group(1)
        before = e[:m.start()].rstrip()
        if name in PROMQL_WORDS or before.endswith(("by (", "by(")) or (
                e[m.end():].lstrip().startswith("(") and not m.group(2)):
            continue  # functions / aggregations / keywords
        if re.fullmatch(r"\d+[smhdwy]?", name):
            continue
        if not name.startswith("spattn_"):
            continue
        metrics.add(name)
        if m.group(3):
            matchers.setdefault(name, set()).update(
                re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(3)))
    grouping = set()
    for g in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", e):
        grouping.update(x.strip() for x in g.split(",") if x.strip())
    return metrics, matchers, grouping


def grafana_to_promql(expr):
    return (expr.replace("$__rate_interval", "5m").replace("$worker_job", ".*")
            .replace("$index_job", ".*"))


def dashboard():
    with open(os.path.join(HERE, "grafana", "spattn-dashboard.json")) as f:
        return json.load(f)


def dashboard_exprs():
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_exprs():
    with open(os.path.join(HERE, "alerts.yml")) as f:
        rules = yaml.safe_load(f)
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


class RulesTest(unittest.TestCase):
    @needs_promtool
    def test_check_rules(self):
        p = promtool("check", "rules", os.path.join(HERE, "alerts.yml"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout)

    @needs_promtool
    def test_rules_unit_tests(self):
        p = promtool("test", "rules", "alerts_test.yml", cwd=os.path.join(HERE, "tests"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_prometheusrule_in_sync(self):
        # deploy/k8s/base/monitoring/prometheusrule.yaml wraps alerts.yml for the Operator.
        p = subprocess.run([sys.executable, os.path.join(HERE, "make_prometheusrule.py"), "--check"])
        self.assertEqual(p.returncode, 0, "run deploy/monitoring/make_prometheusrule.py")

    def test_required_alerts_present(self):
        names = {n for n, _ in alert_exprs()}
        for a in ("SpattnHighErrorRate", "SpattnRecallBelowTarget", "SpattnQueueSaturated",
                  "SpattnIndexLinkDown", "SpattnP99LatencyHigh"):
            self.assertIn(a, names)


class DashboardStaticTest(unittest.TestCase):
    def test_in_sync_with_generator(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "make_dashboard.py"), "--check"])
        self.assertEqual(p.returncode, 0, "run deploy/monitoring/make_dashboard.py")

    def test_panels_well_formed(self):
        d = dashboard()
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        self.assertIn("datasource", [v["name"] for v in d["templating"]["list"]])
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}")

    def test_covers_required_topics(self):
        text = " ".join(e for _, e in dashboard_exprs())
        for metric in ("spattn_requests_total", "spattn_stage_duration_seconds_bucket",
                       "spattn_request_duration_seconds_bucket", "spattn_attention_density_ratio",
                       "spattn_attention_recall_ratio", "spattn_requests_in_flight", "spattn_queue_depth",
                       'kind="queue_full"', "spattn_gpu_memory_used_bytes",
                       "spattn_index_service_up", "spattn_index_published_version"):
            self.assertIn(metric, text)

    @needs_promtool
    def test_every_expression_parses(self):
        exprs = dashboard_exprs()
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:expr_{i}", "expr": grafana_to_promql(e)}
            for i, (_, e) in enumerate(exprs)]}]}
        path = os.path.join(TMP, "dashboard_rules.yml")
        with open(path, "w") as f:
            yaml.safe_dump(rules, f)
        p = promtool("check", "rules", path)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"SUCCESS: {len(exprs)} rules found", p.stdout)


class LiveScrapeTest(unittest.TestCase):
    """Both servers with traffic, so every family the dashboard and rules use has series."""

    @classmethod
    def setUpClass(cls):
        cls.procs = []
        data = tempfile.mkdtemp(dir=TMP)
        port_file = os.path.join(data, "ports")
        cls.procs.append(subprocess.Popen(
            [os.environ["SPATTN_INDEX_BIN"], f"--data_dir={data}/db", "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", f"--port_file={port_file}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(data, "index.log"), "w")))
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            gport, mport = f.read().split()
        index_addr = f"127.0.0.1:{gport}"
        cls.index_metrics = f"http://127.0.0.1:{mport}/metrics"
        cls.worker = WorkerProcess(os.environ["SPATTN_WORKER_BIN"], "--devices=cpu",
                                   "--cpu_threads=2", f"--index={index_addr}", log_dir=data)
        cls.worker_metrics = f"http://127.0.0.1:{cls.worker.metrics_port}/metrics"
        # Traffic: a published model (index RPCs, published version, watcher), requests with
        # recall, an error.
        conv = config_convert.convert(
            config_convert.from_minference([{"0": ["stream_llm", 16, 64, 0.9],
                                             "1": ["vertical_and_slash", 64, 256, 0.8]}]),
            "dash-model", num_layers=1, num_q_heads=2, num_kv_heads=1, head_dim=64)
        config_convert.publish(conv, index_addr)
        rng = np.random.default_rng(0)
        q = rng.standard_normal((256, 2, 64)).astype(np.float32)
        k = rng.standard_normal((256, 1, 64)).astype(np.float32)
        with spattn.Client(cls.worker.unix, timeout=60) as c:
            c.attend(q, k, k, model="dash-model", layer=0, estimate_recall=True)
            c.attend(q, k, k, method="a_shape", estimate_recall=True, transport="shm")
            with self_raises(spattn.SpattnError):
                c.attend(q, k, k, cu_seqlens=[0, 5])
        cls.scrapes = {}
        for name, url in (("worker", cls.worker_metrics), ("index", cls.index_metrics)):
            with urllib.request.urlopen(url, timeout=10) as r:
                cls.scrapes[name] = r.read().decode()
        cls.series = {}
        for text in cls.scrapes.values():
            for k2, v in parse_scrape(text).items():
                cls.series.setdefault(k2, set()).update(v)

    @classmethod
    def tearDownClass(cls):
        cls.worker.stop()
        for p in reversed(cls.procs):
            p.terminate()
            p.wait(timeout=30)

    @needs_promtool
    def test_promtool_check_metrics_worker(self):
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=self.scrapes["worker"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    @needs_promtool
    def test_promtool_check_metrics_index(self):
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=self.scrapes["index"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def check_names(self, exprs):
        for title, expr in exprs:
            metrics, matchers, grouping = referenced(expr)
            self.assertTrue(metrics, f"{title}: no spattn metric in {expr}")
            known = set(TARGET_LABELS) | {"le"}
            for m in metrics:
                self.assertIn(m, self.series, f"{title}: {m} is not exported by the servers")
                known |= self.series[m]
            for m, labels in matchers.items():
                extra = labels - self.series[m] - TARGET_LABELS
                self.assertFalse(extra, f"{title}: {m} has no label(s) {extra}")
            self.assertFalse(grouping - known, f"{title}: grouping labels {grouping - known}")

    def test_dashboard_names_exported_metrics(self):
        self.check_names(dashboard_exprs())

    def test_alert_rules_name_exported_metrics(self):
        self.check_names(alert_exprs())

    def test_reference_parser_catches_unknown_names(self):
        with self.assertRaises(AssertionError):
            self.check_names([("bogus", 'sum by (rpc) (rate(spattn_no_such_total[5m]))')])
        with self.assertRaises(AssertionError):
            self.check_names([("bogus", 'sum(rate(spattn_requests_total{colour="red"}[5m]))')])
        with self.assertRaises(AssertionError):
            self.check_names([("bogus", 'sum by (colour) (rate(spattn_requests_total[5m]))')])


class self_raises:
    def __init__(self, exc):
        self.exc = exc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            raise AssertionError(f"{self.exc.__name__} not raised")
        return issubclass(exc_type, self.exc)


if __name__ == "__main__":
    unittest.main()
