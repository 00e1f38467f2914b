"""The prefill call both adapters make: gathered Q (prefill rows) and K/V (all keys of each
prefill request) -> spattn -> output rows and LSE ([heads, tokens], fp32).

torch CUDA tensors travel by CUDA IPC (the worker must serve that GPU: the sidecar deployment),
the output is written in place into a torch tensor; numpy arrays travel through the client's
shared-memory staging region.
"""
from spattn_llm.batch import PrefillPlan


class PrefillRunner:
    def __init__(self, client, model_id="", layer_offset=0, transport="shm", **attend_kwargs):
        self.client = client
        self.model_id = model_id
        self.layer_offset = layer_offset
        self.transport = transport
        self.attend_kwargs = attend_kwargs  # e.g. method=..., softmax_scale=...

    def run(self, plan: PrefillPlan, q, k, v, layer, out=None, softmax_scale=0.0):
        """q [prefill tokens, heads, d], k/v [prefill keys, kv heads, d] (cu_seqlens_k order).
        Returns (output, lse): output like q (torch: `out` or a new tensor), lse [heads,
        prefill tokens] fp32 (torch on q's device, or numpy)."""
        kwargs = dict(self.attend_kwargs)
        kwargs.update(plan.request_kwargs())
        if softmax_scale:
            kwargs["softmax_scale"] = softmax_scale
        is_torch = type(q).__module__.startswith("torch")
        if is_torch and q.is_cuda:
            import torch
            if out is None:
                out = torch.empty_like(q)
            r = self.client.attend(q.contiguous(), k.contiguous(), v.contiguous(), output=out,
                                   model=self.model_id, layer=layer + self.layer_offset,
                                   return_lse=True, **kwargs)
            lse = torch.from_numpy(r.lse.copy()).to(q.device)
            return out, lse
        if is_torch:
            from spattn.cuda_ipc import from_torch
            import torch
            tq, tk, tv = (from_torch(x.contiguous()) for x in (q, k, v))
            r = self.client.attend(tq.array, tk.array, tv.array, dtype=tq.dtype,
                                   model=self.model_id, layer=layer + self.layer_offset,
                                   return_lse=True, transport=self.transport, **kwargs)
            if tq.dtype == "bf16":  # uint16 bits -> int16 (torch < 2.3 has no uint16) -> bf16
                o = torch.from_numpy(r.output.view("int16").copy()).view(torch.bfloat16)
            else:
                o = torch.from_numpy(r.output.copy())
            if out is not None:
                out.copy_(o)
                o = out
            return o, torch.from_numpy(r.lse.copy())
        r = self.client.attend(q, k, v, model=self.model_id, layer=layer + self.layer_offset,
                               return_lse=True, transport=self.transport, **kwargs)
        return r.output, r.lse
