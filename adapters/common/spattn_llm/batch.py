"""An LLM server's batch metadata -> one varlen spattn request for its prefill part.

vLLM (V1) describes a step's batch by `query_start_loc` ([num_reqs + 1], cumulative new tokens
per request, i.e. cu_seqlens of the queries) and `seq_lens` (context + new tokens per request);
SGLang by `extend_seq_lens` (new tokens) and `seq_lens`. A request whose new tokens are at most
`decode_threshold` is a decode and stays on the server's own backend; the others are prefills
(whole prompts or chunks of one: their queries are the last `q_len` of `seq_len` positions,
which is spattn's bottom-right causal alignment). All prefills of a step go in ONE spattn call:
Q rows gathered by `q_rows`, K/V gathered from the paged cache by `slots_for(...)`.
"""
from dataclasses import dataclass, field
from typing import List

import numpy as np


def _ints(x):
    if hasattr(x, "tolist"):
        x = x.tolist()
    return [int(v) for v in x]


@dataclass
class PrefillPlan:
    prefill_reqs: List[int] = field(default_factory=list)   # request indices, batch order
    decode_reqs: List[int] = field(default_factory=list)
    q_rows: np.ndarray = None        # token rows (of the step's flat token dim) of the prefills
    decode_rows: np.ndarray = None   # token rows of the decodes
    cu_seqlens_q: List[int] = field(default_factory=list)  # over the prefills only
    cu_seqlens_k: List[int] = field(default_factory=list)
    seq_lens: List[int] = field(default_factory=list)      # per prefill: keys (context + new)
    context_lens: List[int] = field(default_factory=list)  # per prefill: keys already cached

    @property
    def has_prefill(self):
        return bool(self.prefill_reqs)

    def request_kwargs(self):
        """The cu_seqlens arguments of spattn.Client.attend for the gathered tensors."""
        return {"cu_seqlens": self.cu_seqlens_q, "cu_seqlens_k": self.cu_seqlens_k}


def plan_batch(query_start_loc, seq_lens, decode_threshold=1, num_tokens=None):
    """vLLM-style metadata -> PrefillPlan. `num_tokens` (the padded token count) defaults to
    query_start_loc[-1]; padding rows belong to neither part."""
    qsl = _ints(query_start_loc)
    sl = _ints(seq_lens)
    if len(qsl) != len(sl) + 1 or qsl[0] != 0:
        raise ValueError(f"query_start_loc must be [num_reqs + 1] from 0; got {len(qsl)} "
                         f"entries for {len(sl)} requests")
    plan = PrefillPlan(cu_seqlens_q=[0], cu_seqlens_k=[0])
    q_rows, d_rows = [], []
    for i, s in enumerate(sl):
        q0, q1 = qsl[i], qsl[i + 1]
        q_len = q1 - q0
        if q_len < 0 or q_len > s:
            raise ValueError(f"request {i}: {q_len} new tokens but seq_len {s}")
        if q_len == 0:
            continue
        if q_len <= decode_threshold:
            plan.decode_reqs.append(i)
            d_rows.extend(range(q0, q1))
            continue
        plan.prefill_reqs.append(i)
        q_rows.extend(range(q0, q1))
        plan.cu_seqlens_q.append(plan.cu_seqlens_q[-1] + q_len)
        plan.cu_seqlens_k.append(plan.cu_seqlens_k[-1] + s)
        plan.seq_lens.append(s)
        plan.context_lens.append(s - q_len)
    if num_tokens is not None and num_tokens < qsl[-1]:
        raise ValueError(f"num_tokens {num_tokens} < query_start_loc[-1] {qsl[-1]}")
    plan.q_rows = np.asarray(q_rows, dtype=np.int64)
    plan.decode_rows = np.asarray(d_rows, dtype=np.int64)
    return plan


def plan_extend(extend_seq_lens, seq_lens, decode_threshold=0):
    """SGLang's forward_extend metadata (new tokens and total tokens per request) -> PrefillPlan.
    In an extend batch every request is a prefill (decode_threshold 0)."""
    ext = _ints(extend_seq_lens)
    qsl = [0]
    for e in ext:
        qsl.append(qsl[-1] + e)
    return plan_batch(qsl, seq_lens, decode_threshold)


def slots_for(plan, block_table, block_size):
    """Paged-KV slot of every key of every prefill, in cu_seqlens_k order: position p of request
    i lives in slot block_table[i][p // block_size] * block_size + p % block_size (vLLM's
    layout; SGLang's req_to_token is the block_size 1 case)."""
    bt = block_table.tolist() if hasattr(block_table, "tolist") else block_table
    out = np.empty(plan.cu_seqlens_k[-1], dtype=np.int64)
    for j, (req, s) in enumerate(zip(plan.prefill_reqs, plan.seq_lens)):
        pos = np.arange(s)
        blocks = np.asarray(bt[req][: (s + block_size - 1) // block_size], dtype=np.int64)
        if len(blocks) * block_size < s:
            raise ValueError(f"request {req}: block table covers {len(blocks) * block_size} < {s} keys")
        out[plan.cu_seqlens_k[j]:plan.cu_seqlens_k[j + 1]] = blocks[pos // block_size] * block_size + pos % block_size
    return out


def scatter_lse(plan, lse_prefill, num_tokens, fill=float("-inf")):
    """spattn's LSE of the prefills ([heads, prefill tokens], fp32) -> [heads, num_tokens] in the
    step's token order (what merge_attn_states takes); decode/padding columns get `fill`."""
    lse_prefill = np.asarray(lse_prefill, dtype=np.float32)
    out = np.full((lse_prefill.shape[0], num_tokens), fill, dtype=np.float32)
    out[:, plan.q_rows] = lse_prefill
    return out
