#!/usr/bin/env python3
"""Dense cells of PyTorch SDPA and of our kernel side by side, cell by cell, in one run: SDPA in
this process (sdpa_reference.py's timing), ours in one `cuda_bench --serve=1` process that stays
up (a request per cell on its stdin). Per cell the two sides run back to back, in alternating
order (SDPA first in even cells, ours first in odd ones), so that both see the same clock, power
and temperature state, drifts of the run cancelling over pairs of cells (s23-dense found a
52 -> 66 C warm-up over a first 50 s SDPA pass that favoured whichever side ran first).

Usage (GPU machine): python3 dense_pairs.py SDPA_FLAGS... --bench="bin/cuda_bench --variants=5
  --sparse_variants= --block_ms= [--knob_sets=...] [timing flags]" --sdpa_out=FILE
  --bench_out=FILE
SDPA_FLAGS are sdpa_reference.py's (--seq_lens= --kv_heads= --head_dim= --causal= --dtype=,
--warmup/--iters/--warmup_ms/--target_ms/--max_iters/--presleep_us, --backends); the cells are
every combination, in sdpa_reference.py's / cuda_bench's order (kv_heads, head_dim, causal,
dtype, then seq_lens innermost).
"""
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdpa_reference  # noqa: E402


def main():
    ap = sdpa_reference.arg_parser()
    ap.add_argument("--bench", required=True, help="cuda_bench command line (serve mode added)")
    ap.add_argument("--sdpa_out", required=True)
    ap.add_argument("--bench_out", required=True)
    args = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]
    cells = [(n, kvh, d, c, dt) for kvh in ints(args.kv_heads) for d in ints(args.head_dim)
             for c in ints(args.causal) for dt in args.dtype.split(",") if dt
             for n in ints(args.seq_lens)]
    import torch
    dev = torch.cuda.get_device_name(0)
    bench = subprocess.Popen(shlex.split(args.bench) + ["--serve=1", "--heads=%d" % args.heads],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    sdpa_out = open(args.sdpa_out, "a")
    bench_out = open(args.bench_out, "a")
    backend = args.backends.split(",")[0]

    def ours(n, kvh, d, c, dt):
        bench.stdin.write("--seq_lens=%d --kv_heads=%d --head_dim=%d --causal=%d --dtype=%s\n"
                          % (n, kvh, d, c, dt))
        bench.stdin.flush()
        for line in bench.stdout:
            if line.startswith('{"served"'):
                rc = json.loads(line)["served"]
                if rc != 0:
                    print("# cuda_bench rc=%d on %s" % (rc, (n, kvh, d, c, dt)), file=sys.stderr)
                return
            bench_out.write(line)
            bench_out.flush()
        raise RuntimeError("cuda_bench ended")

    def sdpa(n, kvh, d, c, dt):
        row = sdpa_reference.sdpa_row(torch, args, backend, n, kvh, d, c, dt, dev)
        if row is not None:
            sdpa_out.write(json.dumps(row) + "\n")
            sdpa_out.flush()

    for i, cell in enumerate(cells):
        for side in ((sdpa, ours) if i % 2 == 0 else (ours, sdpa)):
            side(*cell)
        print("# cell %d/%d %s" % (i + 1, len(cells), cell), file=sys.stderr, flush=True)
    bench.stdin.close()
    return bench.wait()


if __name__ == "__main__":
    sys.exit(main())
