"""Dense attention in numpy (float64 inside), the reference the tests and adapters compare with.

Q [total_q, q_heads, d], K/V [total_k, kv_heads, d]; per sequence, queries are the last q_len of
its k_len positions (chunked prefill, causal mask aligned bottom-right). Returns (out float32
[total_q, q_heads, d], lse float32 [q_heads, total_q], natural log).
"""
import numpy as np


def attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, softmax_scale=None, causal=True):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    if cu_seqlens_q is None:
        cu_seqlens_q = [0, total_q]
    if cu_seqlens_k is None:
        cu_seqlens_k = cu_seqlens_q if k.shape[0] == total_q else [0, k.shape[0]]
    scale = softmax_scale or 1.0 / np.sqrt(d)
    group = hq // hkv
    out = np.zeros((total_q, hq, d))
    lse = np.full((hq, total_q), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = cu_seqlens_q[b], cu_seqlens_q[b + 1]
        k0, k1 = cu_seqlens_k[b], cu_seqlens_k[b + 1]
        qlen, klen = q1 - q0, k1 - k0
        if qlen == 0:
            continue
        pos = np.arange(qlen)[:, None] + (klen - qlen)
        mask = np.arange(klen)[None, :] <= pos if causal else np.ones((qlen, klen), bool)
        for h in range(hq):
            s = q[q0:q1, h] @ k[k0:k1, h // group].T * scale
            s = np.where(mask, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[q0:q1, h] = np.where(l > 0, (p @ v[k0:k1, h // group]) / l, 0.0)
                lse[h, q0:q1] = np.where(l[:, 0] > 0, np.log(l[:, 0]) + m[:, 0], -np.inf)
    return out.astype(np.float32), lse.astype(np.float32)


def merge(out_a, lse_a, out_b, lse_b):
    """Merges two partial attentions over disjoint key sets (as vLLM's merge_attn_states):
    out [tokens, heads, d], lse [heads, tokens]."""
    la, lb = lse_a.T[:, :, None].astype(np.float64), lse_b.T[:, :, None].astype(np.float64)
    m = np.maximum(la, lb)
    wa, wb = np.exp(la - m), np.exp(lb - m)
    out = (out_a * wa + out_b * wb) / (wa + wb)
    lse = (m + np.log(wa + wb))[:, :, 0].T
    return out.astype(np.float32), lse.astype(np.float32)
