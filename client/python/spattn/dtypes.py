"""Element types on the wire and their numpy forms.

numpy has no bfloat16: BF16 tensors travel as their raw 16-bit patterns (numpy uint16). `to_bf16`
rounds float32 to nearest-even and `from_bf16` widens back to float32.
"""
import numpy as np

from spattn.v1 import common_pb2

FP32 = "fp32"
FP16 = "fp16"
BF16 = "bf16"
INT32 = "int32"

_TO_PROTO = {
    FP32: common_pb2.DATA_TYPE_FP32,
    FP16: common_pb2.DATA_TYPE_FP16,
    BF16: common_pb2.DATA_TYPE_BF16,
    INT32: common_pb2.DATA_TYPE_INT32,
}
_FROM_PROTO = {v: k for k, v in _TO_PROTO.items()}
_SIZE = {FP32: 4, FP16: 2, BF16: 2, INT32: 4}
_NUMPY = {FP32: np.float32, FP16: np.float16, BF16: np.uint16, INT32: np.int32}


def to_proto(dtype):
    try:
        return _TO_PROTO[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(_TO_PROTO)}, got {dtype!r}") from None


def from_proto(value):
    try:
        return _FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"unknown DataType {value}") from None


def size(dtype):
    return _SIZE[dtype]


def numpy_storage(dtype):
    """The numpy type holding one element's bytes (uint16 for bf16)."""
    return _NUMPY[dtype]


def of_array(a, dtype=None):
    """The wire dtype of numpy array `a` (uint16 arrays need dtype='bf16' said explicitly)."""
    if dtype is not None:
        if a.dtype != np.dtype(_NUMPY[dtype]):
            raise TypeError(f"array of {a.dtype} cannot travel as {dtype}")
        return dtype
    if a.dtype == np.float32:
        return FP32
    if a.dtype == np.float16:
        return FP16
    if a.dtype == np.int32:
        return INT32
    if a.dtype == np.uint16:
        raise TypeError("uint16 arrays are ambiguous: pass dtype='bf16' (see spattn.to_bf16)")
    raise TypeError(f"unsupported array dtype {a.dtype} (use float32, float16 or bf16 bits)")


def to_bf16(a):
    """float array -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    nan = np.isnan(f)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def from_bf16(bits):
    """bfloat16 bit patterns (uint16) -> float32."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def to_float32(a, dtype):
    """Elements of the wire dtype `dtype` held in `a` -> float32."""
    if dtype == BF16:
        return from_bf16(a)
    return np.asarray(a, dtype=np.float32)
