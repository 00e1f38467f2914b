#!/usr/bin/env python3
"""Times the public reference kernels of the dynamic sparse methods on the tensors spattn-bench
used (its --dump file: the same Q/K/V our kernels ran on) and prints JSON lines comparable with
spattn-bench's: kernel ms, computed pairs, density (over causal pairs) and the per-pair TFLOP/s
(4 * head_dim FLOPs per computed pair).

The reference files are fetched and carried to the GPU machine in a git-ignored folder (--ref_dir),
never committed:
  * vertical_slash: MInference's `_triton_mixed_sparse_attention`
    (minference/ops/pit_sparse_flash_attention_v2.py). Its index comes from MInference's
    documented selection, written here: the last `last_q` queries' softmax rows, the top `k_v`
    columns and top `k_s` diagonals (the first 30 columns and the 100 nearest diagonals always
    kept), converted to its 64x64 format (`convert_vertical_slash_indexes`, a compiled extension
    in MInference) by `convert_vertical_slash` below, from the semantics of that step: per
    64-row block, each diagonal at distance s covers keys [end - s - 64, end - s) (clamped at
    64); sorted by position these windows merge (a window starting inside the current range or
    right after it extends the range by 64 keys), every range is cut into 64-key blocks, and the
    vertical columns outside every range (and before the last one's end) become gathered columns.
  * flex_prefill: FlexPrefill's `get_active_blocks` (its index) and
    `triton_block_wise_attention` (its kernel), GQA as given.
  * anchor: AnchorAttention's three steps: the anchor pass over the initial and local keys
    (step 1, an attention pass that leaves (m, l, acc)), the stripe selection (step 2, its
    index) and the stripe kernel over the selected keys starting from step 1's state (step 3).
    Its kernel time is step 1 + step 3 (the attention work); step 2 is reported as the index.
MInference's and AnchorAttention's kernels are multi-head only: K/V are expanded to every q head.

Usage (GPU machine, minference_reference.py beside this file): python3 sparse_references.py
  --ref_dir ref --tensors w32k.safetensors
  [--methods vertical_slash,flex_prefill,anchor] [--iters 5] [--warmup 1]
"""
import argparse
import json
import math
import os
import struct
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from minference_reference import timed  # noqa: E402  (the same median-of-events timing)

_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def read_safetensors(torch, path):
    """name -> tensor (on the CPU) of a .safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=getattr(torch, _DTYPES[meta["dtype"]]))
        out[name] = t.reshape(meta["shape"])
    return out


def load_source(path, name, replace=()):
    """Loads a Python file as a module, with textual replacements (imports this harness does not
    carry)."""
    src = open(path).read()
    for a, b in replace:
        src = src.replace(a, b)
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def line(kernel, n, h, d, pairs, ms, dev, **extra):
    causal = h * n * (n + 1) // 2
    r = {"kernel": kernel, "seq_len": n, "heads": h, "head_dim": d,
         "density": round(pairs / causal, 4), "pairs": int(pairs), "ms": round(ms, 4),
         "tflops": round(4.0 * d * pairs / (ms * 1e-3) / 1e12, 1), "device": dev}
    r.update(extra)
    print(json.dumps(r), flush=True)


# ---- vertical_slash (MInference) ---------------------------------------------------------------

def select_vertical_slash(torch, q, k, last_q, k_v, k_s):
    """MInference's estimate: q, k [H, N, D] (k expanded). Returns v_idx [H, k_v] (key columns)
    and s_idx [H, k_s] (diagonal distances), both int32."""
    h, n, d = q.shape
    v_all, s_all = [], []
    rows = torch.arange(n - last_q, n, device=q.device)
    keys = torch.arange(n, device=q.device)
    for i in range(h):  # a head at a time: [last_q, N] fp32 scores
        qk = (q[i, -last_q:].float() @ k[i].float().T) / math.sqrt(d)
        qk.masked_fill_(keys[None, :] > rows[:, None], float("-inf"))
        p = torch.softmax(qk, dim=-1)
        vertical = p.sum(0)
        vertical[:30] = float("inf")
        dist = (rows[:, None] - keys[None, :]).clamp(min=0)  # [last_q, N]
        slash = torch.zeros(n, device=q.device).index_add_(0, dist.reshape(-1), p.reshape(-1))
        slash[:100] = float("inf")
        v_all.append(vertical.topk(min(k_v, n)).indices)
        s_all.append(slash.topk(min(k_s, n)).indices)
    return torch.stack(v_all).int(), torch.stack(s_all).int()


def convert_vertical_slash(torch, v_idx, s_idx, n, bm=64):
    """(v_idx [H, NV], s_idx [H, NS]) -> MInference's block_count [1, H, R], block_offset
    [1, H, R, NS], column_count [1, H, R], column_index [1, H, R, NV] (R = ceil(n / 64))."""
    h = v_idx.shape[0]
    dev = v_idx.device
    rows = (n + bm - 1) // bm
    v = v_idx.long().sort(-1).values                       # [H, NV] ascending
    s = s_idx.long().sort(-1, descending=True).values      # [H, NS] far diagonals first
    ns = s.shape[1]
    end_m = (torch.arange(rows, device=dev) + 1) * bm      # [R]
    # Window ends per (head, row block, diagonal): ascending along the last axis.
    e = (end_m[None, :, None] - s[:, None, :]).clamp(min=bm)       # [H, R, NS]
    valid = s[:, None, :] < end_m[None, :, None]
    big = 1 << 30
    e = torch.where(valid, e, torch.full_like(e, -big)).int()  # invalid windows: skipped
    # The greedy merge, vectorized over (head, row block), one diagonal at a time (no host
    # synchronization inside: masked writes go through gather/scatter).
    start = torch.full((h, rows), -big, device=dev, dtype=torch.int32)
    end = torch.full((h, rows), -big, device=dev, dtype=torch.int32)
    r_start = torch.zeros((h, rows, ns), device=dev, dtype=torch.int32)
    r_end = torch.zeros((h, rows, ns), device=dev, dtype=torch.int32)
    r_cnt = torch.zeros((h, rows), device=dev, dtype=torch.long)

    def store(mask):
        idx = r_cnt.clamp(max=ns - 1)[..., None]
        for buf, val in ((r_start, start), (r_end, end)):
            cur = torch.gather(buf, 2, idx)
            buf.scatter_(2, idx, torch.where(mask[..., None], val[..., None], cur))

    for j in range(ns):
        ej = e[:, :, j]
        ok = ej > -big
        have = end > -big
        new = ok & (~have | (ej > end + bm))
        grow = ok & have & (ej > end) & (ej <= end + bm)
        close = new & have  # the open range ends where a new one starts
        store(close)
        r_cnt = r_cnt + close.long()
        start = torch.where(new, ej - bm, start)
        end = torch.where(new, ej, torch.where(grow, end + bm, end))
    have = end > -big
    store(have)
    r_cnt = r_cnt + have.long()
    r_start, r_end = r_start.long(), r_end.long()
    # Ranges -> 64-key blocks.
    nblk = torch.where(torch.arange(ns, device=dev)[None, None, :] < r_cnt[..., None],
                       (r_end - r_start) // bm, torch.zeros_like(r_end))
    block_count = nblk.sum(-1)
    width = int(block_count.max().item()) if block_count.numel() else 0
    width = max(width, 1)
    first = torch.cumsum(nblk, -1) - nblk                 # first block slot of each range
    slot = torch.arange(width, device=dev)
    # range of each block slot: the last range whose first slot <= slot
    which = torch.searchsorted(first.reshape(-1, ns).contiguous(),
                               slot.expand(h * rows, width).contiguous(), right=True) - 1
    which = which.reshape(h, rows, width).clamp(min=0)
    off = slot[None, None, :] - torch.gather(first, 2, which)
    block_offset = torch.gather(r_start, 2, which) + off * bm
    block_offset = torch.where(slot[None, None, :] < block_count[..., None], block_offset,
                               torch.zeros_like(block_offset))
    # Verticals outside every range and before the last range's end.
    starts = torch.where(torch.arange(ns, device=dev)[None, None, :] < r_cnt[..., None], r_start,
                         torch.full_like(r_start, big))
    nv = v.shape[1]
    vv = v[:, None, :].expand(h, rows, nv).contiguous()
    pos = torch.searchsorted(starts.reshape(-1, ns).contiguous(), vv.reshape(-1, nv),
                             right=True).reshape(h, rows, nv) - 1
    covered = (pos >= 0) & (vv < torch.gather(r_end, 2, pos.clamp(min=0)))
    last_end = torch.gather(r_end, 2, (r_cnt - 1).clamp(min=0)[..., None]).squeeze(-1)
    keep = ~covered & (vv < last_end[..., None]) & (r_cnt[..., None] > 0)
    column_count = keep.sum(-1)
    order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
    column_index = torch.gather(vv, 2, order)
    column_index = torch.where(torch.arange(nv, device=dev)[None, None, :] < column_count[..., None],
                               column_index, torch.zeros_like(column_index))
    return (block_count[None].int(), block_offset[None].int().contiguous(),
            column_count[None].int(), column_index[None].int().contiguous())


def vertical_slash_pairs(torch, block_count, block_offset, column_count, n, bm=64):
    """Computed pairs of MInference's kernel on that index (causal mask inside blocks)."""
    _, h, rows, width = block_offset.shape
    m0 = (torch.arange(rows, device=block_offset.device) * bm)[None, :, None]
    b = block_offset[0].long()
    live = torch.arange(width, device=b.device)[None, None, :] < block_count[0][..., None]
    pairs = torch.zeros((), dtype=torch.float64, device=b.device)
    for r in range(bm):  # row r of each block: keys b .. b+63 that are <= m0 + r (and < n)
        row = m0 + r
        cnt = (torch.minimum(row + 1, b + bm).clamp(max=n) - b).clamp(min=0, max=bm)
        cnt = torch.where(live & (row < n), cnt, torch.zeros_like(cnt))
        pairs += cnt.sum().double()
    real_rows = torch.clamp(n - m0[..., 0], max=bm).clamp(min=0)  # [1, R]
    pairs += (column_count[0].long() * real_rows).sum().double()
    return float(pairs.item())


def run_vertical_slash(torch, args, q, k, v, dev):
    mod = load_source(f"{args.ref_dir}/pit_sparse_flash_attention_v2.py", "minference_vs",
                      [("from ..cuda import convert_vertical_slash_indexes",
                        "convert_vertical_slash_indexes = None")])
    h, n, d = q.shape
    kx = k.repeat_interleave(h // k.shape[0], 0)
    vx = v.repeat_interleave(h // v.shape[0], 0)
    torch.cuda.synchronize()
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    v_idx, s_idx = select_vertical_slash(torch, q, kx, args.last_q, args.k_v, args.k_s)
    t1.record()
    torch.cuda.synchronize()
    est_ms = t0.elapsed_time(t1)
    bc, bo, cc, ci = convert_vertical_slash(torch, v_idx, s_idx, n)
    pairs = vertical_slash_pairs(torch, bc, bo, cc, n)
    seqlens = torch.tensor([n], dtype=torch.int32, device="cuda")
    q4, k4, v4 = q[None].contiguous(), kx[None].contiguous(), vx[None].contiguous()
    ms = timed(torch, lambda: mod._triton_mixed_sparse_attention(
        q4, k4, v4, seqlens, bc, bo, cc, ci, d ** -0.5, 64, 64), args.iters, args.warmup)
    line("minference_triton_vertical_slash", n, h, d, pairs, ms, dev,
         estimate_ms_torch=round(est_ms, 2), last_q=args.last_q, k_v=args.k_v, k_s=args.k_s,
         columns_share=round(float((cc.sum() * 64).item()) / max(pairs, 1), 4))


# ---- flex_prefill (FlexPrefill) ----------------------------------------------------------------

def run_flex_prefill(torch, args, q, k, v, dev):
    for gamma in [float(x) for x in args.gamma.split(",") if x]:
        flex_prefill_once(torch, args, q, k, v, dev, gamma)


def flex_prefill_once(torch, args, q, k, v, dev, gamma):
    # The file imports einops and transformers at the top; give it the one rearrange it uses and
    # no flash-attn.
    if "einops" not in sys.modules:
        einops = types.ModuleType("einops")

        def rearrange(x, pattern):
            assert pattern == "b h g i j -> b (h g) i j", pattern
            return x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[3], x.shape[4])

        einops.rearrange = rearrange
        sys.modules["einops"] = einops
    mod = load_source(f"{args.ref_dir}/flex_prefill_attention.py", "flexprefill_ref",
                      [("from transformers.utils import is_flash_attn_2_available",
                        "is_flash_attn_2_available = lambda: False")])
    h, n, d = q.shape
    bs = 128
    qb = q.permute(1, 0, 2)[None].contiguous()   # [1, N, H, D]
    kb = k.permute(1, 0, 2)[None].contiguous()
    vb = v.permute(1, 0, 2)[None].contiguous()
    torch.cuda.synchronize()
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    block_idx = mod.get_active_blocks(qb, kb, vb, bs, gamma, math.ceil(args.min_budget / bs),
                                      2147483647, args.tau, False)
    t1.record()
    torch.cuda.synchronize()
    idx_ms = t0.elapsed_time(t1)
    nb = math.ceil(n / bs)
    pairs = 0.0
    for per_head in block_idx[0]:
        ids = per_head.long()
        ids = ids[ids < nb * nb]
        r, c = ids // nb, ids % nb
        ids = ids[c <= r]
        r, c = ids // nb, ids % nb
        pairs += float((c < r).sum().item()) * bs * bs + float((c == r).sum().item()) * bs * (bs + 1) / 2
    ms = timed(torch, lambda: mod.triton_block_wise_attention(qb, kb, vb, block_idx, bs),
               args.iters, args.warmup)
    line("flexprefill_triton_block_wise", n, h, d, pairs, ms, dev, index_ms=round(idx_ms, 2),
         gamma=gamma, tau=args.tau, min_budget=args.min_budget)


# ---- anchor (AnchorAttention) ------------------------------------------------------------------

def run_anchor(torch, args, q, k, v, dev):
    mod = load_source(f"{args.ref_dir}/anchor_attn.py", "anchor_ref")
    h, n, d = q.shape
    bs, step = 128, args.step
    if n % (bs * step) != 0:
        print(f"# anchor: {n} not a multiple of {bs * step}", file=sys.stderr)
        return
    kx = k.repeat_interleave(h // k.shape[0], 0)[None].contiguous()
    vx = v.repeat_interleave(h // v.shape[0], 0)[None].contiguous()
    q4 = q[None].contiguous()
    scale = d ** -0.5
    theta = args.theta * 1.44269504  # as its entry point does
    state = {}

    def step1():
        state["lma"] = mod.anchorattn_step_1(q4, kx, vx, 1, 1, bs, step, 1, h, n, d, scale, 128, 128)

    def step2():
        state["tc"] = mod.anchorattn_step_2(q4, kx, state["lma"][1], bs, step, theta, 1, h, n, d,
                                            scale)

    out = torch.empty_like(q4)

    def step3():
        l_buf, m_buf, acc = state["lma"]
        coords, counts = state["tc"]
        mod._launch_anchorattn_step_3(q4, kx, vx, out, l_buf, m_buf, acc, coords, counts,
                                      1, h, n, d, scale, bs, step, 128)

    ms1 = timed(torch, step1, args.iters, args.warmup)
    ms2 = timed(torch, step2, args.iters, args.warmup)
    # step 3 reads step 1's buffers (it does not write them): timed on the same state.
    ms3 = timed(torch, step3, args.iters, args.warmup)
    counts = state["tc"][1][0, :, :, 0].double()            # [H, N / (bs * step)]
    big = bs * step
    r = torch.arange(n, device="cuda")
    init_off = torch.clamp((r // 128 + 1) * 128, max=big)
    init = torch.minimum(init_off, r + 1)
    local0 = torch.maximum((r // big) * big, init_off)
    local = (r + 1 - local0).clamp(min=0)
    pairs = float(h * (init + local).sum().item()) + float((counts * big).sum().item())
    line("anchorattn_triton", n, h, d, pairs, ms1 + ms3, dev, step1_ms=round(ms1, 3),
         index_ms=round(ms2, 3), step3_ms=round(ms3, 3), theta=args.theta, step=step)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref_dir", default="ref")
    ap.add_argument("--tensors", required=True, help="spattn-bench --dump file (q, k, v; THD)")
    ap.add_argument("--methods", default="vertical_slash,flex_prefill,anchor")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--last_q", type=int, default=64)
    ap.add_argument("--k_v", type=int, default=1000)
    ap.add_argument("--k_s", type=int, default=6096)
    ap.add_argument("--gamma", default="0.9",
                    help="FlexPrefill's coverage; a list runs one line each (density match)")
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--min_budget", type=int, default=1024)
    ap.add_argument("--theta", type=float, default=12.0)
    ap.add_argument("--step", type=int, default=16)
    args = ap.parse_args()
    import torch

    dev = torch.cuda.get_device_name(0)
    t = read_safetensors(torch, args.tensors)
    # THD [tokens, heads, dim] -> [heads, tokens, dim]
    q, k, v = (t[x].cuda().permute(1, 0, 2).contiguous() for x in ("q", "k", "v"))
    if q.dtype != torch.bfloat16:
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    for m in args.methods.split(","):
        try:
            {"vertical_slash": run_vertical_slash, "flex_prefill": run_flex_prefill,
             "anchor": run_anchor}[m](torch, args, q, k, v, dev)
        except Exception as exc:  # one reference failing must not hide the others
            print(f"# {m} reference failed: {exc!r}", file=sys.stderr)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
