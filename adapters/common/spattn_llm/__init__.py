"""Pieces shared by the vLLM and SGLang adapters, free of vllm/sglang/torch imports:
batch planning (metadata -> spattn requests), paged-KV slot indices, LSE placement, and the
config converter (dual_chunk_attention_config / MInference JSON -> index-service configs)."""
from spattn_llm.batch import PrefillPlan, plan_batch, scatter_lse, slots_for
from spattn_llm.config_convert import (convert, from_dual_chunk_config, from_minference,
                                       rank_model_id, slice_for_rank)

__all__ = ["PrefillPlan", "convert", "from_dual_chunk_config", "from_minference", "plan_batch",
           "rank_model_id", "scatter_lse", "slice_for_rank", "slots_for"]
