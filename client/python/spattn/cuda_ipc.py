"""CUDA IPC handles from torch tensors, for a worker on the same host and GPU.

The worker opens the handle with cudaIpcOpenMemHandle and reads/writes the tensor in place (no
copies). torch's caching allocator hands out slices of larger blocks: the IPC handle names the
block, so the tensor's byte offset inside it travels in CudaIpcRef.offset. Keep the tensor alive
(and do not write it from another stream) until the response arrives; torch is imported lazily so
the client works without it.
"""
from spattn import dtypes
from spattn.tensors import CudaIpcTensor

_TORCH_DTYPES = None


def _torch_dtype_name(t):
    global _TORCH_DTYPES
    import torch
    if _TORCH_DTYPES is None:
        _TORCH_DTYPES = {torch.float32: dtypes.FP32, torch.float16: dtypes.FP16,
                         torch.bfloat16: dtypes.BF16, torch.int32: dtypes.INT32}
    try:
        return _TORCH_DTYPES[t.dtype]
    except KeyError:
        raise TypeError(f"unsupported torch dtype {t.dtype}") from None


def device_uuid(index):
    """The worker's spelling of a GPU's UUID ("GPU-xxxxxxxx-...")."""
    import torch
    u = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"GPU-{u}" if u is not None else ""


def raw_ipc_handle(handle):
    """torch's shared handle -> the 64-byte cudaIpcMemHandle_t. Recent torch prefixes a version
    byte and a kind byte ('c': a cudaMalloc block, whose cudaIpcMemHandle follows; 'e': an
    expandable segment, which has no cudaIpcMemHandle); older torch returns the 64 bytes."""
    h = bytes(handle)
    if len(h) == 64:
        return h
    if len(h) >= 66 and h[1:2] == b"c":
        return h[2:66]
    if len(h) >= 2 and h[1:2] == b"e":
        raise ValueError("the tensor lives in an expandable segment (PYTORCH_CUDA_ALLOC_CONF="
                         "expandable_segments:True), which CUDA IPC handles cannot name; "
                         "disable expandable segments")
    raise ValueError(f"unrecognised torch CUDA IPC handle of {len(h)} bytes")


def from_torch(t):
    """torch tensor -> CudaIpcTensor (CUDA tensors) or InlineTensor (CPU tensors)."""
    from spattn.tensors import InlineTensor
    name = _torch_dtype_name(t)
    if not t.is_cuda:
        import numpy as np
        c = t.detach().contiguous()
        arr = c.view(dtype=__import__("torch").int16).numpy().view(np.uint16) if name == dtypes.BF16 \
            else c.numpy()
        return InlineTensor(arr, name)
    if t.dim() != 3 or t.stride(-1) != 1:
        raise ValueError("CUDA tensors must be [tokens, heads, head_dim] with unit last stride")
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()._untyped()
    share = storage._share_cuda_()
    # (device, handle, storage bytes, storage offset bytes in the block, ...)
    device, handle, _, storage_offset = share[0], share[1], share[2], share[3]
    esize = t.element_size()
    offset = int(storage_offset) + t.storage_offset() * esize
    span = ((t.shape[0] - 1) * t.stride(0) + (t.shape[1] - 1) * t.stride(1) + t.shape[2]) * esize
    contiguous = t.is_contiguous()
    return CudaIpcTensor(raw_ipc_handle(handle), offset, span if t.numel() else 0, tuple(t.shape), name,
                         device_id=int(device), device_uuid=device_uuid(int(device)),
                         strides=None if contiguous else tuple(t.stride()), keepalive=t)
