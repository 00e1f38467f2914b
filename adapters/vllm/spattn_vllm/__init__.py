"""vLLM plugin: a spattn attention backend (prefill through the spattn worker, decode on vLLM's
FlashAttention backend). Installed as a `vllm.general_plugins` entry point (see pyproject.toml);
vLLM calls `register()` in every process. Select it with VLLM_ATTENTION_BACKEND=CUSTOM.
vllm is imported lazily: importing this package without vllm works (for the pure parts)."""

BACKEND_PATH = "spattn_vllm.backend.SpattnAttentionBackend"


def register():
    """Registers SpattnAttentionBackend as vLLM's CUSTOM attention backend."""
    try:
        from vllm.attention.backends.registry import register_backend
    except ImportError as e:  # pragma: no cover - depends on the vLLM version
        raise ImportError("spattn_vllm needs a vLLM with "
                          "vllm.attention.backends.registry.register_backend") from e
    try:
        from vllm.attention.backends.registry import AttentionBackendEnum as enum
    except ImportError:  # pragma: no cover - older name
        from vllm.attention.backends.registry import _Backend as enum
    register_backend(backend=enum.CUSTOM, class_path=BACKEND_PATH)
    return BACKEND_PATH
