import sys, struct, collections
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from parse import sections
from elf import text_sections
def mnem(src):
    t = src.strip().split()
    if t and t[0].startswith("@"): t = t[1:]
    return t[0] if t else ""
def words(code):
    return [struct.unpack_from("<QQ", code, i * 16) for i in range(len(code) // 16)]
def learn(csvfn, cubin, bits=12):
    s = sections(csvfn)[0]
    code = list(text_sections(cubin).values())[0]
    w = words(code)
    assert len(w) == len(s), (len(w), len(s))
    m = collections.defaultdict(collections.Counter)
    for (lo, hi), r in zip(w, s):
        m[lo & ((1 << bits) - 1)][mnem(r["Source"])] += 1
    return m, s, w
if __name__ == "__main__":
    m, s, w = learn(sys.argv[1], sys.argv[2])
    amb = {k: v for k, v in m.items() if len(v) > 1}
    print("keys", len(m), "ambiguous", len(amb))
    for k, v in list(amb.items())[:20]: print(hex(k), dict(v))
def decoder(m):
    d = {}
    for k, v in m.items():
        names = list(v)
        if len(names) == 1: d[k] = names[0]
        else:
            # common dotted prefix
            parts = [n.split(".") for n in names]
            pre = []
            for xs in zip(*parts):
                if len(set(xs)) == 1: pre.append(xs[0])
                else: break
            d[k] = ".".join(pre) + "*"
    return d
def listing(cubin, d, bits=12):
    code = list(text_sections(cubin).values())[0]
    return [d.get(lo & ((1 << bits) - 1), "?%x" % (lo & 0xfff)) for lo, hi in words(code)]
def listing2(cubin, d):
    code = list(text_sections(cubin).values())[0]
    out = []
    for lo, hi in words(code):
        k = lo & 0xfff
        n = d.get(k, "?%x" % k)
        if k == 0x9c5: n = ("WG.DEPBAR(hi=%x)" % (hi & 0xffffffff)) if (lo >> 47) & 1 else "WG.ARRIVE"
        if k == 0x91a: n = "DEPBAR.SB"
        if (lo >> 12) & 0x7 != 7: n = "@" + n   # predicate guard (PT = 7)
        out.append(n)
    return out
def report(cubin, d, win=120):
    L = listing2(cubin, d)
    for i, x in enumerate(L):
        if "WG.DEPBAR" in x:
            b = sum(1 for y in L[max(0, i-win):i] if "MUFU" in y)
            a = sum(1 for y in L[i:i+win] if "MUFU" in y)
            print("%5d %6x %-22s MUFU %d before / %d after (within %d)" % (i, i*16, x, b, a, win))
    return L
