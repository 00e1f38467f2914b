"""SpattnAttentionBackend for vLLM V1 (imports vllm and torch; not importable without them).

Per step: `plan_batch(query_start_loc, seq_lens)` splits the batch. Without a prefill of at least
SPATTN_MIN_PREFILL keys, FlashAttention does everything. Otherwise the new K/V go into the paged
cache (vLLM's reshape_and_cache_flash), the decode rows run on FlashAttention, and every prefill
(whole prompt or chunk) runs in ONE varlen spattn call: its Q rows, and all its keys gathered from
the paged cache (block_table, seq_lens), queries aligned bottom-right. The prefill rows' LSE
(fp32 [heads, tokens], merge_attn_states' layout) is kept in `impl.last_lse`.

Mixed batches: FlashAttention is called on the whole batch for the decode rows (vLLM's metadata
cannot be sliced generically), then the prefill rows are overwritten by spattn: correct, but the
prefill rows are also computed densely. Prefill-only steps skip FlashAttention.
"""
import torch
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl

try:  # where vLLM keeps its cache-write op moved between versions
    from vllm.v1.attention.backends.fa_utils import reshape_and_cache_flash
except ImportError:  # pragma: no cover
    try:
        from vllm.attention.utils.fa_utils import reshape_and_cache_flash
    except ImportError:
        from vllm._custom_ops import reshape_and_cache_flash

import spattn
from spattn_llm.batch import plan_batch, scatter_lse, slots_for
from spattn_llm.prefill import PrefillRunner
from spattn_llm.settings import Settings, layer_index

_client = None


def _shared_client(settings):
    global _client
    if _client is None:
        _client = spattn.Client(settings.address, timeout=settings.timeout_s)
    return _client


def _tp():
    try:
        from vllm.distributed import (get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)
        return get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
    except Exception:
        return 1, 0


class SpattnAttentionImpl(FlashAttentionImpl):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = Settings.from_env()
        tp, rank = _tp()
        extra = {"method": self.settings.method} if self.settings.method else {}
        self.runner = PrefillRunner(_shared_client(self.settings),
                                    model_id=self.settings.model_for_rank(tp, rank),
                                    transport=self.settings.transport, **extra)
        self.last_lse = None

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None, **kw):
        if attn_metadata is None:  # profiling run
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, **kw)
        n = attn_metadata.num_actual_tokens
        plan = plan_batch(attn_metadata.query_start_loc.cpu(), attn_metadata.seq_lens.cpu(),
                          num_tokens=n)
        if not self.settings.use_spattn(plan) or self.kv_cache_dtype != "auto":
            self.last_lse = None
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, **kw)
        key_cache, value_cache = kv_cache.unbind(0)
        if len(plan.decode_reqs):
            # Writes the cache too.
            super().forward(layer, query, key, value, kv_cache, attn_metadata, output, **kw)
        else:
            reshape_and_cache_flash(key, value, key_cache, value_cache, attn_metadata.slot_mapping,
                                    self.kv_cache_dtype, layer._k_scale, layer._v_scale)
        block_size = key_cache.shape[1]
        slots = torch.from_numpy(slots_for(plan, attn_metadata.block_table.cpu(), block_size))
        slots = slots.to(key_cache.device)
        kc = key_cache.reshape(-1, self.num_kv_heads, self.head_size)
        vc = value_cache.reshape(-1, self.num_kv_heads, self.head_size)
        rows = torch.from_numpy(plan.q_rows).to(query.device)
        q = query[:n].view(n, self.num_heads, self.head_size).index_select(0, rows)
        o, lse = self.runner.run(plan, q, kc.index_select(0, slots), vc.index_select(0, slots),
                                 layer=layer_index(layer.layer_name), softmax_scale=self.scale)
        out3 = output[:n].view(n, self.num_heads, self.head_size)
        out3.index_copy_(0, rows, o.to(out3.dtype))
        self.last_lse = torch.from_numpy(scatter_lse(plan, lse.cpu().numpy(), n)).to(query.device)
        return output


class SpattnAttentionBackend(FlashAttentionBackend):
    @staticmethod
    def get_name():
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return SpattnAttentionImpl
