"""spattn Python client against a real worker on loopback.

The worker binary comes from $SPATTN_WORKER_BIN (Bazel passes //server:spattn-worker); with
$SPATTN_WORKER_ADDRESS set, that running worker is used instead. Outputs and LSE are compared with
the numpy reference (spattn.reference). Run: client/python/tests/run_python_tests.sh.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

import spattn
from spattn import cuda_ipc, reference
from spattn.shm import SharedMemoryRegion
from spattn.testing import WorkerProcess

_worker = None
_address = None       # unix:... (shared memory and CUDA IPC need the worker's Unix socket)
_tcp_address = None


def setUpModule():
    global _worker, _address, _tcp_address
    _address = os.environ.get("SPATTN_WORKER_ADDRESS")
    if _address:
        _tcp_address = os.environ.get("SPATTN_WORKER_TCP_ADDRESS")
        return
    _worker = WorkerProcess(os.environ["SPATTN_WORKER_BIN"], "--cpu_threads=2", "--devices=cpu",
                            "--queue_capacity=16")
    _address, _tcp_address = _worker.unix, _worker.tcp


def tearDownModule():
    if _worker is not None:
        _worker.stop()


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = spattn.Client(_address, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def check(self, result, q, k, v, cu_q=None, cu_k=None, atol=2e-3):
        ref_o, ref_lse = reference.attention(
            spattn.dtypes.to_float32(q, result.dtype) if result.dtype == "bf16" else q,
            spattn.dtypes.to_float32(k, result.dtype) if result.dtype == "bf16" else k,
            spattn.dtypes.to_float32(v, result.dtype) if result.dtype == "bf16" else v,
            cu_q, cu_k)
        np.testing.assert_allclose(result.output_float32(), ref_o, atol=atol, rtol=0)
        if result.lse is not None:
            self.assertEqual(result.lse.shape, ref_lse.shape)
            np.testing.assert_allclose(result.lse, ref_lse, atol=1e-3, rtol=1e-4)

    def test_health_and_metadata(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("spattn.v1.AttentionService"), "SERVING")
        self.assertTrue(self.client.is_ready())
        md = self.client.metadata()
        self.assertIn("dense", [m.name for m in md.methods])
        self.assertIn("ComputeAttentionStream", [r.name for r in md.rpcs])
        self.assertTrue(md.device)

    def test_inline_fp32_output_and_lse(self):
        q, k, v = rand((200, 4, 64), 1), rand((200, 4, 64), 2), rand((200, 4, 64), 3)
        r = self.client.attend(q, k, v, return_lse=True, request_id="py-inline")
        self.assertEqual(r.request_id, "py-inline")
        self.assertEqual(r.output.shape, (200, 4, 64))
        self.assertEqual(r.lse.dtype, np.float32)
        self.check(r, q, k, v)

    def test_gqa_fp16(self):
        q = rand((160, 8, 64), 4, np.float16)
        k, v = rand((160, 2, 64), 5, np.float16), rand((160, 2, 64), 6, np.float16)
        r = self.client.attend(q, k, v, return_lse=True)
        self.assertEqual(r.dtype, "fp16")
        self.assertEqual(r.output.dtype, np.float16)
        self.check(r, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), atol=4e-3)

    def test_varlen(self):
        cu = [0, 100, 300, 301, 364]
        q, k, v = rand((364, 4, 64), 7), rand((364, 2, 64), 8), rand((364, 2, 64), 9)
        r = self.client.attend(q, k, v, cu_seqlens=cu, return_lse=True)
        self.check(r, q, k, v, cu, cu)

    def test_chunked_prefill_suffix_queries(self):
        # One prompt of 300 tokens in two chunks: the second chunk's 120 queries attend to all
        # 300 keys (bottom-right causal); both chunks together equal the whole prompt.
        q, k, v = rand((300, 4, 64), 10), rand((300, 4, 64), 11), rand((300, 4, 64), 12)
        whole = self.client.attend(q, k, v, return_lse=True)
        c1 = self.client.attend(q[:180], k[:180], v[:180], return_lse=True)
        c2 = self.client.attend(q[180:], k, v, return_lse=True)
        self.check(c2, q[180:], k, v, [0, 120], [0, 300])
        np.testing.assert_allclose(np.concatenate([c1.output, c2.output]), whole.output, atol=1e-5)
        np.testing.assert_allclose(np.concatenate([c1.lse, c2.lse], axis=1), whole.lse, atol=1e-5)

    def test_chunked_prefill_merge_with_lse(self):
        # vLLM's split: the chunk's queries over the cached prefix (no mask) and over the chunk
        # itself (causal), merged with the LSEs (merge_attn_states' rule).
        q, k, v = rand((300, 4, 64), 13), rand((300, 4, 64), 14), rand((300, 4, 64), 15)
        prefix = self.client.attend(q[180:], k[:180], v[:180], cu_seqlens=[0, 120],
                                    cu_seqlens_k=[0, 180], causal=False, return_lse=True)
        own = self.client.attend(q[180:], k[180:], v[180:], return_lse=True)
        out, lse = reference.merge(prefix.output, prefix.lse, own.output, own.lse)
        ref_o, ref_lse = reference.attention(q[180:], k, v, [0, 120], [0, 300])
        np.testing.assert_allclose(out, ref_o, atol=2e-3)
        np.testing.assert_allclose(lse, ref_lse, atol=1e-3)

    def test_varlen_chunked_batch(self):
        cu_q, cu_k = [0, 50, 51, 131], [0, 200, 300, 380]
        q, k, v = rand((131, 4, 64), 16), rand((380, 1, 64), 17), rand((380, 1, 64), 18)
        r = self.client.attend(q, k, v, cu_seqlens=cu_q, cu_seqlens_k=cu_k, return_lse=True)
        self.check(r, q, k, v, cu_q, cu_k)

    def test_shm_transport_matches_inline(self):
        q, k, v = rand((256, 8, 64), 19), rand((256, 2, 64), 20), rand((256, 2, 64), 21)
        a = self.client.attend(q, k, v, return_lse=True, transport="shm")
        b = self.client.attend(q, k, v, return_lse=True)
        np.testing.assert_array_equal(a.output, b.output)
        np.testing.assert_array_equal(a.lse, b.lse)
        self.check(a, q, k, v)
        # The staging region is registered once and reused.
        names = [r.name for r in self.client.list_regions() if r.name.startswith("py-")]
        self.client.attend(q, k, v, transport="shm")
        names2 = [r.name for r in self.client.list_regions() if r.name.startswith("py-")]
        self.assertEqual(names, names2)

    def test_bf16_shm(self):
        qf, kf, vf = rand((128, 4, 64), 22), rand((128, 4, 64), 23), rand((128, 4, 64), 24)
        q, k, v = spattn.to_bf16(qf), spattn.to_bf16(kf), spattn.to_bf16(vf)
        r = self.client.attend(q, k, v, dtype="bf16", return_lse=True, transport="shm")
        self.assertEqual(r.dtype, "bf16")
        self.assertEqual(r.output.dtype, np.uint16)
        self.check(r, q, k, v, atol=2e-2)

    def test_explicit_regions_and_output_region(self):
        q, k, v = rand((128, 4, 64), 25), rand((128, 4, 64), 26), rand((128, 4, 64), 27)
        key = f"/spattn-pytest-{os.getpid()}"
        n = q.nbytes
        with spattn.create_shared_memory_region(key, 4 * n) as region:
            self.assertEqual(region.key, key)
            spattn.set_shared_memory_region(region, [q, k, v])
            self.client.register_system_region("pytest-qkvo", region)
            try:
                listed = {r.name: r for r in self.client.list_regions()}
                self.assertEqual(listed["pytest-qkvo"].shm_key, key)
                t = [spattn.RegionTensor("pytest-qkvo", i * n, q.shape, "fp32") for i in range(4)]
                r = self.client.attend(t[0], t[1], t[2], output=t[3], return_lse=True)
                self.assertIsNone(r.output)
                out = spattn.get_contents_as_numpy(region, "fp32", q.shape, 3 * n)
                ref_o, ref_lse = reference.attention(q, k, v)
                np.testing.assert_allclose(out, ref_o, atol=2e-3)
                np.testing.assert_allclose(r.lse, ref_lse, atol=1e-3)
            finally:
                self.assertEqual(self.client.unregister_region("pytest-qkvo"), 1)
        self.assertFalse(spattn.shm.exists(key))

    def test_tcp_inline_works_but_shm_is_refused(self):
        if not _tcp_address:
            self.skipTest("no TCP address of the worker (SPATTN_WORKER_TCP_ADDRESS)")
        # Shared memory over TCP: the worker cannot tell who owns the segment (issue 13).
        q, k, v = rand((64, 4, 64), 49), rand((64, 4, 64), 50), rand((64, 4, 64), 51)
        with spattn.Client(_tcp_address, timeout=60) as tcp:
            self.assertEqual(tcp.health(), "SERVING")
            r = tcp.attend(q, k, v)
            self.check(r, q, k, v)
            with self.assertRaises(spattn.PermissionDeniedError) as cm:
                tcp.attend(q, k, v, transport="shm")
            self.assertEqual(cm.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        with self.assertRaises(spattn.SpattnError):
            # Keys outside --shm_prefix are refused even on the Unix socket.
            with SharedMemoryRegion.create(f"/other-{os.getpid()}", 4096) as region:
                self.client.register_system_region("pytest-other", region)

    def test_stream_of_layers(self):
        layers = []
        for layer in range(3):
            q, k, v = (rand((96, 4, 64), 30 + 3 * layer + i) for i in range(3))
            layers.append(dict(q=q, k=k, v=v, layer=layer))
        results = list(self.client.attend_layers(layers, return_lse=True))
        self.assertEqual([r.layer for r in results], [0, 1, 2])
        for spec, r in zip(layers, results):
            self.check(r, spec["q"], spec["k"], spec["v"])

    def test_stream_error_names_message_and_layer(self):
        q, k, v = rand((64, 4, 64), 40), rand((64, 4, 64), 41), rand((64, 4, 64), 42)
        with self.assertRaises(spattn.InvalidArgumentError) as cm:
            with self.client.stream() as s:
                s.send(q, k, v, layer=0)
                s.send(q, k[:32], v[:32], layer=1, cu_seqlens_k=[0, 64])  # K too short
                s.done_writing()
                s.recv()
                s.recv()
        e = cm.exception
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual((e.stream_message, e.layer), (2, 1))  # messages count from 1
        self.assertTrue(e.field and e.field.startswith("k"), e.details)

    def test_errors_carry_status_and_field(self):
        q, k, v = rand((64, 4, 64), 43), rand((64, 4, 64), 44), rand((64, 4, 64), 45)
        with self.assertRaises(spattn.InvalidArgumentError) as cm:
            self.client.attend(q, k, v, cu_seqlens=[0, 100])
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIsNotNone(cm.exception.field)
        self.assertTrue(cm.exception.field.startswith(("q", "cu_seqlens")), cm.exception.details)
        with self.assertRaises(spattn.InvalidArgumentError) as cm:
            self.client.attend(q, k, v, method={"method": "vertical_slash", "last_q": -1})
        self.assertEqual(cm.exception.field, "method_override.vertical_slash.last_q")
        with self.assertRaises(spattn.NotFoundError):
            t = spattn.RegionTensor("no-such-region", 0, q.shape, "fp32")
            self.client.attend(t, k, v)
        with self.assertRaises(spattn.FailedPreconditionError):
            self.client.attend(q, k, v, model="llama")  # no index service configured
        with self.assertRaises(ValueError):
            spattn.method_config("no_such_method")

    def test_method_override_and_stats(self):
        q, k, v = rand((512, 4, 64), 46), rand((512, 4, 64), 47), rand((512, 4, 64), 48)
        r = self.client.attend(q, k, v, method={"method": "a_shape", "sink_tokens": 16,
                                                "local_tokens": 64},
                               head_methods={0: "dense"}, return_stats=True)
        self.assertEqual([h["method"] for h in r.heads], ["dense", "a_shape", "a_shape", "a_shape"])
        self.assertAlmostEqual(r.heads[0]["density"], 1.0)
        self.assertLess(r.heads[1]["density"], 0.5)
        self.assertLess(r.density, 1.0)
        self.assertGreater(r.timings.total_seconds, 0)

    @unittest.skipUnless(os.environ.get("SPATTN_TEST_TORCH_CUDA") == "1",
                         "CUDA IPC from torch needs torch with a GPU and a CUDA worker "
                         "(SPATTN_TEST_TORCH_CUDA=1)")
    def test_cuda_ipc_from_torch(self):
        import torch
        q = torch.randn(256, 4, 64, device="cuda", dtype=torch.float16)
        k = torch.randn(256, 4, 64, device="cuda", dtype=torch.float16)
        v = torch.randn(256, 4, 64, device="cuda", dtype=torch.float16)
        o = torch.empty_like(q)
        r = self.client.attend(q, k, v, output=o, return_lse=True)
        torch.cuda.synchronize()
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True).transpose(0, 1)
        self.assertLess((o.float() - ref.float()).abs().max().item(), 1e-2)
        self.assertEqual(r.lse.shape, (4, 256))


class SharedMemoryTest(unittest.TestCase):
    def test_leading_slash_either_way(self):
        a = SharedMemoryRegion.create(f"spattn-noslash-{os.getpid()}", 4096)
        try:
            self.assertEqual(a.key, f"/spattn-noslash-{os.getpid()}")
            b = SharedMemoryRegion.attach(a.key)
            c = SharedMemoryRegion.attach(a.key.lstrip("/"))
            a.set(np.arange(8, dtype=np.int32))
            np.testing.assert_array_equal(b.get("int32", (8,)), np.arange(8))
            np.testing.assert_array_equal(c.get(np.int32, (8,)), np.arange(8))
            b.destroy()
            c.destroy()
            self.assertTrue(spattn.shm.exists(a.key))
        finally:
            a.destroy()
        self.assertFalse(spattn.shm.exists(a.key))
        with self.assertRaises(ValueError):
            SharedMemoryRegion.create("/a/b", 16)

    def test_attached_segment_survives_attaching_process_exit(self):
        # Python <= 3.12's resource tracker unlinks segments a process merely attached to when it
        # exits; attach() must prevent that.
        key = f"/spattn-tracker-{os.getpid()}"
        with SharedMemoryRegion.create(key, 4096) as region:
            region.set(np.full(4, 7, dtype=np.int32))
            code = ("import sys, numpy as np; from spattn.shm import SharedMemoryRegion as R; "
                    f"r = R.attach({key!r}); assert (r.get('int32', (4,)) == 7).all(); "
                    "r.set(np.full(4, 9, dtype=np.int32))")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
            subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
            time.sleep(0.2)  # the tracker process would unlink right after the child exits
            self.assertTrue(spattn.shm.exists(key))
            np.testing.assert_array_equal(region.get("int32", (4,)), np.full(4, 9))
        self.assertFalse(spattn.shm.exists(key))

    def test_bounds(self):
        with SharedMemoryRegion.create(f"/spattn-bounds-{os.getpid()}", 64) as r:
            with self.assertRaises(ValueError):
                r.set(np.zeros(17, dtype=np.float32))
            with self.assertRaises(ValueError):
                r.get("fp32", (4,), offset=60)


class CodecTest(unittest.TestCase):
    def test_bf16_round_trip_and_rounding(self):
        x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, np.inf], dtype=np.float32)
        y = spattn.from_bf16(spattn.to_bf16(x))
        np.testing.assert_allclose(y, x, rtol=2 ** -8)
        # 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        self.assertEqual(spattn.from_bf16(spattn.to_bf16(np.float32(1 + 2 ** -8)))[()], 1.0)

    def test_torch_ipc_handle_formats(self):
        raw = bytes(range(64))
        self.assertEqual(cuda_ipc.raw_ipc_handle(raw), raw)
        self.assertEqual(cuda_ipc.raw_ipc_handle(b"\x01c" + raw), raw)  # torch >= 2.2
        with self.assertRaises(ValueError):
            cuda_ipc.raw_ipc_handle(b"\x01e" + raw)  # expandable segment
        with self.assertRaises(ValueError):
            cuda_ipc.raw_ipc_handle(b"short")

    def test_method_config(self):
        cfg = spattn.method_config({"method": "flex_prefill", "gamma": 0.95, "tau": 0.1})
        self.assertAlmostEqual(cfg.flex_prefill.gamma, 0.95, places=6)
        self.assertEqual(spattn.methods.method_dict(cfg)["method"], "flex_prefill")
        with self.assertRaises(ValueError):
            spattn.method_config({"method": "a_shape", "gamma": 1})

    def test_error_parsing(self):
        e = spattn.errors.SpattnError(grpc.StatusCode.INVALID_ARGUMENT,
                                      "stream message 3 (layer 7): q.desc.shape[0]: 100 does not "
                                      "match total_q = 128")
        self.assertEqual((e.stream_message, e.layer, e.field), (3, 7, "q.desc.shape[0]"))
        e = spattn.errors.SpattnError(grpc.StatusCode.NOT_FOUND, "region 'x' is not registered")
        self.assertIsNone(e.field)
        e = spattn.errors.SpattnError(grpc.StatusCode.INVALID_ARGUMENT,
                                      "head_overrides[2].method.a_shape.local_tokens must be > 0")
        self.assertEqual(e.field, "head_overrides[2].method.a_shape.local_tokens")


if __name__ == "__main__":
    unittest.main()
