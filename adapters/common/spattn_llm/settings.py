"""Adapter settings from the environment (both adapters read the same variables).

SPATTN_ADDRESS          worker address (default unix:/run/spattn/worker.sock, the sidecar's socket:
                        shared memory and CUDA IPC are accepted only through the Unix socket)
SPATTN_MODEL            model id in the index service ("" = the worker's default method)
SPATTN_MIN_PREFILL      prefills with fewer keys stay on the server's own backend (default 0;
                        dual_chunk_attention_config's sparse_attention_threshold fits here)
SPATTN_TRANSPORT        shm (default) or inline, for tensors not on a GPU the worker serves
SPATTN_TIMEOUT_S        per-call deadline (default 60)
SPATTN_METHOD           method override for every head (experiments), e.g. a_shape
"""
import os
from dataclasses import dataclass

from spattn_llm.config_convert import rank_model_id


@dataclass
class Settings:
    address: str = "unix:/run/spattn/worker.sock"
    model: str = ""
    min_prefill_tokens: int = 0
    transport: str = "shm"
    timeout_s: float = 60.0
    method: str = ""

    @classmethod
    def from_env(cls, env=None):
        env = os.environ if env is None else env
        s = cls(address=env.get("SPATTN_ADDRESS", cls.address),
                model=env.get("SPATTN_MODEL", ""),
                min_prefill_tokens=int(env.get("SPATTN_MIN_PREFILL", "0")),
                transport=env.get("SPATTN_TRANSPORT", "shm"),
                timeout_s=float(env.get("SPATTN_TIMEOUT_S", "60")),
                method=env.get("SPATTN_METHOD", ""))
        if s.transport not in ("shm", "inline"):
            raise ValueError(f"SPATTN_TRANSPORT must be shm or inline, got {s.transport!r}")
        return s

    def model_for_rank(self, tp_size, rank):
        return rank_model_id(self.model, tp_size, rank) if self.model else ""

    def use_spattn(self, plan):
        """True when the step has a prefill long enough for spattn."""
        return plan.has_prefill and max(plan.seq_lens) >= self.min_prefill_tokens


def layer_index(layer_name):
    """vLLM layer names ('model.layers.17.self_attn.attn') -> 17."""
    parts = str(layer_name).split(".")
    nums = [int(p) for p in parts if p.isdigit()]
    if not nums:
        raise ValueError(f"no layer index in {layer_name!r}")
    return nums[0]
