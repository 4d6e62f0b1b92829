#!/usr/bin/env python3
"""Where the FSDP2 baseline's step goes: torch.profiler's CUDA kernel table for fsdp2_gpt.py's model.

Builds the model as fsdp2_gpt.py does (its `shard`: fully_shard per block and on the root, bf16
params / fp32 reduce, per-block activation checkpointing, fused AdamW), runs 3 warm-up steps, profiles 2,
and prints the kernels sorted by GPU time (divide by 2 for per step). Compare with bmt-train's
`--timeline-ops` trace through bench/timeline_summary.py.
Run: python3 -m torch.distributed.run --nproc_per_node=1 fsdp2_profile.py [--model gpt2-1.5b] [--batch 16]
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from fsdp2_gpt import GPT, PRESETS, shard


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-1.5b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=45, help="kernels to list")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    layers, heads, dim = PRESETS[args.model]
    vocab = 50304
    with torch.device("cuda"):
        model = GPT(layers, heads, dim, vocab, args.seq)
    opt = shard(model)
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device="cuda")
    x, y = tokens[:, :-1], tokens[:, 1:].contiguous()

    def step():
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    if dist.get_rank() == 0:
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=90))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
