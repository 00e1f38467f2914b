# Table of run1/bench.jsonl: per index, the knob sets' summed median ms over the rounds and
# TFLOP/s (x the dense kernel's line of the same set and round).
import json, collections, sys, os
fn = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "run1/bench.jsonl")
rows = [json.loads(l) for l in open(fn) if l.startswith("{")]
ms = collections.defaultdict(list); tf = collections.defaultdict(list)
for r in rows:
    if "ms" not in r: continue
    tag, s = r["tag"].split("/")
    key = (r["seq_len"], r["kernel"], r.get("density"))
    ms[key, s].append(r["ms"])
    tf[key, s].append("%.0f (%s)" % (r["tflops"], "%.2f" % r["vs_dense"] if r.get("vs_dense") else "-"))
keys = sorted({k for k, s in ms})
print("| len | line | density | ed1 | ed0 | bn128 | ed0/ed1 (summed median ms) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for k in keys:
    c = [" / ".join(tf.get((k, s), [])) for s in ("ed1", "ed0", "bn128")]
    a, b = sum(ms.get((k, "ed1"), [0])), sum(ms.get((k, "ed0"), [0]))
    print("| %dK | %s | %s | %s | %s | %s | %.3f |" % (k[0] // 1024, k[1], k[2], c[0], c[1], c[2], b / a if a else 0))
