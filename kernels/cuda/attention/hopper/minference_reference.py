#!/usr/bin/env python3
"""Times MInference's public Triton block-sparse attention kernel (its file is fetched and carried
to the GPU machine in a git-ignored folder, never committed) on random causal block indexes of a
given density, and prints JSON lines with the per-computed-pair TFLOP/s (4 * d per pair, the
diagonal block counted as half), comparable with cuda_bench's sparse lines.

MInference's kernel is multi-head (one K/V per q head): K/V are expanded to every q head first.

Usage (GPU machine): python3 minference_reference.py --ref_dir ref --seq_lens 32768
  [--densities 0.1,0.3] [--heads 32] [--head_dim 128]
"""
import argparse
import importlib.util
import json
import sys


def load_module(path):
    spec = importlib.util.spec_from_file_location("minference_block_sparse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref_dir", default="ref")
    ap.add_argument("--seq_lens", default="32768")
    ap.add_argument("--densities", default="0.1,0.3")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head_dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    import torch

    mod = load_module(f"{args.ref_dir}/block_sparse_flash_attention.py")
    dev = torch.cuda.get_device_name(0)
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
