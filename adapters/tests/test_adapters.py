"""Adapters: batch planning, paged-KV gathering, LSE placement, settings, the config converter
(offline, fixtures in fixtures/), and the call path of a stand-in vLLM step (numpy paged KV
cache, decodes + prefills + a chunked prefill) against a real worker, plus the converter's
configs published into a real index service and used by the worker.

$SPATTN_WORKER_BIN / $SPATTN_INDEX_BIN come from Bazel (or run_python_tests.sh --worker=).
"""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import numpy as np
from google.protobuf import json_format

import spattn
from spattn import reference
from spattn.testing import WorkerProcess
from spattn.v1 import index_service_pb2 as ipb
from spattn_llm import batch, config_convert, settings
from spattn_llm.prefill import PrefillRunner

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


class PlanTest(unittest.TestCase):
    def test_mixed_batch(self):
        # Two decodes, a whole prompt of 100, and the second chunk (50 tokens) of a 300-token one.
        p = batch.plan_batch([0, 1, 2, 102, 152], [10, 20, 100, 300], num_tokens=160)
        self.assertEqual(p.decode_reqs, [0, 1])
        self.assertEqual(p.prefill_reqs, [2, 3])
        self.assertEqual(p.cu_seqlens_q, [0, 100, 150])
        self.assertEqual(p.cu_seqlens_k, [0, 100, 400])
        self.assertEqual(p.context_lens, [0, 250])
        np.testing.assert_array_equal(p.q_rows, np.arange(2, 152))
        np.testing.assert_array_equal(p.decode_rows, [0, 1])
        self.assertEqual(p.request_kwargs(), {"cu_seqlens": [0, 100, 150],
                                              "cu_seqlens_k": [0, 100, 400]})

    def test_decode_only_and_threshold(self):
        p = batch.plan_batch([0, 1, 2], [5, 9])
        self.assertFalse(p.has_prefill)
        p = batch.plan_batch([0, 4, 8], [4, 40], decode_threshold=4)  # spec-decode style
        self.assertFalse(p.has_prefill)

    def test_bad_metadata(self):
        with self.assertRaises(ValueError):
            batch.plan_batch([0, 5], [3])          # more new tokens than the sequence
        with self.assertRaises(ValueError):
            batch.plan_batch([0, 5, 6], [5])       # lengths disagree
        with self.assertRaises(ValueError):
            batch.plan_batch([0, 5], [5], num_tokens=4)

    def test_sglang_extend(self):
        p = batch.plan_extend([100, 1, 50], [100, 31, 300])
        self.assertEqual(p.prefill_reqs, [0, 1, 2])  # every extend request goes to spattn
        self.assertEqual(p.cu_seqlens_q, [0, 100, 101, 151])
        self.assertEqual(p.cu_seqlens_k, [0, 100, 131, 431])

    def test_slots_for_paged_cache(self):
        p = batch.plan_batch([0, 1, 21], [7, 20])
        bt = [[9, 0, 0], [4, 2, 0]]
        s = batch.slots_for(p, bt, 16)
        np.testing.assert_array_equal(s, list(range(64, 80)) + list(range(32, 36)))
        with self.assertRaises(ValueError):
            batch.slots_for(p, [[9], [4]], 16)  # block table too short

    def test_scatter_lse(self):
        p = batch.plan_batch([0, 1, 4], [3, 3])
        lse = batch.scatter_lse(p, np.arange(6, dtype=np.float32).reshape(2, 3), 5)
        self.assertEqual(lse.shape, (2, 5))
        np.testing.assert_array_equal(lse[:, 1:4], [[0, 1, 2], [3, 4, 5]])
        self.assertTrue(np.isneginf(lse[:, [0, 4]]).all())


class SettingsTest(unittest.TestCase):
    def test_from_env(self):
        s = settings.Settings.from_env({"SPATTN_ADDRESS": "10.0.0.1:1", "SPATTN_MODEL": "qwen",
                                        "SPATTN_MIN_PREFILL": "32768"})
        self.assertEqual((s.address, s.min_prefill_tokens, s.transport), ("10.0.0.1:1", 32768, "shm"))
        self.assertEqual(s.model_for_rank(2, 1), "qwen.tp2.r1")
        self.assertEqual(s.model_for_rank(1, 0), "qwen")
        self.assertFalse(s.use_spattn(batch.plan_batch([0, 100], [1000])))
        self.assertTrue(s.use_spattn(batch.plan_batch([0, 100], [40000])))
        with self.assertRaises(ValueError):
            settings.Settings.from_env({"SPATTN_TRANSPORT": "carrier-pigeon"})

    def test_layer_index(self):
        self.assertEqual(settings.layer_index("model.layers.17.self_attn.attn"), 17)
        with self.assertRaises(ValueError):
            settings.layer_index("lm_head")

    def test_packages_import_without_servers(self):
        import spattn_sglang
        import spattn_vllm
        self.assertEqual(spattn_vllm.BACKEND_PATH, "spattn_vllm.backend.SpattnAttentionBackend")
        with self.assertRaises(ImportError):
            spattn_vllm.register()   # no vllm here
        with self.assertRaises(ImportError):
            spattn_sglang.register()  # no sglang here


class ConvertTest(unittest.TestCase):
    def test_minference_mapping(self):
        c = config_convert.from_minference(fixture("minference_tiny.json"))
        self.assertEqual(len(c), 7)
        by = {(x["layer"], x["head"]): x for x in c}
        self.assertEqual(by[0, 0]["method"], {"method": "vertical_slash", "vertical_size": 1000,
                                               "slash_size": 6096})
        self.assertEqual(by[0, 1]["method"], {"method": "a_shape", "sink_tokens": 64,
                                               "local_tokens": 512})
        self.assertEqual(by[0, 2]["method"], {"method": "block_sparse", "top_k": 100})
        self.assertEqual(by[1, 3]["method"], {"method": "dense"})
        self.assertAlmostEqual(by[1, 1]["score"], 0.93)

    def test_minference_errors(self):
        for bad in ([{"0": ["triangle", 1, 2, 0]}], [{"0": ["stream_llm", -1, 2, 0]}],
                    {"0": []}, [["vertical_and_slash"]], [{"0": ["dense"]}]):
            with self.assertRaises(config_convert.ConfigError, msg=str(bad)):
                config_convert.from_minference(bad)

    def test_tp_slicing(self):
        c = config_convert.from_minference(fixture("minference_tiny.json"))
        conv = config_convert.convert(c, "llama", num_layers=2, num_q_heads=4, num_kv_heads=2,
                                      head_dim=64, tp_size=2)
        self.assertEqual(sorted(conv), [0, 1])
        r1 = conv[1]
        self.assertEqual(r1["model_id"], "llama.tp2.r1")
        self.assertEqual((r1["model"]["num_q_heads"], r1["model"]["num_kv_heads"]), (2, 1))
        heads = [(x["layer"], x["head"], x["method"]["method"]) for x in r1["configs"]["configs"]]
        # Global heads 2 and 3 of each layer become 0 and 1.
        self.assertEqual(heads, [(0, 0, "METHOD_BLOCK_SPARSE"), (0, 1, "METHOD_VERTICAL_SLASH"),
                                 (1, 1, "METHOD_DENSE")])
        # The JSON is what spattnctl `configs import` and the protos accept.
        msg = json_format.ParseDict(r1["configs"], ipb.GetHeadConfigsResponse())
        self.assertEqual(msg.configs[1].method.vertical_slash.slash_size, 800)
        json_format.ParseDict(r1["model"], ipb.Model())
        # KV heads replicated when tp > kv heads; errors when nothing fits.
        conv4 = config_convert.convert(c, "llama", 2, 4, 2, 64, tp_size=4)
        self.assertEqual(conv4[3]["model"]["num_kv_heads"], 1)
        with self.assertRaises(config_convert.ConfigError):
            config_convert.convert(c, "llama", 2, 4, 2, 64, tp_size=3)
        with self.assertRaises(config_convert.ConfigError):
            config_convert.convert(c, "llama", 2, 2, 2, 64)  # head 3 outside 2 heads
        with self.assertRaises(config_convert.ConfigError):
            config_convert.convert(c, "llama", 1, 4, 2, 64)  # layer 1 outside 1 layer

    def test_dual_chunk_config(self):
        hf = fixture("qwen_dca_config.json")
        c, flags = config_convert.from_dual_chunk_config(hf, FIXTURES)
        self.assertEqual(flags, {"dense_below_tokens": 32768})
        self.assertEqual(len(c), 8)
        inline = dict(hf["dual_chunk_attention_config"],
                      sparse_attention_config=fixture("sparse_attention_config.json"))
        self.assertEqual(config_convert.from_dual_chunk_config(inline)[0], c)
        off = dict(inline, sparse_attention_enabled=False)
        self.assertEqual(config_convert.from_dual_chunk_config(off)[0], [])
        with self.assertRaises(config_convert.ConfigError):
            config_convert.from_dual_chunk_config({"chunk_size": 1})

    def test_cli_writes_per_rank_files(self):
        out = os.path.join(TMP, "conv")
        rc = config_convert.main(["--hf_config", os.path.join(FIXTURES, "qwen_dca_config.json"),
                                  "--model", "qwen-tiny", "--tp", "2", "--out", out])
        self.assertEqual(rc, 0)
        self.assertEqual(sorted(os.listdir(out)), [
            "qwen-tiny.tp2.r0.configs.json", "qwen-tiny.tp2.r0.model.json",
            "qwen-tiny.tp2.r1.configs.json", "qwen-tiny.tp2.r1.model.json"])
        with open(os.path.join(out, "qwen-tiny.tp2.r0.model.json")) as f:
            m = json.load(f)
        self.assertEqual((m["num_q_heads"], m["num_kv_heads"], m["head_dim"]), (2, 1, 64))


class StandInStepTest(unittest.TestCase):
    """A vLLM-like step on a numpy paged KV cache: plan -> gather -> spattn -> merge rows."""

    @classmethod
    def setUpClass(cls):
        cls.worker = WorkerProcess(os.environ["SPATTN_WORKER_BIN"], "--devices=cpu",
                                   "--cpu_threads=2", metrics=False)
        # The Unix socket: shared memory is only accepted there.
        cls.client = spattn.Client(cls.worker.unix, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.worker.stop()

    def test_step_matches_reference(self):
        rng = np.random.default_rng(0)
        H, KV, D, BS = 4, 2, 64, 16
        seq_lens = [33, 200, 500, 47]          # decode, prompt, chunk 2 of a prompt, decode
        new = [1, 200, 120, 1]
        qsl = np.concatenate([[0], np.cumsum(new)])
        T = int(qsl[-1])
        # Full K/V per request, stored in a shuffled paged cache.
        kfull = [rng.standard_normal((s, KV, D)).astype(np.float32) for s in seq_lens]
        vfull = [rng.standard_normal((s, KV, D)).astype(np.float32) for s in seq_lens]
        nblocks = sum((s + BS - 1) // BS for s in seq_lens) + 3
        perm = rng.permutation(nblocks)
        kc = np.zeros((nblocks, BS, KV, D), np.float32)
        vc = np.zeros_like(kc)
        block_table, nxt = [], 0
        for s, kf, vf in zip(seq_lens, kfull, vfull):
            row = []
            for b in range((s + BS - 1) // BS):
                blk = int(perm[nxt]); nxt += 1
                row.append(blk)
                n = min(BS, s - b * BS)
                kc[blk, :n], vc[blk, :n] = kf[b * BS:b * BS + n], vf[b * BS:b * BS + n]
            block_table.append(row + [0] * (40 - len(row)))
        query = rng.standard_normal((T, H, D)).astype(np.float32)

        plan = batch.plan_batch(qsl, seq_lens)
        self.assertEqual(plan.prefill_reqs, [1, 2])
        slots = batch.slots_for(plan, np.array(block_table), BS)
        k = kc.reshape(-1, KV, D)[slots]
        v = vc.reshape(-1, KV, D)[slots]
        runner = PrefillRunner(self.client, transport="shm")
        o, lse = runner.run(plan, query[plan.q_rows], k, v, layer=3)
        output = np.zeros((T, H, D), np.float32)
        output[plan.q_rows] = o
        full_lse = batch.scatter_lse(plan, lse, T)
        for i in range(len(seq_lens)):
            rows = slice(qsl[i], qsl[i + 1])
            ref_o, ref_lse = reference.attention(query[rows], kfull[i], vfull[i],
                                                 [0, new[i]], [0, seq_lens[i]])
            if i in plan.prefill_reqs:
                np.testing.assert_allclose(output[rows], ref_o, atol=2e-3)
                np.testing.assert_allclose(full_lse[:, rows], ref_lse, atol=1e-3)
            else:
                self.assertTrue(np.isneginf(full_lse[:, rows]).all())


class PublishedConfigTest(unittest.TestCase):
    """Converter output published into a real index service; the worker serves those methods."""

    @classmethod
    def setUpClass(cls):
        cls.data = tempfile.mkdtemp(dir=TMP)
        port_file = os.path.join(cls.data, "ports")
        cls.index = subprocess.Popen(
            [os.environ["SPATTN_INDEX_BIN"], f"--data_dir={cls.data}/db",
             "--listen=127.0.0.1:0", f"--port_file={port_file}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(cls.data, "index.log"), "w"))
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            cls.index_addr = "127.0.0.1:" + f.read().split()[0]
        cls.worker = WorkerProcess(os.environ["SPATTN_WORKER_BIN"], "--devices=cpu",
                                   "--cpu_threads=2", f"--index={cls.index_addr}",
                                   # the published heads as published (no recall widening)
                                   "--recall_target=0", metrics=False)
        cls.client = spattn.Client(cls.worker.tcp, timeout=60)  # inline tensors: TCP is fine

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.worker.stop()
        cls.index.terminate()
        cls.index.wait(timeout=30)
        shutil.rmtree(cls.data, ignore_errors=True)

    def test_rank_models_serve_their_heads(self):
        c, _ = config_convert.from_dual_chunk_config(fixture("qwen_dca_config.json"), FIXTURES)
        conv = config_convert.convert(c, "qwen-tiny", 2, 4, 2, 64, tp_size=2)
        versions = config_convert.publish(conv, self.index_addr)
        self.assertEqual(versions, {"qwen-tiny.tp2.r0": 1, "qwen-tiny.tp2.r1": 1})
        rng = np.random.default_rng(1)
        q = rng.standard_normal((256, 2, 64)).astype(np.float32)
        k = rng.standard_normal((256, 1, 64)).astype(np.float32)
        v = rng.standard_normal((256, 1, 64)).astype(np.float32)
        # Rank 1 serves global heads 2, 3: layer 0 -> a_shape, vertical_slash.
        r = self.client.attend(q, k, v, model="qwen-tiny.tp2.r1", layer=0, return_stats=True)
        self.assertEqual(r.config_version_used, 1)
        self.assertEqual([h["method"] for h in r.heads], ["a_shape", "vertical_slash"])
        r = self.client.attend(q, k, v, model="qwen-tiny.tp2.r0", layer=1, return_stats=True)
        self.assertEqual([h["method"] for h in r.heads], ["a_shape", "a_shape"])
        # Publishing again makes version 2 (compare-and-set on the current one).
        self.assertEqual(config_convert.publish(conv, self.index_addr)["qwen-tiny.tp2.r0"], 2)


if __name__ == "__main__":
    unittest.main()
