"""Per-cell table of an s20-dense / s21-dense run: SDPA (each pass), per variant the median
TFLOP/s over the ALT rounds, its ratio to SDPA's mean, and each round's value
(python3 cells.py OUT_DIR)."""
import collections, json, os, statistics, sys

out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
key = lambda r: (r["seq_len"], r["kv_heads"], r["head_dim"], r["causal"], r["dtype"])
sd = collections.defaultdict(list)
for r in rows("sdpa.jsonl"):
    sd[key(r)].append(r["tflops"])
ours = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows("bench.jsonl"):
    if not r["kernel"].startswith("dense"):
        continue
    ours[key(r)][r.get("tag", "").split("-", 1)[-1]].append(r["tflops"])
print("%-34s %-15s %s" % ("shape", "sdpa", "variant median (x sdpa mean) [rounds]"))
for k in sorted(ours):
    n, kvh, d, c, dt = k
    s = sd.get(k, [])
    ref = statistics.mean(s) if s else float("nan")
    cells = []
    for v, xs in ours[k].items():
        m = statistics.median(xs)
        cells.append("%s %.0f (%.3f) [%s]" % (v, m, m / ref, "/".join("%.0f" % x for x in xs)))
    print("%-34s %-15s %s" % ("%dK %s %s d%d %s" % (n // 1024, dt, "MHA" if kvh == 32 else "GQA",
                                                    d, "causal" if c else "full"),
                              "/".join("%.0f" % x for x in s), " | ".join(cells)))
