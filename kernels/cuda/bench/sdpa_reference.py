#!/usr/bin/env python3
"""Times PyTorch SDPA (cuDNN and flash backends) on cuda_bench's dense shapes and prints the
same JSON lines; with --ours FILE (cuda_bench's output) it also prints ratio lines:
ours / SDPA for the dense kernel, and each sparse kernel's effective TFLOP/s over our dense
kernel at the same length.

Ratios compare lines of the same shape (seq_len, heads, kv_heads, head_dim, causal, dtype).

kv_heads, head_dim, causal and dtype take comma lists: every combination is timed (the shape
matrix of cuda_bench, which reads these lines back with --sdpa=FILE).

Usage (GPU machine): python3 sdpa_reference.py --seq_lens 8192,32768,131072 [--causal 0]
  [--dtype fp16] [--heads 32 --kv_heads 8 --head_dim 128] [--ours bench.jsonl]
"""
import argparse
import json
import math
import sys
import time


def causal_pairs(n):
    return n * (n + 1) // 2


def time_sdpa(torch, backend, n, heads, kv_heads, d, iters, warmup, causal=True,
              dtype="bf16", timing=None):
    """Median and min ms of `iters` timed launches after `warmup` (each launch between two
    events, then a synchronize: the host's launch latency is inside the events, as in
    cuda_bench). timing (dict, optional): warmup_ms / target_ms / max_iters as cuda_bench's flags
    (more warm-up and timed launches so that each shape runs long enough to settle its clock),
    presleep_us (> 0, where >= 10 launches are timed: every other timed launch is queued behind
    a GPU sleep of that many microseconds, so its events time the kernel alone without the
    host's launch latency; their median is "ms_gpu", the others' the returned one). The
    dict gets "warmup_iters", "iters" (the launch-included ones), "t0", "t1" (Unix time of the
    timed window) and "ms_gpu"."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    timing = {} if timing is None else timing
    warmup_ms = float(timing.get("warmup_ms", 0))
    target_ms = float(timing.get("target_ms", 0))
    max_iters = int(timing.get("max_iters", 1000))
    sleep_cycles = int(float(timing.get("presleep_us", 0)) * 1980)  # H100/H200 max SM MHz
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = torch.float16 if dtype == "fp16" else torch.bfloat16
    q = torch.randn(1, heads, n, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(1, kv_heads, n, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(1, kv_heads, n, d, device="cuda", dtype=dt, generator=g)

    def once(presleep=False):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if presleep:
            torch.cuda._sleep(sleep_cycles)
        start.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv_heads != heads)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    times, gpu_times = [], []
    with sdpa_kernel([be]):
        # The first launch carries one-off work (cuDNN builds the shape's graph inside its
        # events): it counts for neither warmup_ms nor the estimate of the timed launches.
        warm, last, w = 0.0, 0.0, 0
        while w < warmup or (warmup_ms > 0 and (w < 2 or warm < warmup_ms) and w < max_iters):
            last = once()
            if w > 0:
                warm += last
            w += 1
        timed = iters
        if target_ms > 0 and last > 0:
            timed = max(iters, min(max_iters, int(math.ceil(target_ms / last))))
        timing["warmup_iters"] = w
        timing["t0"] = time.time()
        for i in range(timed):
            if sleep_cycles > 0 and timed >= 10 and i % 2 == 1:
                gpu_times.append(once(presleep=True))
            else:
                times.append(once())
        timing["t1"] = time.time()
    times.sort()
    gpu_times.sort()
    timing["ms_gpu"] = gpu_times[len(gpu_times) // 2] if gpu_times else None
    timing["iters"] = len(times)
    del q, k, v
    torch.cuda.empty_cache()
    return times[len(times) // 2], times[0]


def sdpa_row(torch, args, backend, n, kv_heads, head_dim, causal, dtype, dev):
    """One shape's JSON row (args: this script's flags), None where the backend refuses it."""
    pairs = causal_pairs(n) if causal else n * n
    flops = 4.0 * head_dim * pairs * args.heads
    timing = {"warmup_ms": args.warmup_ms, "target_ms": args.target_ms,
              "max_iters": args.max_iters, "presleep_us": args.presleep_us}
    try:
        ms, ms_min = time_sdpa(torch, backend, n, args.heads, kv_heads, head_dim, args.iters,
                               args.warmup, bool(causal), dtype, timing)
    except Exception as e:  # a backend may refuse a shape
        print(f"# sdpa {backend} {n}: {e}", file=sys.stderr)
        return None
    row = {"kernel": f"sdpa_{backend}", "seq_len": n, "heads": args.heads,
           "kv_heads": kv_heads, "head_dim": head_dim, "causal": causal, "dtype": dtype,
           "density": 1.0, "ms": round(ms, 4), "ms_min": round(ms_min, 4), "iters": args.iters,
           "tflops": round(flops / (ms * 1e-3) / 1e12, 1), "device": dev}
    if args.warmup_ms > 0 or args.target_ms > 0 or args.presleep_us > 0:
        row["iters"] = timing["iters"]
        row.update({"warmup_iters": timing["warmup_iters"], "t0": round(timing["t0"], 3),
                    "t1": round(timing["t1"], 3)})
    if timing.get("ms_gpu"):
        row["ms_gpu"] = round(timing["ms_gpu"], 4)
        row["tflops_gpu"] = round(flops / (timing["ms_gpu"] * 1e-3) / 1e12, 1)
    return row


def arg_parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq_lens", default="8192,32768,131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", default="8")
    ap.add_argument("--head_dim", default="128")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--causal", default="1")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--ours", default="", help="cuda_bench JSON lines to compare with")
    ap.add_argument("--warmup_ms", type=float, default=0,
                    help="warm up past --warmup until the launches add up to this many ms")
    ap.add_argument("--target_ms", type=float, default=0,
                    help="time past --iters until the launches add up to about this many ms")
    ap.add_argument("--max_iters", type=int, default=1000)
    ap.add_argument("--presleep_us", type=float, default=0,
                    help="> 0: every other timed launch waits behind a GPU sleep (ms_gpu)")
    return ap


def main():
    args = arg_parser().parse_args()

    ints = lambda s: [int(x) for x in s.split(",") if x]
    shapes = [(kvh, d, c, dt) for kvh in ints(args.kv_heads) for d in ints(args.head_dim)
              for c in ints(args.causal) for dt in args.dtype.split(",") if dt]
    rows = []
    try:
        import torch
        dev = torch.cuda.get_device_name(0)
        for kv_heads, head_dim, causal, dtype in shapes:
            for n in ints(args.seq_lens):
                for backend in args.backends.split(","):
                    row = sdpa_row(torch, args, backend, n, kv_heads, head_dim, causal, dtype,
                                   dev)
                    if row is None:
                        continue
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    except ImportError as e:
        print(f"# no torch: {e}", file=sys.stderr)

    if not args.ours or len(shapes) != 1:
        return
    args.kv_heads, args.head_dim, args.causal, args.dtype = shapes[0]
    def shape(r):
        return (r["seq_len"], r["heads"], r["kv_heads"], r["head_dim"], r.get("causal", 1),
                r.get("dtype", "bf16"))

    ours = [json.loads(l) for l in open(args.ours) if l.startswith("{")]
    mine = (args.heads, args.kv_heads, args.head_dim, args.causal, args.dtype)
    ours = [r for r in ours if shape(r)[1:] == mine]
    tag = (f"{args.heads}/{args.kv_heads} d{args.head_dim} "
           f"{'causal' if args.causal else 'full'} {args.dtype}")
    best_dense = {}
    for r in ours:
        if r["kernel"].startswith("dense"):
            n = r["seq_len"]
            if n not in best_dense or r["tflops"] > best_dense[n]["tflops"]:
                best_dense[n] = r
    for r in rows:
        o = best_dense.get(r["seq_len"])
        if o:
            print(json.dumps({"ratio": f"{o['kernel']}/{r['kernel']}", "shape": tag,
                              "seq_len": r["seq_len"],
                              "tflops_ratio": round(o["tflops"] / r["tflops"], 3)}))
    for r in ours:
        if r["kernel"].startswith("dense") and r["seq_len"] in best_dense:
            o = best_dense[r["seq_len"]]
            print(json.dumps({"best_dense": o["kernel"], "seq_len": r["seq_len"],
                              "tflops": o["tflops"]})) if r is o else None
        if r["kernel"].startswith("sparse") and r["seq_len"] in best_dense:
            o = best_dense[r["seq_len"]]
            print(json.dumps({"ratio": f"{r['kernel']}/{o['kernel']}", "shape": tag,
                              "seq_len": r["seq_len"],
                              "density": r["density"],
                              "tflops_ratio": round(r["tflops"] / o["tflops"], 3)}))


if __name__ == "__main__":
    main()
