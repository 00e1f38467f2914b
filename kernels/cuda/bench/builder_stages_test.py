"""builder_stages.py on a made-up run: medians without the warm-up build, the gap to the bench's
index_build_ms, the build share, labels, and a clear error for a missing file."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "builder_stages.py")


class BuilderStagesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.prefix = os.path.join(self.dir, "bench_new")
        with open(self.prefix + ".jsonl", "w") as f:
            for seq, method, build, kernel in ((32768, "flex_prefill", 1.9, 4.6),
                                               (131072, "flex_prefill", 8.7, 63.5)):
                f.write(json.dumps({"method": method, "seq_len": seq, "index_build_ms": build,
                                    "kernel_ms": kernel, "total_ms": build + kernel}) + "\n")
            f.write(json.dumps({"method": "anchor", "seq_len": 32768, "error": "x"}) + "\n")
        with open(self.prefix + ".err", "w") as f:
            f.write("spattn-bench: workload llm_mix seq_len 32768 heads 32\n")
            # warm-up build (left out), then three timed ones
            f.write("gpu builder flex_prefill: est 9.000 ms select 9.000 ms\n")
            for est, sel in ((1.0, 0.2), (1.2, 0.3), (1.1, 0.1)):
                f.write("gpu builder flex_prefill: est %.3f ms select %.3f ms\n" % (est, sel))
            f.write("spattn-bench: workload llm_mix seq_len 131072 heads 32\n")
            f.write("gpu builder flex_prefill: est 8.000 ms\n")  # one build only: kept

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)

    def test_json_rows(self):
        r = self.run_tool("--json", "new=" + self.prefix)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(len(rows), 2)
        a, b = rows
        self.assertEqual((a["run"], a["seq_len"], a["method"], a["builds"]),
                         ("new", 32768, "flex_prefill", 3))
        self.assertEqual(a["stages"], {"est": 1.1, "select": 0.2})
        self.assertAlmostEqual(a["stage_sum_ms"], 1.3)
        self.assertAlmostEqual(a["gap_ms"], 0.6)
        self.assertAlmostEqual(a["build_share"], 1.9 / 6.5, places=4)
        self.assertEqual((b["seq_len"], b["builds"], b["stages"]), (131072, 1, {"est": 8.0}))
        self.assertAlmostEqual(b["gap_ms"], 0.7)

    def test_table_and_default_label(self):
        r = self.run_tool(self.prefix)
        self.assertEqual(r.returncode, 0, r.stderr)
        first = r.stdout.splitlines()[0]
        self.assertTrue(first.startswith("bench_new"), first)
        self.assertIn("est 1.100 select 0.200 | stages 1.300 build 1.900 gap 0.600 share 29.2%",
                      first)

    def test_missing_file(self):
        r = self.run_tool(os.path.join(self.dir, "nope"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("nope.jsonl", r.stderr)


if __name__ == "__main__":
    unittest.main()
