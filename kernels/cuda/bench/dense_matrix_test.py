"""Tests of the dense-matrix tools without a GPU: dense_matrix.py (the table: ratios, each side's
clock window, the nvidia-smi clock offset, knob sets) and dense_pairs.py (SDPA and cuda_bench
alternating per cell, sdpa_reference.py's warm-up rules) against a stand-in torch package and a
stand-in `cuda_bench --serve=1`."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, text):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))


def lines(path):
    with open(path) as f:
        return f.read().splitlines()


class DenseMatrixTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def run_table(self, tz_hours=0):
        # 40 samples 25 ms apart from t=1000 s; nvidia-smi prints local time (tz_hours ahead).
        epoch = 1000.0
        with open(os.path.join(self.dir, "summary.txt"), "w") as f:
            f.write("GPU\nepoch %.3f\n" % (epoch - 0.01))
        with open(os.path.join(self.dir, "clocks.csv"), "w") as f:
            for i in range(40):
                t = epoch + 0.025 * i
                stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(t + 3600 * tz_hours))
                mhz = 1500 if i < 20 else 1800  # first half: ours' window, second: cuDNN's
                f.write("%s.%03d, %d MHz, 700.00 W, 60, 0x0000000000000004\n" %
                        (stamp, int(round((t % 1) * 1000)) % 1000, mhz))
        cell = {"seq_len": 8192, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": 0,
                "dtype": "bf16"}
        with open(os.path.join(self.dir, "bench.jsonl"), "w") as f:
            for tag, ms in (("g1/new", 1.0), ("g1/old", 1.1)):
                f.write(json.dumps(dict(cell, kernel="dense_hopper", ms=ms, tflops=600,
                                        iters=10, tag=tag, t0=epoch, t1=epoch + 0.45)) + "\n")
        with open(os.path.join(self.dir, "sdpa.jsonl"), "w") as f:
            f.write(json.dumps(dict(cell, kernel="sdpa_cudnn", ms=0.95, ms_gpu=0.9, tflops=630,
                                    iters=5, t0=epoch + 0.55, t1=epoch + 0.95)) + "\n")
        out = subprocess.run([sys.executable, os.path.join(HERE, "dense_matrix.py"), self.dir,
                              "--csv"], capture_output=True, text=True, check=True).stdout
        return out

    def check_table(self, out):
        line = [l for l in out.splitlines() if l.startswith("8K bf16 GQA d128 full")][0]
        self.assertIn(" 0.950 ", line)  # ratio cuDNN ms / ours ms
        self.assertIn("1500 700W 60C 100%", line)  # ours' window
        self.assertIn("1800 700W 60C 100%", line)  # cuDNN's window
        self.assertIn(" 1.140 ", line)  # in cycles: 0.95 * 1800 / 1500
        self.assertIn("below 1.0: 1 8K bf16 GQA d128 full 0.950", out)
        self.assertIn("old 1.100 (0.909, 0.864)", out)  # the second knob set
        rows = lines(os.path.join(self.dir, "table.csv"))
        self.assertEqual(rows[1].split(",")[:4], ["8K bf16 GQA d128 full", "1.0", "0.95", "0.95"])

    def test_table(self):
        self.check_table(self.run_table())

    def test_clock_offset(self):
        self.check_table(self.run_table(tz_hours=5.5))


FAKE_TORCH = """
    import time
    float16 = "f16"
    bfloat16 = "bf16"
    LOG = []
    class Generator:
        def __init__(self, device=None): pass
        def manual_seed(self, s): return self
    def randn(*a, **k): return a
    class cuda:
        t = 0.0
        launches = 0
        class Event:
            def __init__(self, enable_timing=False): self.t = None
            def record(self): self.t = cuda.t
            def elapsed_time(self, o): return o.t - self.t
        @staticmethod
        def get_device_name(i): return "Fake"
        @staticmethod
        def synchronize(): pass
        @staticmethod
        def _sleep(c): LOG.append("sleep")
        @staticmethod
        def empty_cache(): pass
    from . import nn
"""
FAKE_F = """
    import os, time
    def scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=False):
        import torch
        n, d = q[2], q[3]
        torch.cuda.launches += 1
        # The first launch of a shape builds cuDNN's graph: 300 ms inside the events.
        torch.cuda.t += (n / 8192.0) ** 2 * (d / 128.0) * 2.0 + (300 if torch.cuda.launches == 1 else 0)
        with open(os.environ["SDPA_LOG"], "a") as f:
            f.write("sdpa %d %.6f\\n" % (n, time.time()))
"""
FAKE_ATTN = """
    import contextlib
    class SDPBackend:
        CUDNN_ATTENTION = 1
        FLASH_ATTENTION = 2
    @contextlib.contextmanager
    def sdpa_kernel(b):
        yield
"""
FAKE_BENCH = """
    import json, os, sys, time
    def flags(argv):
        return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    base = flags(sys.argv[1:])
    assert base.get("serve") == "1"
    for line in sys.stdin:
        f = dict(base, **flags(line.split()))
        with open(os.environ["SDPA_LOG"], "a") as log:
            log.write("ours %s %.6f\\n" % (f["seq_lens"], time.time()))
        print(json.dumps({"kernel": "dense_hopper", "seq_len": int(f["seq_lens"]),
                          "heads": int(f["heads"]), "kv_heads": int(f["kv_heads"]),
                          "head_dim": int(f["head_dim"]), "causal": int(f["causal"]),
                          "dtype": f["dtype"], "ms": 1.0, "tflops": 1.0, "tag": f["tag"]}),
              flush=True)
        print('{"served": 0}', flush=True)
"""


class DensePairsTest(unittest.TestCase):
    def test_pairs_alternate_and_warm_up(self):
        d = tempfile.mkdtemp()
        os.makedirs(os.path.join(d, "torch", "nn", "attention"))
        write(os.path.join(d, "torch", "__init__.py"), FAKE_TORCH)
        write(os.path.join(d, "torch", "nn", "__init__.py"), "from . import functional, attention\n")
        write(os.path.join(d, "torch", "nn", "functional.py"), FAKE_F)
        write(os.path.join(d, "torch", "nn", "attention", "__init__.py"), FAKE_ATTN)
        write(os.path.join(d, "bench.py"), FAKE_BENCH)
        env = dict(os.environ, PYTHONPATH=d, SDPA_LOG=os.path.join(d, "log"))
        subprocess.run(
            [sys.executable, os.path.join(HERE, "dense_pairs.py"), "--seq_lens=8192,16384",
             "--kv_heads=8", "--head_dim=128", "--causal=0", "--dtype=bf16", "--warmup=1",
             "--iters=3", "--warmup_ms=20", "--target_ms=40", "--presleep_us=10",
             "--backends=cudnn", "--bench=%s %s --tag=g1" % (sys.executable,
                                                             os.path.join(d, "bench.py")),
             "--sdpa_out=%s/sdpa.jsonl" % d, "--bench_out=%s/bench.jsonl" % d],
            env=env, check=True)
        order = []
        for line in lines(os.path.join(d, "log")):
            side, n = line.split()[:2]
            if not order or order[-1] != (side, n):
                order.append((side, n))
        # Cell 1: SDPA then ours; cell 2: ours then SDPA.
        self.assertEqual(order, [("sdpa", "8192"), ("ours", "8192"), ("ours", "16384"),
                                 ("sdpa", "16384")])
        sdpa = [json.loads(l) for l in lines(os.path.join(d, "sdpa.jsonl"))]
        self.assertEqual([r["seq_len"] for r in sdpa], [8192, 16384])
        # 8K: the graph-build launch does not end the warm-up (2 ms launches: 1 + 10 for 20 ms)
        # nor set the count (40 ms / 2 ms = 20 timed, every other one behind a GPU sleep).
        self.assertEqual(sdpa[0]["warmup_iters"], 11)
        self.assertEqual(sdpa[0]["iters"], 10)
        self.assertAlmostEqual(sdpa[0]["ms"], 2.0)
        self.assertAlmostEqual(sdpa[0]["ms_gpu"], 2.0)
        self.assertLessEqual(sdpa[0]["t0"], sdpa[0]["t1"])
        ours = [json.loads(l) for l in lines(os.path.join(d, "bench.jsonl"))]
        self.assertEqual([(r["seq_len"], r["heads"], r["tag"]) for r in ours],
                         [(8192, 32, "g1"), (16384, 32, "g1")])


class DenseNcuTableTest(unittest.TestCase):
    """dense_ncu_table.py on an ncu.txt laid out as run_dense_ncu.sh writes it (ncu's report
    lines as ncu 2025 prints them, cuDNN's JSON lines ahead of its reports)."""

    def test_cycles_and_cudnn_combinations(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "ncu.txt")

        def report(cycles, ms, ghz, hit=98.0, dram="Gbyte           1.50"):
            return ("    dram__bytes_read.sum                         %s\n"
                    "    gpu__time_duration.sum                          ms          %s\n"
                    "    lts__t_sector_hit_rate.pct                       %%           %s\n"
                    "    sm__cycles_elapsed.avg.per_second              Ghz            %s\n"
                    "    sm__cycles_elapsed.max                       cycle     %s\n"
                    % (dram, ms, hit, ghz, cycles))
        shape = "--seq_lens=8192 --kv_heads=8 --head_dim=128 --causal=0 --dtype=fp16"
        text = "=== ours %s (0s)\n" % shape
        text += "==PROF== Connected to process 1\n  DenseFa3Kernel (2320, 1, 1)x(384, 1, 1)\n"
        text += report("2,742,872", "1.93", "1.42")
        text += "=== rc=0 ours %s (3s)\n" % shape
        text += "=== ours %s [SPATTN_HOPPER_SLEEP_WAITS=0] (3s)\n" % shape
        text += report("2,600,000", "1.83", "1.42")
        text += "=== rc=0 ours %s [SPATTN_HOPPER_SLEEP_WAITS=0] (6s)\n" % shape
        text += "=== cudnn --seq_lens=8192 --kv_heads=8 --head_dim=128 --causal=0,1 --dtype=fp16\n"
        for c in (0, 1):
            text += json.dumps({"kernel": "sdpa_cudnn", "seq_len": 8192, "heads": 32,
                                "kv_heads": 8, "head_dim": 128, "causal": c,
                                "dtype": "fp16"}) + "\n"
        for cycles in ("9,000,000", "2,730,941", "1,600,000", "1,590,299"):
            text += "  cudnn_generated_fprop_kernel0_0 (132, 1, 1)x(384, 1, 1), Context 1\n"
            text += report(cycles, "1.90", "1.43", dram="Mbyte         100.70")
        text += "=== rc=0 cudnn (9s)\n"
        write(path, text)
        sys.path.insert(0, HERE)
        import dense_ncu_table
        cells = dense_ncu_table.parse(path, launches=2)
        full = cells[(8192, 8, 128, 0, "fp16")]
        self.assertEqual(full["ours"]["cycles"], 2742872)
        self.assertAlmostEqual(full["ours"]["ghz"], 1.42)
        self.assertEqual(full["ours [SPATTN_HOPPER_SLEEP_WAITS=0]"]["cycles"], 2600000)
        # The second report of the combination (after the warm-up) is cuDNN's row.
        self.assertEqual(full["cudnn"]["cycles"], 2730941)
        self.assertAlmostEqual(full["cudnn"]["dram_gb"], 0.1007)
        self.assertEqual(cells[(8192, 8, 128, 1, "fp16")]["cudnn"]["cycles"], 1590299)
        out = dense_ncu_table.table(cells)
        self.assertIn("8K fp16 GQA d128 full     ours", out)
        self.assertIn("%.3f" % (2730941 / 2742872), out)


if __name__ == "__main__":
    unittest.main()
