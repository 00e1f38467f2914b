# Medians of the per-stage builder times (SPATTN_GPU_BUILDER_PROFILE=1 lines on stderr; the first
# build of each method, a warmup, left out) and each method's build minus its stage sum.
import collections, json, re, sys
for d in sys.argv[1:]:
    for v in ('new', 'base', 'newNP', 'baseNP'):
        try:
            err = open('%s/bench_%s.err' % (d, v)).read().splitlines()
            rows = [json.loads(l) for l in open('%s/bench_%s.jsonl' % (d, v))]
        except OSError:
            continue
        build = {(str(r['seq_len']), r['method']): r['index_build_ms'] for r in rows if 'error' not in r}
        seq, runs = None, collections.OrderedDict()
        for line in err:
            m = re.match(r'spattn-bench: workload .* seq_len (\d+)', line)
            if m: seq = m.group(1)
            m = re.match(r'gpu builder (\w+): (.*)', line)
            if m: runs.setdefault((seq, m.group(1)), []).append(re.findall(r'(\w+) ([\d.]+) ms', m.group(2)))
        for key, rs in runs.items():
            rs = rs[1:] if len(rs) > 1 else rs
            med = []
            for i, (n, _) in enumerate(rs[0]):
                x = sorted(float(r[i][1]) for r in rs if len(r) > i)
                med.append((n, x[len(x) // 2]))
            tot = sum(x for _, x in med)
            b = build.get(key)
            print('%s %-7s %7s %-16s %s | stages %.3f build %s gap %s' % (d, v, key[0], key[1],
                  ' '.join('%s %.3f' % m for m in med), tot, b, '%.3f' % (b - tot) if b else '-'))
