"""The client half of the GPU stand-in (any Python with grpcio): reads the CUDA IPC descriptions
standin_torch.py wrote, calls the worker once per method (1 warm-up + 3 timed calls), writes
per-method timings/stats and the LSE."""
import json
import os
import sys
import time

import numpy as np

import spattn


def tensor(d):
    return spattn.CudaIpcTensor(bytes.fromhex(d["handle"]), d["offset"], d["byte_size"],
                                d["shape"], d["dtype"], device_id=d["device_id"],
                                device_uuid=d["device_uuid"])


def main(path):
    with open(path) as f:
        req = json.load(f)
    c = spattn.Client(req["address"], timeout=120)
    q, k, v = tensor(req["q"]), tensor(req["k"]), tensor(req["v"])
    out = {}
    for m, od in req["outputs"].items():
        o = tensor(od)
        walls = []
        for i in range(4):
            t0 = time.perf_counter()
            r = c.attend(q, k, v, cu_seqlens=req["cu_seqlens_q"], cu_seqlens_k=req["cu_seqlens_k"],
                         output=o, method=m, return_lse=True, return_stats=True,
                         request_id=f"standin-{m}-{i}")
            walls.append(time.perf_counter() - t0)
        t = r.timings
        out[m] = {"device": r.device, "density": r.density,
                  "wall_ms_median": 1e3 * float(np.median(walls[1:])),
                  "wall_ms_first": 1e3 * walls[0],
                  "server_total_ms": 1e3 * t.total_seconds,
                  "index_build_ms": 1e3 * t.index_build_seconds,
                  "kernel_ms": 1e3 * t.kernel_seconds, "resolve_ms": 1e3 * t.resolve_seconds,
                  "lse_shape": list(r.lse.shape)}
        np.save(os.path.join(req["out_dir"], f"lse_{m}.npy"), r.lse)
        print(m, json.dumps(out[m]), flush=True)
    with open(os.path.join(req["out_dir"], "standin_client.json"), "w") as f:
        json.dump(out, f)
    c.close()


if __name__ == "__main__":
    main(sys.argv[1])
