import csv, sys, collections
def sections(fn):
    secs = []; cur = None; hdr = None
    with open(fn) as f:
        for row in csv.reader(f):
            if not row: continue
            if row[0] == "Kernel Name": cur = []; secs.append(cur); hdr = None; continue
            if row[0] == "Address": hdr = row; continue
            if hdr and cur is not None: cur.append(dict(zip(hdr, row)))
    return secs
def num(x):
    try: return float(x)
    except: return 0.0
if __name__ == "__main__":
    for fn in sys.argv[1:]:
        for i, s in enumerate(sections(fn)):
            ie = sum(num(r["Instructions Executed"]) for r in s)
            smp = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in s)
            print(fn, i, len(s), "inst %.4g samples %.4g" % (ie, smp), s[0]["Address"], s[-1]["Address"])
