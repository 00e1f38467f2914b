"""tests/gpu/report.py: the README's GPU table from a run's raw lines (runs on any machine)."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "report.py")


def bench(method, keys, index_ms, kernel_ms, density, recall, heads, tflops, q_len=None):
    return {"method": method, "seq_len": keys, "q_len": q_len or keys,
            "device": "cuda:0 (NVIDIA H100 80GB HBM3)", "index_build_ms": index_ms,
            "kernel_ms": kernel_ms, "density": density, "recall": recall,
            "recall_head_min": min(heads),
            "recall_heads": ",".join("%d:%.4f" % (i, h) for i, h in enumerate(heads)),
            "tflops": tflops}


class ReportTest(unittest.TestCase):
    def run_report(self, files, *args):
        paths = []
        with tempfile.TemporaryDirectory() as d:
            for name, lines in files.items():
                p = os.path.join(d, name)
                with open(p, "w") as f:
                    for r in lines:
                        f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
                paths.append(p)
            res = subprocess.run([sys.executable, REPORT] + paths + list(args),
                                 capture_output=True, text=True)
        return res

    def row(self, out, method):
        for line in out.splitlines():
            if line.startswith("| %s |" % method):
                return [c.strip() for c in line.strip("|").split("|")]
        self.fail("no row for %s in:\n%s" % (method, out))

    def test_ratios_share_oracle_heads_and_pair_rate(self):
        sdpa = {"kernel": "sdpa_cudnn", "seq_len": 32768, "ms": 14.0,
                "device": "NVIDIA H100 80GB HBM3"}
        lines = [
            bench("dense", 32768, 0.0, 14.0 * 0.9, 1.0, 1.0, [1.0] * 4, 640.0),
            bench("sampled_lines_bm128", 32768, 4.2, 1.4, 0.06, 0.955,
                  [0.96, 0.94, 0.929, 0.97], 320.0),
            {"method": "oracle_bm128", "seq_len": 32768, "q_len": 32768, "target": 0.95,
             "row_density": 0.02, "column_density": 0.05, "block_density": 0.12},
        ]
        res = self.run_report({"bench.jsonl": lines, "sdpa.jsonl": [sdpa]})
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("GPU: NVIDIA H100 80GB HBM3\n", res.stdout)  # one name, not two spellings
        self.assertIn("cuDNN SDPA 14.00 ms", res.stdout)
        dense = self.row(res.stdout, "dense")
        self.assertEqual(dense[4], "0.90x")
        sl = self.row(res.stdout, "sampled_lines_bm128")
        self.assertEqual(sl[3], "5.60")          # total
        self.assertEqual(sl[4], "0.40x")         # 5.6 / 14
        self.assertEqual(sl[5], "75.0%")         # build share 4.2 / 5.6
        self.assertEqual(sl[7], "1.20")          # 0.06 / oracle column density 0.05
        self.assertEqual(sl[9], "3/4")           # heads >= 0.93
        self.assertEqual(sl[10], "320 (0.50)")   # per-pair rate against dense's 640

    def test_chunk_shape_and_block_from_file_name(self):
        chunk = {"kernel": "sdpa_cudnn_chunk", "k_len": 1048576, "q_len": 65536, "ms": 1800.0}
        sl = bench("sampled_lines", 1048576, 400.0, 320.0, 0.13, 0.95, [0.95], 400.0, q_len=65536)
        res = self.run_report({"bench_1m_bm128.jsonl": [sl], "sdpa_chunk.jsonl": [chunk]})
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("### 1048576 keys, 65536 queries (cuDNN SDPA 1800.0 ms)", res.stdout)
        row = self.row(res.stdout, "sampled_lines_bm128")
        self.assertEqual(row[4], "0.40x")

    def test_target_flag_and_missing_sdpa(self):
        r = bench("guarded", 8192, 1.0, 3.0, 0.2, 0.985, [0.99, 0.975, 0.95], 300.0)
        res = self.run_report({"bench.jsonl": [r]}, "--target=0.98")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("cuDNN SDPA not in this run", res.stdout)
        self.assertIn("heads >= 0.96", res.stdout)
        row = self.row(res.stdout, "guarded")
        self.assertEqual(row[4], "-")
        self.assertEqual(row[9], "2/3")

    def test_error_lines_are_shown(self):
        err = {"method": "saap", "seq_len": 32768, "q_len": 32768, "error": "calibration timed out"}
        res = self.run_report({"bench.jsonl": [err]})
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("| saap | error: calibration timed out |", res.stdout)

    def test_bad_input_names_the_file_and_line(self):
        res = self.run_report({"bench.jsonl": [bench("dense", 8192, 0, 1, 1, 1, [1], 1), "{oops"]})
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("bench.jsonl:2: not a JSON line", res.stderr)
        res = self.run_report({"sdpa.jsonl": [{"kernel": "sdpa_cudnn", "seq_len": 8192, "ms": 1}]})
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("no spattn-bench lines", res.stderr)


if __name__ == "__main__":
    unittest.main()
