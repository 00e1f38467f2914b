#!/usr/bin/env python3
"""Compares the .text.<kernel> sections of two cubins byte for byte, by kernel name.

usage: compare_text.py BASE.cubin NEW.cubin
Names are normalized for the anonymous namespace's per-file hash (_GLOBAL__N__<hash>_<n>_<file>).
Prints: kernels identical / differing / only in base / only in new, and each name of the last three.
Exit status 1 when a base kernel is missing or differs.
"""
import re
import subprocess
import sys


def sections(path):
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True,
                         check=True).stdout
    data = open(path, "rb").read()
    res = {}
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\.text\.\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)",
                     line)
        if not m:
            continue
        name, off, size = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
        name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_[A-Za-z0-9_]+?_cu_[0-9a-f]+", "_ANON_", name)
        res[name] = data[off:off + size]
    return res


def main():
    base, new = sections(sys.argv[1]), sections(sys.argv[2])
    same = [k for k in base if k in new and base[k] == new[k]]
    diff = [k for k in base if k in new and base[k] != new[k]]
    only_b = [k for k in base if k not in new]
    only_n = [k for k in new if k not in base]
    print(f"base kernels {len(base)}, new kernels {len(new)}: identical {len(same)}, "
          f"differing {len(diff)}, only in base {len(only_b)}, only in new {len(only_n)}")
    for tag, names in (("DIFFERS", diff), ("ONLY_BASE", only_b), ("ONLY_NEW", only_n)):
        for k in names:
            print(f"  {tag} {k} ({len(base.get(k, new.get(k)))} bytes)")
    return 1 if diff or only_b else 0


if __name__ == "__main__":
    sys.exit(main())
