#!/usr/bin/env python3
"""Per-cell TFLOP/s of a run's bench.jsonl: A/B sets (ab/en, ab/late, ab/k0) and base / new, with
the geometric means of en / late, k0 / late and new / base (32K, 128K). Usage: summarize.py DIR"""
import collections, json, math, sys
R = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1] + '/bench.jsonl'):
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    if r['kernel'] == 'index_stats':
        continue
    k = (r['seq_len'] // 1024, 0 if r['kernel'].startswith('dense') else r['block_m'],
         r['kernel'].replace('_hopper', '').replace('sparse_', ''), round(r['density'], 3))
    R[k][r['tag']].append((r['tflops'], r.get('vs_dense', 0)))
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float('nan')
mean = lambda t, x: sum(a for a, _ in t[x]) / len(t[x]) if t.get(x) else None
ab, k0, bn = [], [], collections.defaultdict(list)
print('| len | bm | index, density | ab en | ab late | ab k0 | en / late | base (share) | new (share) | new / base |')
print('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')
for k in sorted(R):
    t = R[k]
    f = lambda x: ' / '.join('%.0f' % a for a, _ in t.get(x, [])) or '—'
    g = lambda x: ('%.0f (%.2f)' % t[x][0]) if t.get(x) else '—'
    el = nb = ''
    if mean(t, 'ab/en') and k[1]:
        r1 = mean(t, 'ab/en') / mean(t, 'ab/late'); ab.append(r1); el = '%.3f' % r1
        k0.append(mean(t, 'ab/k0') / mean(t, 'ab/late'))
    if mean(t, 'base') and k[1]:
        r2 = mean(t, 'new') / mean(t, 'base'); bn[k[0]].append(r2); nb = '%.3f' % r2
    print('| %dK | %s | %s %s | %s | %s | %s | %s | %s | %s | %s |' % (k[0], k[1] or '—', k[2], k[3], f('ab/en'), f('ab/late'), f('ab/k0'), el, g('base'), g('new'), nb))
print('geomeans: en/late %.3f, k0/late %.3f, new/base %s' % (gm(ab), gm(k0), ', '.join('%dK %.3f' % (l, gm(v)) for l, v in sorted(bn.items()))))
