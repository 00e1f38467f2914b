# s34-sparse2: run1 decomposition (run in an unpacked run1 folder with the full traces: raw/trace_*.jsonl, raw/bench_tr.jsonl, raw/cuda_bench.jsonl): tiles, fill (pairs over tiles x block_m^2), CTA spans, all-in cycles a tile.
import json, sys, collections
pairs = {}
for l in open("raw/bench_tr.jsonl"):
    try: r = json.loads(l)
    except ValueError: continue
    if "pairs" in r: pairs[r["method"]] = (r["pairs"], r["kernel_ms"], r.get("tflops"))
for l in open("raw/cuda_bench.jsonl"):
    r = json.loads(l)
    if r["kernel"].startswith("sparse"):
        pairs[r["kernel"]] = (4*0 + r["tflops"]*1e12*r["ms"]*1e-3/(4*128), r["ms"], r["tflops"])
for fn, key in [("a_shape","a_shape"),("block_sparse","block_sparse"),("vertical_slash","vertical_slash"),("sampled_lines","sampled_lines"),("cb",None)]:
    head=None; dumps=[]
    for l in open("raw/trace_%s.jsonl"%fn):
        r=json.loads(l)
        if "trace" in r:
            head=r; dumps.append((head,[])); continue
        dumps[-1][1].append(r)
    for head, recs in dumps:
        k = key or ("sparse_dense_index_hopper" if "dense_index" in head["trace"] else "sparse_ranges_hopper")
        bm = head["block_m"]; ctas=head["ctas"]
        tiles = sum(r["tiles"] for r in recs)
        span = collections.defaultdict(int); first=collections.defaultdict(lambda:1<<62)
        for r in recs:
            span[r["c"]] = max(span[r["c"]], r["q"][5])
        spans = sorted(span.values())
        P, ms, tf = pairs[k]
        fill = P / (tiles*bm*bm)
        mean_span = sum(spans)/len(spans)
        # cycles per tile per CTA over the whole span (all overheads included)
        per_tile = sum(spans)/tiles
        print("%-16s bm %d ctas %d items %d tiles %d tiles/item %.1f fill %.3f span mean %.0f max %.0f (max/mean %.3f) cyc/tile(all) %.0f kernel_ms %.3f -> %.0f cyc at 1.98GHz  tflops %.0f" % (
            k[:16], bm, ctas, len(recs), tiles, tiles/len(recs), fill, mean_span, spans[-1], spans[-1]/mean_span, per_tile, ms, ms*1.98e6, tf))
