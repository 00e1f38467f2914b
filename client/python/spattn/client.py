"""The spattn worker client (AttentionService), in the spirit of tritonclient.grpc."""
import itertools
import os
import queue
import threading

import grpc
import numpy as np

from spattn import dtypes, errors, methods
from spattn.shm import SharedMemoryRegion
from spattn.tensors import RegionTensor, as_tensor
from spattn.v1 import attention_service_pb2 as pb
from spattn.v1 import attention_service_pb2_grpc as pb_grpc

_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
_counter = itertools.count()


def _encode_health_request(service):
    # grpc.health.v1.HealthCheckRequest { string service = 1; } (encoded by hand: no extra stubs)
    data = service.encode()
    out = bytearray()
    if data:
        out.append(0x0A)
        n = len(data)
        while True:
            b = n & 0x7F
            n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n:
                break
        out += data
    return bytes(out)


def _decode_health_response(data):
    # grpc.health.v1.HealthCheckResponse { ServingStatus status = 1; } -> status number
    if len(data) >= 2 and data[0] == 0x08:
        return data[1]
    return 0


class AttentionResult:
    """One layer's answer. `output`: [total_q, q_heads, head_dim] in the request's element type
    (bf16 as uint16 bits; `output_float32()` widens), or None when written to a caller's region;
    `lse`: fp32 [q_heads, total_q] (natural log) when asked; `response`: the proto."""

    def __init__(self, response, output, lse, dtype):
        self.response = response
        self.output = output
        self.lse = lse
        self.dtype = dtype
        self.request_id = response.request_id
        self.layer = response.layer
        self.device = response.device
        self.config_version_used = response.config_version_used
        self.timings = response.timings
        self.density = response.density
        self.heads = [
            {"head": h.head, "method": h.method_name, "density": h.density,
             "recall": None if h.recall < 0 else h.recall}
            for h in response.heads
        ]

    def output_float32(self):
        return None if self.output is None else dtypes.to_float32(self.output, self.dtype)


def _decode(response, out_shape, dtype, staged=None):
    output = None
    o = response.output
    if o.WhichOneof("location") == "inline_data":
        odt = dtypes.from_proto(o.desc.dtype) if o.desc.dtype else dtype
        shape = tuple(o.desc.shape) or out_shape
        output = np.frombuffer(o.inline_data.data, dtype=dtypes.numpy_storage(odt)).reshape(shape)
        dtype = odt
    elif staged is not None:
        region, offset = staged
        output = region.get(dtype, out_shape, offset)
    lse = None
    if response.lse.WhichOneof("location") == "inline_data":
        shape = tuple(response.lse.desc.shape)
        lse = np.frombuffer(response.lse.inline_data.data, dtype=np.float32)
        if shape:
            lse = lse.reshape(shape)
    return AttentionResult(response, output, lse, dtype)


class Client:
    """Connects to one worker. Thread-safe for unary calls; one LayerStream per prompt.

        c = spattn.Client("127.0.0.1:50051")
        r = c.attend(q, k, v, cu_seqlens=[0, 300, 1000], return_lse=True)
        r.output, r.lse

    transport="shm" stages numpy tensors through a shared-memory region this client owns
    (registered once, grown as needed) instead of the gRPC message. The worker accepts shared
    memory (and CUDA IPC from unauthenticated callers) only through its Unix socket: connect with
    address "unix:/path/to/worker.sock" (the same pod/host), where the peer uid proves who owns
    the segment; segment keys must start with the worker's --shm_prefix (default "/spattn-").

    TLS: `credentials=grpc.ssl_channel_credentials(...)` (or `tls_ca=`/`tls_cert=`/`tls_key=`
    PEM file paths); bearer token: `token=` (sent as `authorization: Bearer <token>`)."""

    def __init__(self, address, *, timeout=None, max_message_bytes=256 << 20, credentials=None,
                 channel=None, metadata=None, token=None, tls_ca=None, tls_cert=None,
                 tls_key=None, shm_prefix="/spattn-"):
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if credentials is None and (tls_ca or tls_cert):
            read = lambda p: open(p, "rb").read() if p else None
            credentials = grpc.ssl_channel_credentials(read(tls_ca), read(tls_key), read(tls_cert))
        if channel is not None:
            self._channel = channel
        elif credentials is not None:
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self.address = address
        self.timeout = timeout
        self._metadata = list(metadata or [])
        if token:
            self._metadata.append(("authorization", f"Bearer {token}"))
        self.shm_prefix = shm_prefix
        self._stub = pb_grpc.AttentionServiceStub(self._channel)
        self._health = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_encode_health_request,
            response_deserializer=_decode_health_response)
        self._staging = None       # (SharedMemoryRegion, region name) for transport="shm"
        self._staging_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self):
        with self._staging_lock:
            if self._staging is not None:
                region, name = self._staging
                self._staging = None
                try:
                    self.unregister_region(name)
                except errors.SpattnError:
                    pass
                region.destroy()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, rpc, request, timeout=None):
        try:
            return getattr(self._stub, rpc)(request, timeout=timeout or self.timeout,
                                            metadata=self._metadata or None)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, rpc) from None

    # -- health and metadata ---------------------------------------------------------------
    def health(self, service="", timeout=None):
        """grpc.health.v1 status of `service` ("" = the server): "SERVING", "NOT_SERVING", ..."""
        try:
            status = self._health(service, timeout=timeout or self.timeout or 10,
                                  metadata=self._metadata or None)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "Health.Check") from None
        return _HEALTH_STATUS.get(status, str(status))

    def is_ready(self, timeout=None):
        try:
            return self.health("", timeout) == "SERVING"
        except errors.SpattnError:
            return False

    def metadata(self, timeout=None):
        """ServerMetadataResponse (devices, methods, dtypes, limits, index service)."""
        return self._call("ServerMetadata", pb.ServerMetadataRequest(), timeout)

    # -- regions ---------------------------------------------------------------------------
    def register_system_region(self, name, region, offset=0, byte_size=None, timeout=None):
        """Registers a SharedMemoryRegion (or a shm key string) under `name`."""
        if isinstance(region, SharedMemoryRegion):
            key, size = region.key, region.byte_size
            region.registered_as.add(name)
        else:
            key, size = "/" + str(region).lstrip("/"), None
        if byte_size is None:
            if size is None:
                raise ValueError("byte_size is required when registering a key")
            byte_size = size - offset
        self._call("RegisterSystemRegion", pb.RegisterSystemRegionRequest(
            name=name, shm_key=key, offset=offset, byte_size=byte_size), timeout)

    def register_cuda_region(self, name, raw_handle, byte_size, device_id=0, device_uuid="",
                             timeout=None):
        self._call("RegisterCudaRegion", pb.RegisterCudaRegionRequest(
            name=name, raw_handle=bytes(raw_handle), device_id=device_id,
            device_uuid=device_uuid, byte_size=byte_size), timeout)

    def unregister_region(self, name="", timeout=None):
        """Unregisters `name` ("" = every region); returns how many went."""
        return self._call("UnregisterRegion", pb.UnregisterRegionRequest(name=name),
                          timeout).unregistered

    def list_regions(self, timeout=None):
        return list(self._call("ListRegions", pb.ListRegionsRequest(), timeout).regions)

    # -- attention -------------------------------------------------------------------------
    def build_request(self, q, k, v, *, cu_seqlens=None, cu_seqlens_k=None, model="", layer=0,
                      config_version=0, softmax_scale=0.0, causal=True, method=None,
                      head_methods=None, output=None, dtype=None, return_lse=False,
                      return_stats=False, estimate_recall=False, request_id=""):
        """The AttentionRequest `attend` sends, plus (out_shape, dtype). Q is [total_q, q_heads,
        head_dim], K/V [total_k, kv_heads, head_dim] (numpy arrays, torch tensors, RegionTensor,
        CudaIpcTensor). cu_seqlens default to one sequence; with fewer queries than keys the
        queries are the last positions (chunked prefill)."""
        qt, kt, vt = as_tensor(q, dtype), as_tensor(k, dtype), as_tensor(v, dtype)
        if len(qt.shape) != 3 or len(kt.shape) != 3:
            raise ValueError("q, k, v must be [tokens, heads, head_dim]")
        total_q, hq, d = qt.shape
        total_k, hkv, _ = kt.shape
        wire_dtype = qt.dtype
        req = pb.AttentionRequest(
            request_id=request_id, model_id=model or "", config_version=config_version,
            layer=layer, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
            softmax_scale=softmax_scale or 0.0, causal=causal, return_lse=return_lse,
            return_stats=return_stats or estimate_recall, estimate_recall=estimate_recall)
        cu_q = list(cu_seqlens) if cu_seqlens is not None else [0, total_q]
        req.cu_seqlens_q.extend(int(x) for x in cu_q)
        if cu_seqlens_k is not None:
            req.cu_seqlens_k.extend(int(x) for x in cu_seqlens_k)
        elif total_k != total_q:
            if len(cu_q) != 2:
                raise ValueError("varlen chunked prefill needs cu_seqlens_k")
            req.cu_seqlens_k.extend([0, total_k])
        req.q.CopyFrom(qt.to_proto())
        req.k.CopyFrom(kt.to_proto())
        req.v.CopyFrom(vt.to_proto())
        if output is not None:
            req.output.CopyFrom(as_tensor(output).to_proto())
        if method is not None:
            req.method_override.CopyFrom(methods.method_config(method))
        for head, spec in (head_methods or {}).items():
            o = req.head_overrides.add(head=int(head))
            o.method.CopyFrom(methods.method_config(spec))
        return req, (total_q, hq, d), wire_dtype

    def attend(self, q, k, v, *, cu_seqlens=None, cu_seqlens_k=None, model="", layer=0,
               return_lse=False, transport="inline", timeout=None, **kw):
        """One layer: returns an AttentionResult. Keyword options: config_version,
        softmax_scale, causal, method (name / dict / MethodConfig), head_methods ({head:
        method}), output (RegionTensor / torch tensor to write into), dtype ('bf16' for uint16
        bit arrays), return_stats, estimate_recall, request_id."""
        staged = None
        if transport == "shm":
            q, k, v, out_ref, staged = self._stage(q, k, v, kw.get("dtype"))
            kw.setdefault("output", out_ref)
        elif transport != "inline":
            raise ValueError("transport must be 'inline' or 'shm'")
        try:
            req, out_shape, dtype = self.build_request(
                q, k, v, cu_seqlens=cu_seqlens, cu_seqlens_k=cu_seqlens_k, model=model,
                layer=layer, return_lse=return_lse, **kw)
            resp = self._call("ComputeAttention", req, timeout)
            return _decode(resp, out_shape, dtype, staged)
        finally:
            if staged is not None:
                self._staging_lock.release()

    def _stage(self, q, k, v, dtype):
        """Copies numpy Q/K/V into this client's staging region; holds the staging lock until
        the caller releases it (one staged request at a time per client)."""
        arrs = [np.ascontiguousarray(x) for x in (q, k, v)]
        wire = dtypes.of_array(arrs[0], dtype)
        out_bytes = arrs[0].nbytes
        need = sum(a.nbytes for a in arrs) + out_bytes + 4 * 64
        self._staging_lock.acquire()
        try:
            if self._staging is None or self._staging[0].byte_size < need:
                if self._staging is not None:
                    old, old_name = self._staging
                    self._staging = None
                    self.unregister_region(old_name)
                    old.destroy()
                n = next(_counter)
                key = f"{self.shm_prefix}py-{os.getpid()}-{id(self):x}-{n}"
                region = SharedMemoryRegion.create(key, max(need, 1 << 20))
                name = f"py-{os.getpid()}-{id(self):x}-{n}"
                try:
                    self.register_system_region(name, region)
                except Exception:
                    region.destroy()
                    raise
                self._staging = (region, name)
            region, name = self._staging
            refs, offset = [], 0
            for a in arrs + [None]:
                offset = (offset + 63) // 64 * 64
                if a is None:
                    refs.append(RegionTensor(name, offset, arrs[0].shape, wire))
                    break
                region.set(a, offset)
                refs.append(RegionTensor(name, offset, a.shape, wire))
                offset += a.nbytes
            return refs[0], refs[1], refs[2], refs[3], (region, refs[3].offset)
        except BaseException:
            self._staging_lock.release()
            raise

    def stream(self, timeout=None):
        """A LayerStream: one bidi stream per prompt, one message per layer, in order."""
        return LayerStream(self, timeout)

    def attend_layers(self, layers, timeout=None, **common):
        """Runs an iterable of per-layer dicts (q, k, v, layer, ... overriding `common`) through
        one stream; yields AttentionResults in order."""
        with self.stream(timeout) as s:
            pending = 0
            for spec in layers:
                args = dict(common)
                args.update(spec)
                s.send(**args)
                pending += 1
            s.done_writing()
            for _ in range(pending):
                yield s.recv()


class LayerStream:
    """ComputeAttentionStream: `send(q, k, v, layer=..., ...)` per layer, `recv()` answers in
    order. Tensors must be inline or in registered regions (no transport='shm' staging)."""

    _END = object()

    def __init__(self, client, timeout):
        self._client = client
        self._queue = queue.Queue()
        self._shapes = queue.Queue()
        self._closed = False

        def requests():
            while True:
                item = self._queue.get()
                if item is self._END:
                    return
                yield item

        try:
            self._responses = client._stub.ComputeAttentionStream(
                requests(), timeout=timeout or client.timeout,
                metadata=client._metadata or None)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "ComputeAttentionStream") from None

    def send(self, q, k, v, **kw):
        if self._closed:
            raise RuntimeError("stream already closed for writing")
        kw.pop("transport", None)
        req, out_shape, dtype = self._client.build_request(q, k, v, **kw)
        self._shapes.put((out_shape, dtype))
        self._queue.put(req)

    def recv(self):
        try:
            resp = next(self._responses)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "ComputeAttentionStream") from None
        except StopIteration:
            raise EOFError("stream ended") from None
        out_shape, dtype = self._shapes.get_nowait()
        return _decode(resp, out_shape, dtype)

    def done_writing(self):
        if not self._closed:
            self._closed = True
            self._queue.put(self._END)

    def close(self):
        self.done_writing()
        try:
            self._responses.cancel()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.done_writing()
            # Drain so the server's status (and any error) is observed.
            try:
                for _ in self._responses:
                    pass
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    raise errors.from_rpc_error(e, "ComputeAttentionStream") from None
        else:
            self.close()
