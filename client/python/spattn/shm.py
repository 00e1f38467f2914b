"""POSIX shared-memory regions for the worker (Triton's convention: register once, then name a
region + offset + size in requests).

Two Python pitfalls are handled here:
* Leading "/": `multiprocessing.shared_memory.SharedMemory(name="x")` opens the POSIX object
  "/x" and reports `.name == "x"`; the worker's `shm_open` needs "/x". Keys are accepted with or
  without the slash and `SharedMemoryRegion.key` is always the slash form the worker wants.
* Resource tracker: up to Python 3.12, attaching to an existing segment registers it with the
  resource tracker, which unlinks it when the attaching process exits (bpo-39959) — destroying a
  segment another process (an LLM server, the worker) still uses. Attached regions are
  unregistered from the tracker (or opened with track=False on 3.13+); only regions this process
  created are unlinked, and only by `destroy()`.
"""
import os
import sys
from multiprocessing import shared_memory

import numpy as np

from spattn import dtypes

_TRACK_PARAM = sys.version_info >= (3, 13)
_created = set()  # keys of segments this process created (and its tracker may unlink)


def _bare(key):
    bare = key.lstrip("/")
    if not bare or "/" in bare:
        raise ValueError(f"shared-memory key must be '/name' or 'name' without other slashes: {key!r}")
    return bare


def _untrack(shm):
    """Stops the resource tracker from unlinking `shm` at exit (Python < 3.13). A segment this
    process created stays tracked (the tracker keeps one entry per name)."""
    if _TRACK_PARAM or shm._name in _created:  # noqa: SLF001
        return
    try:
        from multiprocessing import resource_tracker
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001 (CPython detail)
    except Exception:  # pragma: no cover - tracker absent (e.g. Windows) or name changed
        pass


class SharedMemoryRegion:
    """A POSIX shared-memory object mapped into this process.

    `SharedMemoryRegion.create(key, byte_size)` makes a new one (this process owns it and
    `destroy()` unlinks it); `SharedMemoryRegion.attach(key)` maps one another process made
    (`destroy()` only unmaps it)."""

    def __init__(self, shm, owner):
        self._shm = shm
        self.owner = owner
        self.key = "/" + _bare(shm.name)
        self.byte_size = shm.size
        self.registered_as = set()  # region names registered with workers through a Client

    @classmethod
    def create(cls, key, byte_size):
        if byte_size <= 0:
            raise ValueError("byte_size must be > 0")
        kwargs = {"track": False} if _TRACK_PARAM else {}
        shm = shared_memory.SharedMemory(name=_bare(key), create=True, size=byte_size, **kwargs)
        # Created segments stay tracked on < 3.13 so a crash still unlinks them; destroy()
        # unlinks and unregisters explicitly.
        _created.add(shm._name)  # noqa: SLF001
        return cls(shm, owner=True)

    @classmethod
    def attach(cls, key):
        kwargs = {"track": False} if _TRACK_PARAM else {}
        shm = shared_memory.SharedMemory(name=_bare(key), create=False, **kwargs)
        _untrack(shm)
        return cls(shm, owner=False)

    @property
    def buf(self):
        return self._shm.buf

    def set(self, arrays, offset=0):
        """Writes numpy arrays back to back from `offset`; returns the offset after the last."""
        if isinstance(arrays, np.ndarray):
            arrays = [arrays]
        for a in arrays:
            b = np.ascontiguousarray(a)
            n = b.nbytes
            if offset < 0 or offset + n > self.byte_size:
                raise ValueError(f"write of {n} bytes at {offset} exceeds the region's {self.byte_size}")
            self._shm.buf[offset:offset + n] = b.reshape(-1).view(np.uint8)
            offset += n
        return offset

    def get(self, dtype, shape, offset=0, copy=True):
        """The region's bytes at `offset` as a numpy array (`dtype`: a wire dtype name or numpy
        dtype; bf16 comes back as uint16 bits). `copy=False` returns a view into the mapping,
        valid until destroy()."""
        np_dtype = np.dtype(dtypes.numpy_storage(dtype) if isinstance(dtype, str) else dtype)
        count = int(np.prod(shape)) if len(shape) else 1
        n = count * np_dtype.itemsize
        if offset < 0 or offset + n > self.byte_size:
            raise ValueError(f"read of {n} bytes at {offset} exceeds the region's {self.byte_size}")
        view = np.frombuffer(self._shm.buf, dtype=np_dtype, count=count, offset=offset).reshape(shape)
        return view.copy() if copy else view

    def destroy(self):
        """Unmaps; unlinks too when this process created the region. Idempotent."""
        if self._shm is None:
            return
        shm, self._shm = self._shm, None
        try:
            shm.close()
        except BufferError:
            # A numpy view still points into the mapping; the mapping goes when it does.
            pass
        if self.owner:
            _created.discard(shm._name)  # noqa: SLF001
            try:
                shm.unlink()  # also unregisters from the tracker on < 3.13
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        return f"SharedMemoryRegion(key={self.key!r}, byte_size={self.byte_size}, owner={self.owner})"


# tritonclient-style functions.
def create_shared_memory_region(key, byte_size):
    return SharedMemoryRegion.create(key, byte_size)


def attach_shared_memory_region(key):
    return SharedMemoryRegion.attach(key)


def set_shared_memory_region(region, arrays, offset=0):
    return region.set(arrays, offset)


def get_contents_as_numpy(region, dtype, shape, offset=0):
    return region.get(dtype, shape, offset)


def destroy_shared_memory_region(region):
    region.destroy()


def exists(key):
    return os.path.exists("/dev/shm/" + _bare(key))
