"""GPU stand-in for an LLM server's attention layer (runs with the GPU machine's python3 + torch).

Builds one vLLM-like step on the GPU: a paged bf16 KV cache (shuffled blocks), two decodes, a
whole prompt and the second chunk of a long prompt; plans it with spattn_llm.plan_batch, gathers
Q rows and each prefill's keys from the cache (slots_for + index_select), exports the gathered
tensors and per-method output tensors by CUDA IPC (spattn.cuda_ipc.from_torch) and runs
standin_client.py (a Python with grpcio) which calls the worker with them. Then checks the dense
output and LSE against an fp32 reference, reports each method's error and density, and times
PyTorch SDPA on the same prefills as the baseline.

    python3 standin_torch.py --address=HOST:PORT --client="PY standin_client.py" --out=DIR
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import torch

from spattn_llm.batch import plan_batch, slots_for

H, KV, D, BS = 32, 8, 128, 16
METHODS = ["dense", "a_shape", "vertical_slash"]


def export(t):
    try:
        from spattn.cuda_ipc import from_torch
        ref = from_torch(t)
        return {"handle": ref.ipc_handle.hex(), "offset": ref.offset, "byte_size": ref.byte_size,
                "shape": list(ref.shape), "dtype": ref.dtype, "device_id": ref.device_id,
                "device_uuid": ref.device_uuid, "via": "spattn.cuda_ipc.from_torch"}
    except Exception as e:  # no protobuf (or an incompatible one) here: the same by hand
        share = t.untyped_storage()._share_cuda_()
        off = int(share[3]) + t.storage_offset() * t.element_size()
        h = bytes(share[1])
        h = h[2:66] if len(h) >= 66 and h[1:2] == b"c" else h
        return {"handle": h.hex(), "offset": off,
                "byte_size": t.numel() * t.element_size(), "shape": list(t.shape),
                "dtype": "bf16", "device_id": int(share[0]),
                "device_uuid": f"GPU-{torch.cuda.get_device_properties(0).uuid}",
                "via": f"manual ({e})"}


def reference(q, k, v, q_len, k_len):
    """fp32 attention of one request, queries aligned bottom-right: out [q, H, D], lse [H, q]."""
    qf = q.float().transpose(0, 1)                     # [H, q, D]
    kf = k.float().repeat_interleave(H // KV, 1).transpose(0, 1)
    vf = v.float().repeat_interleave(H // KV, 1).transpose(0, 1)
    outs, lses = [], []
    for h0 in range(0, H, 8):
        s = qf[h0:h0 + 8] @ kf[h0:h0 + 8].transpose(1, 2) / D ** 0.5
        pos = torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len)
        s.masked_fill_(torch.arange(k_len, device=q.device)[None, :] > pos, float("-inf"))
        lse = torch.logsumexp(s, -1)
        outs.append(torch.exp(s - lse[..., None]) @ vf[h0:h0 + 8])
        lses.append(lse)
        del s
    return torch.cat(outs).transpose(0, 1), torch.cat(lses)


def sdpa_ms(q, k, v, q_len, k_len, reps=10):
    qh = q.transpose(0, 1)[None]
    kh = k.transpose(0, 1)[None]
    vh = v.transpose(0, 1)[None]
    mask = None
    if q_len != k_len:
        pos = torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len)
        mask = torch.arange(k_len, device=q.device)[None, :] <= pos
    f = lambda: torch.nn.functional.scaled_dot_product_attention(
        qh, kh, vh, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    seq_lens = [1000, 8192, 16384, 3000]
    new = [1, 8192, 4096, 1]            # decode, whole prompt, chunk 2 of a prompt, decode
    qsl = np.concatenate([[0], np.cumsum(new)]).tolist()
    T = qsl[-1]
    nblocks = sum((s + BS - 1) // BS for s in seq_lens) + 8
    kc = torch.randn(nblocks, BS, KV, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn(nblocks, BS, KV, D, device=dev, dtype=torch.bfloat16)
    perm = torch.randperm(nblocks).tolist()
    block_table, nxt = [], 0
    for s in seq_lens:
        n = (s + BS - 1) // BS
        block_table.append(perm[nxt:nxt + n])
        nxt += n
    query = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)

    plan = plan_batch(qsl, seq_lens)
    slots = torch.from_numpy(slots_for(plan, block_table, BS)).to(dev)
    rows = torch.from_numpy(plan.q_rows).to(dev)
    q = query.index_select(0, rows).contiguous()
    k = kc.reshape(-1, KV, D).index_select(0, slots).contiguous()
    v = vc.reshape(-1, KV, D).index_select(0, slots).contiguous()
    outs = {m: torch.zeros_like(q) for m in METHODS}
    torch.cuda.synchronize()
    req = {"address": a.address, "cu_seqlens_q": plan.cu_seqlens_q,
           "cu_seqlens_k": plan.cu_seqlens_k, "q": export(q), "k": export(k), "v": export(v),
           "outputs": {m: export(o) for m, o in outs.items()}, "out_dir": a.out}
    with open(os.path.join(a.out, "standin_request.json"), "w") as f:
        json.dump(req, f)
    t0 = time.time()
    p = subprocess.run(shlex.split(a.client) + [os.path.join(a.out, "standin_request.json")],
                       timeout=300)
    print(f"client exited {p.returncode} after {time.time() - t0:.1f} s", flush=True)
    if p.returncode:
        sys.exit(p.returncode)
    with open(os.path.join(a.out, "standin_client.json")) as f:
        res = json.load(f)
    torch.cuda.synchronize()
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "plan": {"prefill_reqs": plan.prefill_reqs, "decode_reqs": plan.decode_reqs,
                       "cu_seqlens_q": plan.cu_seqlens_q, "cu_seqlens_k": plan.cu_seqlens_k},
              "ipc_export": req["q"]["via"], "methods": {}}
    refs = []
    for j in range(len(plan.prefill_reqs)):
        q0, q1 = plan.cu_seqlens_q[j:j + 2]
        k0, k1 = plan.cu_seqlens_k[j:j + 2]
        refs.append((q0, q1, k0, k1) + reference(q[q0:q1], k[k0:k1], v[k0:k1], q1 - q0, k1 - k0))
    for m in METHODS:
        lse = torch.from_numpy(np.load(os.path.join(a.out, f"lse_{m}.npy"))).to(dev)
        num = den = 0.0
        max_err = lse_err = 0.0
        for q0, q1, k0, k1, ro, rl in refs:
            o = outs[m][q0:q1].float()
            num += float(((o - ro) ** 2).sum())
            den += float((ro ** 2).sum())
            max_err = max(max_err, float((o - ro).abs().max()))
            lse_err = max(lse_err, float((lse[:, q0:q1] - rl).abs().max()))
        report["methods"][m] = dict(res[m], rel_l2_vs_fp32_dense=(num / den) ** 0.5,
                                    max_abs_err=max_err, lse_max_abs_err=lse_err)
    sd = [sdpa_ms(q[q0:q1], k[k0:k1], v[k0:k1], q1 - q0, k1 - k0) for q0, q1, k0, k1, _, _ in refs]
    report["sdpa_ms_per_request"] = sd
    report["sdpa_ms_total"] = sum(sd)
    print(json.dumps(report, indent=1))
    with open(os.path.join(a.out, "standin_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    ok = (report["methods"]["dense"]["max_abs_err"] < 0.05 and
          report["methods"]["dense"]["lse_max_abs_err"] < 0.02)
    print("STANDIN", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
