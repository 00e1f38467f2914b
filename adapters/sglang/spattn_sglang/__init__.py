"""SGLang attention backend "spattn": prefill (forward_extend) through the spattn worker, decode
on SGLang's Triton backend. Importing `spattn_sglang.backend` registers it
(@register_attention_backend("spattn")); then `--attention-backend spattn`.
sglang is imported lazily: this package imports without it (for the pure parts)."""


def register():
    from spattn_sglang import backend  # noqa: F401  (the decorator registers on import)
    return "spattn"
