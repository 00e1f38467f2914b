"""SpattnAttnBackend for SGLang (imports sglang and torch).

forward_extend: store the new K/V in the token pool, gather every key of each request
(req_to_token rows, i.e. the block_size 1 case of slots_for), plan with the extend lengths
(plan_extend) and run all requests in one varlen spattn call; requests with fewer than
SPATTN_MIN_PREFILL keys, and decode, stay on the Triton backend.
"""
import torch
from sglang.srt.layers.attention.attention_registry import register_attention_backend
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

import spattn
from spattn_llm.batch import plan_extend, slots_for
from spattn_llm.prefill import PrefillRunner
from spattn_llm.settings import Settings


class SpattnAttnBackend(TritonAttnBackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.settings = Settings.from_env()
        tp = getattr(model_runner, "tp_size", 1)
        rank = getattr(model_runner, "tp_rank", 0)
        extra = {"method": self.settings.method} if self.settings.method else {}
        self.runner = PrefillRunner(spattn.Client(self.settings.address,
                                                  timeout=self.settings.timeout_s),
                                    model_id=self.settings.model_for_rank(tp, rank),
                                    transport=self.settings.transport, **extra)
        self.last_lse = None

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kw):
        plan = plan_extend(forward_batch.extend_seq_lens_cpu, forward_batch.seq_lens_cpu)
        if not self.settings.use_spattn(plan):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, **kw)
        if save_kv_cache:
            forward_batch.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        req_to_token = forward_batch.req_to_token_pool.req_to_token
        rows = [req_to_token[int(i)] for i in forward_batch.req_pool_indices.cpu().tolist()]
        locs = torch.from_numpy(slots_for(plan, [r[:s].cpu() for r, s in
                                                 zip(rows, plan_seq_lens(plan, len(rows)))], 1))
        locs = locs.to(q.device)
        kb = forward_batch.token_to_kv_pool.get_key_buffer(layer.layer_id).index_select(0, locs)
        vb = forward_batch.token_to_kv_pool.get_value_buffer(layer.layer_id).index_select(0, locs)
        qh = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim if hasattr(layer, "qk_head_dim")
                    else layer.head_dim)
        o, lse = self.runner.run(plan, qh, kb, vb, layer=layer.layer_id,
                                 softmax_scale=layer.scaling)
        self.last_lse = lse
        return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)


def plan_seq_lens(plan, num_reqs):
    """seq_len per request (0 for requests without new tokens) for slicing req_to_token rows."""
    out = [0] * num_reqs
    for r, s in zip(plan.prefill_reqs, plan.seq_lens):
        out[r] = s
    return out


@register_attention_backend("spattn")
def create_spattn_backend(runner):
    return SpattnAttnBackend(runner)
