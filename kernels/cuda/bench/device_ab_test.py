"""device_ab/ on stand-ins, no GPU: pack.sh packs binaries (a base build's as <name>-base) that
lib.sh's ab_unpack restores byte for byte, and a run script's ab_test / ab_bench / ab_finish
leave the summary, the build shares, the stage table and the raw logs a device call returns."""
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACK = os.path.join(HERE, "device_ab", "pack.sh")

# Stand-ins for spattn-bench (one JSON line, a profiled build's stage lines when asked) and a
# gtest binary, written over the unpacked ELF files once their checksums are checked.
BENCH = """#!/bin/sh
case "$0" in *-base) b=2.0 ;; *) b=1.0 ;; esac
echo "{\\"method\\": \\"anchor\\", \\"seq_len\\": 32768, \\"index_build_ms\\": $b, \\"kernel_ms\\": 9.0, \\"density\\": 0.3, \\"recall\\": 0.97, \\"pairs\\": 7}"
echo "spattn-bench: workload llm_mix seq_len 32768 heads 32" >&2
[ -n "$SPATTN_GPU_BUILDER_PROFILE" ] && echo "gpu builder anchor: anchor $b ms fill 0.100 ms" >&2
exit 0
"""
GTEST = """#!/bin/sh
echo "[==========] 3 tests ran. filter=$1 knob=$KNOB"
echo "[  PASSED  ] 3 tests."
"""
NVIDIA_SMI = "#!/bin/sh\necho 'Stand-in GPU, 1.0, 1980 MHz'\n"


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class DeviceAbTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.root = os.path.join(self.tmp, "repo")
        # Two builds' binaries: distinct ELF files, so the patches and checksums differ.
        elves = [shutil.which(n) for n in ("true", "env", "echo")]
        self.assertTrue(all(elves), elves)
        for rel, src in (("tests/bench/spattn-bench", elves[0]), ("kernels/cuda/some_test", elves[1])):
            os.makedirs(os.path.dirname(os.path.join(self.root, "bazel-bin", rel)), exist_ok=True)
            shutil.copy(src, os.path.join(self.root, "bazel-bin", rel))
        self.base = os.path.join(self.tmp, "base")
        os.makedirs(self.base)
        shutil.copy(elves[2], os.path.join(self.base, "spattn-bench"))
        self.dest = os.path.join(self.root, ".device", "t")
        self.out = os.path.join(self.tmp, "out")
        os.makedirs(self.out)
        self.fakebin = os.path.join(self.tmp, "fakebin")
        os.makedirs(self.fakebin)
        write_exe(os.path.join(self.fakebin, "nvidia-smi"), NVIDIA_SMI)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def pack(self):
        env = dict(os.environ, DEST=self.dest, BASE=self.base)
        r = subprocess.run(["bash", PACK, "tests/bench/spattn-bench", "kernels/cuda/some_test"],
                           cwd=self.root, env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def run_script(self, body, **extra_env):
        script = os.path.join(self.dest, "run1.sh")
        with open(script, "w") as f:
            f.write('. "$(dirname "$0")/lib.sh" && ab_unpack\n' + body)
        env = dict(os.environ, OUT=self.out, W=os.path.join(self.tmp, "w"),
                   PATH=self.fakebin + ":" + os.environ["PATH"], **extra_env)
        return subprocess.run(["bash", script], env=env, capture_output=True, text=True)

    def test_pack_travels_base_and_new(self):
        self.pack()
        names = sorted(os.listdir(self.dest))
        for n in ("spattn-bench.zst", "some_test.patch.zst", "spattn-bench-base.patch.zst",
                  "lib.tar.xz", "md5.txt", "lib.sh", "shares.py", "builder_stages.py", "zl"):
            self.assertIn(n, names)
        with open(os.path.join(self.dest, "md5.txt")) as f:
            self.assertEqual(sorted(l.split()[1] for l in f),
                             ["some_test", "spattn-bench", "spattn-bench-base"])

    def test_unpack_restores_every_binary(self):
        self.pack()
        r = self.run_script("ls bin > \"$OUT/bins.txt\"\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "raw", "md5.txt")) as f:
            self.assertEqual(f.read().count(": OK"), 3)
        with open(os.path.join(self.out, "bins.txt")) as f:
            self.assertEqual(f.read().split(), ["some_test", "spattn-bench", "spattn-bench-base"])
        with open(os.path.join(self.out, "summary.txt")) as f:
            self.assertIn("Stand-in GPU", f.read())

    def test_tests_benches_and_finish(self):
        self.pack()
        body = "\n".join([
            "cat > bin/spattn-bench <<'X'", BENCH, "X",
            "cp bin/spattn-bench bin/spattn-bench-base",
            "cat > bin/some_test <<'X'", GTEST, "X",
            "ab_test unit 30 KNOB=7 bin/some_test --gtest_filter='*A*'",
            "ab_bench base 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1",
            "ab_bench new 32768 7 16 anchor SPATTN_GPU_BUILDER_PROFILE=1",
            "ab_bench newNP 32768 7 16 anchor",
            "AB_STOP_AFTER=-1 ab_bench late 32768 7 16 anchor",
            "ab_finish", ""])
        r = self.run_script(body)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "summary.txt")) as f:
            summary = f.read()
        self.assertIn("test unit rc=0 [  PASSED  ] 3 tests.", summary)
        for v in ("base", "new", "newNP"):
            self.assertIn("bench %s 32768 anchor rc=0" % v, summary)
        self.assertIn("skipped bench late 32768 anchor", summary)
        with open(os.path.join(self.out, "shares.txt")) as f:
            lines = f.read().splitlines()
        shares = {l.split()[0]: l for l in lines if not l.startswith("mean ")}
        self.assertIn("share 18.18%", shares["base"])  # 2 / (2 + 9)
        self.assertIn("share 10.00%", shares["new"])   # 1 / (1 + 9)
        # The per-variant means, each against the first variant's (base).
        means = {l.split()[1]: l for l in lines if l.startswith("mean ")}
        self.assertIn("n 1 build    2.000 kernel    9.000", means["base"])
        self.assertNotIn("of base's", means["base"])
        self.assertIn("of base's: build 0.500 kernel 1.000", means["new"])
        with open(os.path.join(self.out, "stages.txt")) as f:
            stages = f.read()
        self.assertIn("anchor", stages)
        self.assertNotIn("newNP", stages)  # unprofiled runs carry no stage lines
        self.assertFalse(os.path.exists(os.path.join(self.out, "raw")))
        with tarfile.open(os.path.join(self.out, "raw.tar.xz")) as t:
            members = t.getnames()
        self.assertIn("raw/test_unit.log", members)
        self.assertIn("raw/bench_base.err", members)
        with tarfile.open(os.path.join(self.out, "raw.tar.xz")) as t:
            log = t.extractfile("raw/test_unit.log").read().decode()
        self.assertIn("filter=--gtest_filter=*A* knob=7", log)


if __name__ == "__main__":
    unittest.main()
