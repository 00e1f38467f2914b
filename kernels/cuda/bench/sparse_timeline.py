#!/usr/bin/env python3
"""Summarizes the sparse kernel's timeline dumps (SPATTN_HOPPER_TRACE, dense_fa3.cu).

Usage: sparse_timeline.py TRACE.jsonl [--json]

A dump is a header line ({"trace": label, "items", "ctas", "block_m", "clock_khz", ...}) and one
line per (CTA c, item ordinal n) with SM-cycle stamps relative to the CTA's first:
  p: producer [round start, item looked up, Q issued, first K issued, last V issued]
  q: consumer warpgroup 0 [waits for the item, Q landed, first K landed, first S issued,
     last P V done, epilogue stored]
  kw / vw / tw: the consumer's K / V / ping-pong turn wait cycles from the item's Q to the next's
  eq (session 24's run-1 / run-2 traces only): the item's Q was issued during the previous item
     (the early lookup of those runs, SPATTN_HOPPER_EARLY_ITEM; reverted, NOTES.md session 24)
Per dump it prints the median / mean (cycles) of each gap over the items that are not a CTA's
first, and the fit of the consumer's item period (first S of item n to first S of item n + 1)
against the item's tiles: period = a + b * tiles, so a / b is the item's fixed cost in tile steps.
"""
import json
import sys


def median(v):
    v = sorted(v)
    if not v:
        return float("nan")
    m = len(v) // 2
    return v[m] if len(v) % 2 else 0.5 * (v[m - 1] + v[m])


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def fit(xs, ys):
    n = len(xs)
    if n < 2:
        return float("nan"), float("nan")
    mx, my = mean(xs), mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan"), my / mx if mx else float("nan")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def summarize(head, recs):
    by_cta = {}
    for r in recs:
        by_cta.setdefault(r["c"], []).append(r)
    gaps = {k: [] for k in ("lookup", "p_q", "p_k0", "p_item", "c_waitq", "c_waitk0", "c_toqk",
                            "epi", "lead_k0", "period", "kw", "vw", "tw", "change")}
    xs, ys = [], []
    early = 0
    tiles_all = []
    for c, rs in by_cta.items():
        rs.sort(key=lambda r: r["n"])
        for i, r in enumerate(rs):
            p, q = r["p"], r["q"]
            tiles_all.append(r["tiles"])
            early += r.get("eq", 0)
            if i > 0:
                gaps["lookup"].append(p[1] - p[0])
                if p[2] >= 0 and not r.get("eq", 0):
                    gaps["p_q"].append(p[2] - p[1])
                gaps["p_k0"].append(p[3] - p[1])
                gaps["c_waitq"].append(q[1] - q[0])
                gaps["c_waitk0"].append(q[2] - q[1])
                gaps["c_toqk"].append(q[3] - q[2])
                gaps["lead_k0"].append(q[2] - p[3])
                gaps["change"].append(q[3] - q[0])
                prev = rs[i - 1]
                if prev["q"][5] >= 0 and prev["q"][4] >= 0:
                    gaps["epi"].append(prev["q"][5] - prev["q"][4])
                gaps["p_item"].append(p[4] - p[1] if p[4] >= 0 else 0)
            if i + 1 < len(rs) and rs[i + 1]["q"][3] >= 0 and q[3] >= 0:
                per = rs[i + 1]["q"][3] - q[3]
                gaps["period"].append(per)
                xs.append(r["tiles"])
                ys.append(per)
                gaps["kw"].append(r["kw"])
                gaps["vw"].append(r["vw"])
                gaps["tw"].append(r["tw"])
    a, b = fit(xs, ys)
    out = {
        "trace": head.get("trace", ""),
        "items": len(recs),
        "ctas": len(by_cta),
        "block_m": head.get("block_m"),
        "tiles_per_item": round(mean(tiles_all), 2),
        "early_q_share": round(early / max(1, len(recs)), 3),
        "fit_a_cycles": round(a, 0),
        "fit_b_cycles_per_tile": round(b, 1),
        "fixed_tile_steps": round(a / b, 2) if b and b == b else None,
        "period_over_tiles": round(sum(ys) / max(1, sum(xs)), 1),
        # The consumer's time from waiting for an item's Q to its first S, over all item time.
        "change_share": round(sum(gaps["change"]) / max(1, sum(ys)), 3),
    }
    for k, v in gaps.items():
        out["med_" + k] = round(median(v), 0)
        out["mean_" + k] = round(mean(v), 0)
    return out


def main():
    path = sys.argv[1]
    as_json = "--json" in sys.argv
    dumps = []
    head, recs = None, []
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "trace" in r:
            if head is not None:
                dumps.append((head, recs))
            head, recs = r, []
        else:
            recs.append(r)
    if head is not None:
        dumps.append((head, recs))
    # block_m and CTAs first: a block_m 64 dump's tiles are 64 x 64 on two CTAs an SM, its b
    # not comparable with a block_m 128 one's (NOTES.md session 34, s34-sparse2).
    cols = ["block_m", "ctas", "tiles_per_item", "early_q_share", "change_share", "fit_b_cycles_per_tile", "fit_a_cycles",
            "fixed_tile_steps", "med_lookup", "med_p_k0", "med_c_waitq", "med_c_waitk0",
            "med_c_toqk", "med_change", "med_epi", "med_lead_k0", "mean_kw", "mean_vw", "mean_tw"]
    for head, recs in dumps:
        s = summarize(head, recs)
        if as_json:
            print(json.dumps(s))
        else:
            print(s["trace"])
            print("  " + "  ".join("%s=%s" % (c, s[c]) for c in cols))


if __name__ == "__main__":
    main()
