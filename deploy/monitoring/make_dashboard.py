#!/usr/bin/env python3
"""Writes grafana/spattn-dashboard.json (Grafana 10 JSON model, Prometheus datasource picked by the
`datasource` variable). The panels' PromQL lives here; tests/test_monitoring.py checks every
expression parses (promtool) and names only metrics the servers export.
    deploy/monitoring/make_dashboard.py [--check]
"""
import json
import os
import sys

RI = "$__rate_interval"
W = '{job=~"$worker_job"}'
I = '{job=~"$index_job"}'


def sel(base, extra=""):
    """Adds the job matcher (and `extra` matchers) to a metric name."""
    job = base  # name
    index_side = job.startswith("spattn_index_") and job != "spattn_index_service_up"
    m = I if index_side else W
    inner = m[1:-1] + (", " + extra if extra else "")
    return f"{job}{{{inner}}}"


NOT_OK = 'code!="OK"'
QUEUE_FULL = 'kind="queue_full"'
EXHAUSTED = 'code="RESOURCE_EXHAUSTED"'
INDEX_BUILD_INFO = 'spattn_build_info{job=~"$index_job", component="index"}'

# (row title, [(panel title, unit, [(expr, legend)])])
ROWS = [
    ("Requests", [
        ("Request rate by RPC and code", "reqps", [
            (f"sum by (rpc, code) (rate({sel('spattn_requests_total')}[{RI}]))", "{{rpc}} {{code}}")]),
        ("Error ratio by RPC (non-OK / all)", "percentunit", [
            (f"sum by (rpc) (rate({sel('spattn_requests_total', NOT_OK)}[{RI}])) / "
             f"sum by (rpc) (rate({sel('spattn_requests_total')}[{RI}]))", "{{rpc}}")]),
        ("Errors by kind", "ops", [
            (f"sum by (kind) (rate({sel('spattn_errors_total')}[{RI}]))", "{{kind}}")]),
        ("Prefill tokens / s", "short", [
            (f"sum(rate({sel('spattn_prefill_tokens_total')}[{RI}]))", "tokens/s")]),
    ]),
    ("Latency", [
        ("Request latency percentiles", "s", [
            (f"histogram_quantile({q}, sum by (le) (rate({sel('spattn_request_duration_seconds_bucket')}[{RI}])))",
             f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)]),
        ("Stage latency p50 by stage", "s", [
            (f"histogram_quantile(0.5, sum by (le, stage) (rate({sel('spattn_stage_duration_seconds_bucket')}[{RI}])))",
             "{{stage}}")]),
        ("Stage latency p99 by stage", "s", [
            (f"histogram_quantile(0.99, sum by (le, stage) (rate({sel('spattn_stage_duration_seconds_bucket')}[{RI}])))",
             "{{stage}}")]),
    ]),
    ("Sparsity and fidelity", [
        ("Mean attention density by method", "percentunit", [
            (f"sum by (method) (rate({sel('spattn_attention_density_ratio_sum')}[{RI}])) / "
             f"sum by (method) (rate({sel('spattn_attention_density_ratio_count')}[{RI}]))",
             "{{method}}")]),
        ("Attention recall by method (mean and p10)", "percentunit", [
            (f"sum by (method) (rate({sel('spattn_attention_recall_ratio_sum')}[{RI}])) / "
             f"sum by (method) (rate({sel('spattn_attention_recall_ratio_count')}[{RI}]))",
             "mean {{method}}"),
            (f"histogram_quantile(0.1, sum by (le, method) (rate({sel('spattn_attention_recall_ratio_bucket')}[{RI}])))",
             "p10 {{method}}")]),
        ("Heads per method / s", "ops", [
            (f"sum by (method) (rate({sel('spattn_method_selected_total')}[{RI}]))", "{{method}}")]),
    ]),
    ("Capacity", [
        ("Queue depth (waiting, not running) per device", "short", [
            (f"max by (instance, device) ({sel('spattn_queue_depth')})", "{{instance}} {{device}}")]),
        ("Requests in flight (queued + running) per worker", "short", [
            (f"sum by (instance) ({sel('spattn_requests_in_flight')})", "{{instance}}")]),
        ("Shed requests (queue full) / s", "ops", [
            (f"sum(rate({sel('spattn_errors_total', QUEUE_FULL)}[{RI}]))", "queue full"),
            (f"sum by (rpc) (rate({sel('spattn_requests_total', EXHAUSTED)}[{RI}]))",
             "RESOURCE_EXHAUSTED {{rpc}}")]),
        ("GPU memory used per worker", "bytes", [
            (f"sum by (instance) ({sel('spattn_gpu_memory_used_bytes')})", "{{instance}}")]),
        ("Transfer bytes / s by direction and handle", "Bps", [
            (f"sum by (direction, handle_kind) (rate({sel('spattn_transfer_bytes_total')}[{RI}]))",
             "{{direction}} {{handle_kind}}")]),
    ]),
    ("Index service", [
        ("Index service reachable (worker's view)", "short", [
            (f"min by (instance) ({sel('spattn_index_service_up')})", "{{instance}}")]),
        ("Index service instances exporting", "short", [
            (f"count({INDEX_BUILD_INFO})", "instances")]),
        ("Published version per model", "short", [
            (f"max by (model) ({sel('spattn_index_published_version')})", "{{model}}")]),
        ("Index RPC rate by RPC and code", "reqps", [
            (f"sum by (rpc, code) (rate({sel('spattn_index_rpc_requests_total')}[{RI}]))",
             "{{rpc}} {{code}}")]),
        ("Index RPC latency p99", "s", [
            (f"histogram_quantile(0.99, sum by (le, rpc) (rate({sel('spattn_index_rpc_duration_seconds_bucket')}[{RI}])))",
             "{{rpc}}")]),
        ("RocksDB operations / s", "ops", [
            (f"sum by (op, cf, result) (rate({sel('spattn_index_rocksdb_ops_total')}[{RI}]))",
             "{{op}} {{cf}} {{result}}")]),
        ("WatchPublished streams", "short", [
            (f"sum({sel('spattn_index_watchers')})", "watchers")]),
    ]),
]


def build():
    panels, pid, y = [], 1, 0
    ds = {"type": "prometheus", "uid": "${datasource}"}
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid += 1
        y += 1
        for i, (title, unit, targets) in enumerate(row_panels):
            panels.append({
                "id": pid, "type": "timeseries", "title": title, "datasource": ds,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                            "tooltip": {"mode": "multi"}},
                "targets": [{"refId": chr(ord("A") + j), "datasource": ds, "expr": e,
                             "legendFormat": legend} for j, (e, legend) in enumerate(targets)],
            })
            pid += 1
        y += 8 * ((len(row_panels) + 1) // 2)
    var = lambda name, label, default: {
        "name": name, "label": label, "type": "custom", "query": default,
        "current": {"text": default, "value": default}, "hide": 0,
        "options": [{"text": default, "value": default, "selected": True}]}
    return {
        "title": "spattn", "uid": "spattn-overview", "schemaVersion": 39, "version": 1,
        "tags": ["spattn"], "timezone": "utc", "refresh": "30s", "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "hide": 0},
            var("worker_job", "worker job (regex)", ".*spattn-worker.*|.*llm-server.*"),
            var("index_job", "index job (regex)", ".*spattn-index.*"),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def main(argv):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grafana",
                        "spattn-dashboard.json")
    text = json.dumps(build(), indent=1) + "\n"
    if "--check" in argv:
        with open(path) as f:
            return 0 if f.read() == text else 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
