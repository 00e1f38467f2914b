"""sparse_timeline.py on a made-up trace: the per-item fit (period = a + b * tiles, so a / b is the
item's fixed cost in tile steps), the item-change gaps, and one summary per dump."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "sparse_timeline.py")


def trace(label, tiles, a, b):
    """One CTA whose item n has tiles[n] tiles and lasts a + b * tiles[n] cycles (first S to
    first S); the consumer waits 100 cycles for Q, 200 for the first K, 100 to its first S; the
    epilogue takes 150 cycles."""
    lines = [json.dumps({"trace": label, "items": len(tiles), "ctas": 1, "block_m": 128})]
    s = 1000
    for n, t in enumerate(tiles):
        period = a + b * t
        q = [s - 400, s - 300, s - 100, s, s + period - 350, s + period - 200]
        p = [s - 900, s - 800, s - 700, s - 600, s + period - 500]
        lines.append(json.dumps({"c": 0, "n": n, "tiles": t, "p": p, "q": q,
                                 "kw": 10 * t, "vw": 5 * t, "tw": 7}))
        s += period
    return "\n".join(lines) + "\n"


class SparseTimelineTest(unittest.TestCase):
    def setUp(self):
        self.path = os.path.join(tempfile.mkdtemp(), "trace.jsonl")
        with open(self.path, "w") as f:
            f.write(trace("ranges bm128", [2, 4, 6, 8, 10], a=5000, b=2500))
            f.write("not json: a log line between dumps\n")
            f.write(trace("columns bm64", [1, 3, 5], a=3000, b=1000))

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, self.path] + list(args),
                              capture_output=True, text=True)

    def test_fit_and_gaps(self):
        r = self.run_tool("--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        s = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([x["trace"] for x in s], ["ranges bm128", "columns bm64"])
        a = s[0]
        self.assertEqual((a["items"], a["ctas"], a["block_m"]), (5, 1, 128))
        self.assertEqual(a["tiles_per_item"], 6.0)
        # The last item has no successor: the fit runs over items 0-3.
        self.assertEqual((a["fit_a_cycles"], a["fit_b_cycles_per_tile"]), (5000, 2500))
        self.assertEqual(a["fixed_tile_steps"], 2.0)
        self.assertEqual((a["med_c_waitq"], a["med_c_waitk0"], a["med_c_toqk"]), (100, 200, 100))
        self.assertEqual((a["med_change"], a["med_epi"], a["med_lookup"]), (400, 150, 100))
        self.assertEqual(s[1]["fixed_tile_steps"], 3.0)

    def test_table(self):
        r = self.run_tool()
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.splitlines()
        self.assertEqual(out[0], "ranges bm128")
        self.assertIn("fixed_tile_steps=2.0", out[1])
        self.assertIn("block_m=128  ctas=1", out[1])


if __name__ == "__main__":
    unittest.main()
