#!/usr/bin/env python3
"""PyTorch SDPA (cuDNN backend) on one chunk of a chunked prefill: q_len queries that are the
last q_len positions of k_len keys (the causal mask aligned bottom-right, as spattn's kernels
take a query suffix). PyTorch's is_causal aligns top-left when q_len != k_len, so the chunk is
timed as the two calls that make it up: the queries against the k_len - q_len earlier keys
(no mask) and against their own q_len keys (causal, square); their outputs merge by
log-sum-exp (an elementwise step not timed here). One JSON line: both parts' medians and their
sum, the GPU name.

Usage (GPU machine): python3 sdpa_chunk.py --k_len 1048576 --q_len 65536 [--iters 3 --warmup 1]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k_len", type=int, default=1 << 20)
    ap.add_argument("--q_len", type=int, default=1 << 16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv_heads", type=int, default=8)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--backend", default="cudnn")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[args.backend]
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = torch.bfloat16
    n, c = args.k_len, args.q_len
    q = torch.randn(1, args.heads, c, args.head_dim, device="cuda", dtype=dt, generator=g)
    k = torch.randn(1, args.kv_heads, n, args.head_dim, device="cuda", dtype=dt, generator=g)
    v = torch.randn(1, args.kv_heads, n, args.head_dim, device="cuda", dtype=dt, generator=g)
    gqa = args.kv_heads != args.heads

    def timed(fn):
        times = []
        for i in range(args.warmup + args.iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(start.elapsed_time(end))
        times.sort()
        return times[len(times) // 2]

    kp, vp = k[:, :, : n - c], v[:, :, : n - c]
    ks, vs = k[:, :, n - c:], v[:, :, n - c:]
    with sdpa_kernel([be]):
        prefix_ms = timed(lambda: F.scaled_dot_product_attention(q, kp, vp, enable_gqa=gqa))
        square_ms = timed(
            lambda: F.scaled_dot_product_attention(q, ks, vs, is_causal=True, enable_gqa=gqa))
    pairs = c * (n - c) + c * (c + 1) // 2
    total = prefix_ms + square_ms
    print(json.dumps({
        "kernel": f"sdpa_{args.backend}_chunk", "k_len": n, "q_len": c, "heads": args.heads,
        "kv_heads": args.kv_heads, "head_dim": args.head_dim, "dtype": "bf16",
        "prefix_ms": round(prefix_ms, 3), "square_ms": round(square_ms, 3),
        "ms": round(total, 3), "iters": args.iters,
        "tflops": round(4.0 * args.head_dim * pairs * args.heads / (total * 1e-3) / 1e12, 1),
        "device": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
