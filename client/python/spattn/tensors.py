"""What a request's Q/K/V/output may be, and how each becomes a TensorRef."""
import numpy as np

from spattn import dtypes
from spattn.v1 import common_pb2


class RegionTensor:
    """A tensor inside a region registered with the worker (shared memory or CUDA IPC)."""

    def __init__(self, region_name, offset, shape, dtype, byte_size=None):
        self.region_name = region_name
        self.offset = int(offset)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.byte_size = int(byte_size if byte_size is not None else
                             int(np.prod(self.shape)) * dtypes.size(dtype))

    def to_proto(self):
        t = common_pb2.TensorRef()
        t.desc.dtype = dtypes.to_proto(self.dtype)
        t.desc.shape.extend(self.shape)
        t.region.region_name = self.region_name
        t.region.offset = self.offset
        t.region.byte_size = self.byte_size
        return t


class CudaIpcTensor:
    """A device buffer named by a raw cudaIpcMemHandle (see spattn.cuda_ipc.from_torch)."""

    def __init__(self, ipc_handle, offset, byte_size, shape, dtype, device_id=0, device_uuid="",
                 strides=None, keepalive=None):
        self.ipc_handle = bytes(ipc_handle)
        self.offset = int(offset)
        self.byte_size = int(byte_size)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.device_id = int(device_id)
        self.device_uuid = device_uuid or ""
        self.strides = tuple(strides) if strides else ()
        self.keepalive = keepalive  # the torch tensor, so its memory outlives the request

    def to_proto(self):
        t = common_pb2.TensorRef()
        t.desc.dtype = dtypes.to_proto(self.dtype)
        t.desc.shape.extend(self.shape)
        t.desc.strides.extend(self.strides)
        c = t.cuda_ipc
        c.ipc_handle = self.ipc_handle
        c.device_uuid = self.device_uuid
        c.device_id = self.device_id
        c.offset = self.offset
        c.byte_size = self.byte_size
        return t


class InlineTensor:
    """A numpy array sent in the message (bf16: uint16 bits with dtype='bf16')."""

    def __init__(self, array, dtype=None):
        self.array = np.ascontiguousarray(array)
        self.dtype = dtypes.of_array(self.array, dtype)
        self.shape = self.array.shape

    def to_proto(self):
        t = common_pb2.TensorRef()
        t.desc.dtype = dtypes.to_proto(self.dtype)
        t.desc.shape.extend(self.shape)
        t.inline_data.data = self.array.tobytes()
        return t


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def as_tensor(x, dtype=None):
    """numpy array / torch tensor / RegionTensor / CudaIpcTensor / TensorRef -> an object with
    `.to_proto()`, `.shape`, `.dtype` (None for a raw TensorRef)."""
    if isinstance(x, (RegionTensor, CudaIpcTensor, InlineTensor)):
        return x
    if isinstance(x, common_pb2.TensorRef):
        return _RawRef(x)
    if _is_torch(x):
        from spattn import cuda_ipc
        return cuda_ipc.from_torch(x)
    if isinstance(x, np.ndarray):
        return InlineTensor(x, dtype)
    raise TypeError(f"cannot send {type(x).__name__} as a tensor")


class _RawRef:
    def __init__(self, ref):
        self.ref = ref
        self.shape = tuple(ref.desc.shape)
        self.dtype = dtypes.from_proto(ref.desc.dtype) if ref.desc.dtype else None

    def to_proto(self):
        return self.ref
