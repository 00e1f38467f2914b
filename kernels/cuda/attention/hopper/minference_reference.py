#!/usr/bin/env python3
"""Times MInference's public Triton kernels (their files are fetched and carried to the GPU
machine in a git-ignored folder, never committed) and prints JSON lines with ms and the
per-computed-pair TFLOP/s (4 * d per pair), comparable with cuda_bench's sparse lines and with
spattn-bench's a_shape line:
  * block_sparse (block_sparse_flash_attention.py): random causal block indexes of a given
    density (64 x 64 blocks, the diagonal block counted as half);
  * a_shape (streaming_kernel.py, `streaming_forward`): sink 128 + local 3968 tokens, the paper
    defaults our a_shape builder uses (pairs counted token by token).

MInference's kernels are multi-head (one K/V per q head): K/V are expanded to every q head first.

Usage (GPU machine): python3 minference_reference.py --ref_dir ref --seq_lens 32768
  [--kernels block_sparse,a_shape] [--densities 0.1,0.3] [--heads 32] [--head_dim 128]
"""
import argparse
import importlib.util
import json
import sys


def load_module(path, name="minference_block_sparse"):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(torch, fn, iters, warmup):
    times = []
    for i in range(warmup + iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def a_shape(torch, args, dev, n_init=128, n_local=3968):
    mod = load_module(f"{args.ref_dir}/streaming_kernel.py", "minference_streaming")
    for n in [int(x) for x in args.seq_lens.split(",") if x]:
        h, d = args.heads, args.head_dim
        g = torch.Generator(device="cuda").manual_seed(2)
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        ms = timed(torch, lambda: mod.streaming_forward(q, k, v, n_init, n_local), args.iters,
                   args.warmup)
        # Row i: keys (i - n_local, i] plus the first n_init keys not in that window.
        pairs = 0
        for i in range(n):
            local = min(i + 1, n_local)
            pairs += local + max(0, min(n_init, i + 1 - local))
        causal = n * (n + 1) // 2
        print(json.dumps({"kernel": "minference_triton_a_shape", "seq_len": n, "heads": h,
                          "head_dim": d, "n_init": n_init, "n_local": n_local,
                          "density": round(pairs / causal, 4), "ms": round(ms, 4),
                          "tflops": round(4.0 * d * pairs * h / (ms * 1e-3) / 1e12, 1),
                          "device": dev}), flush=True)
        del q, k, v
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref_dir", default="ref")
    ap.add_argument("--seq_lens", default="32768")
    ap.add_argument("--densities", default="0.1,0.3")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--kernels", default="block_sparse")
    args = ap.parse_args()
    import torch

    kernels = args.kernels.split(",")
    dev = torch.cuda.get_device_name(0)
    if "a_shape" in kernels:
        a_shape(torch, args, dev)
    if "block_sparse" not in kernels:
        return
    mod = load_module(f"{args.ref_dir}/block_sparse_flash_attention.py")
    bm = 64
    for n in [int(x) for x in args.seq_lens.split(",") if x]:
        h, d = args.heads, args.head_dim
        g = torch.Generator(device="cuda").manual_seed(1)
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        seqlens = torch.tensor([n], dtype=torch.int32, device="cuda")
        m = n // bm
        causal_blocks = m * (m + 1) // 2
        rows = torch.arange(m, device="cuda")
        for dens in [float(x) for x in args.densities.split(",") if x]:
            # Smallest top_k whose kept-block share reaches the density.
            top_k = 1
            while top_k < m and sum(min(i + 1, top_k) for i in range(m)) < dens * causal_blocks:
                top_k += 1
            score = torch.rand(1, h, m, m, device="cuda", generator=g)
            score = score.masked_fill(rows[None, None, None, :] > rows[None, None, :, None],
                                      -float("inf"))
            score[..., rows, rows] = float("inf")  # the diagonal block always
            idx = torch.topk(score, top_k, dim=-1).indices.to(torch.int32).sort(dim=-1).values
            kept = sum(min(i + 1, top_k) for i in range(m))
            pairs = h * ((kept - m) * bm * bm + m * bm * (bm + 1) // 2)
            times = []
            for i in range(args.warmup + args.iters):
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                mod._triton_block_sparse_attention(q, k, v, seqlens, idx, d ** -0.5, bm, bm)
                e.record()
                torch.cuda.synchronize()
                if i >= args.warmup:
                    times.append(s.elapsed_time(e))
            times.sort()
            ms = times[len(times) // 2]
            print(json.dumps({"kernel": "minference_triton_block_sparse", "seq_len": n,
                              "heads": h, "head_dim": d, "block": bm,
                              "density": round(kept / causal_blocks, 4), "ms": round(ms, 4),
                              "tflops": round(4.0 * d * pairs / (ms * 1e-3) / 1e12, 1),
                              "device": dev}), flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # the reference is best effort (Triton version, shapes)
        print(f"# minference reference failed: {exc!r}", file=sys.stderr)
        sys.exit(1)
