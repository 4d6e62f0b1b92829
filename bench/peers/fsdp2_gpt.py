#!/usr/bin/env python3
"""PyTorch FSDP2 baseline for the side-by-side benchmark: the same GPT-2 shapes bmt-train trains.

fully_shard on every block and on the root, MixedPrecisionPolicy(bf16 params, fp32 reduce),
per-block activation checkpointing, fused AdamW, F.scaled_dot_product_attention.
Run: python3 -m torch.distributed.run --nproc_per_node=N fsdp2_gpt.py --model gpt2-1.5b --batch 16
--layers/--dim/--heads/--ffn/--vocab override the preset's shape (as bmt-train's flags do);
--cpu-offload adds CPUOffloadPolicy (parameters, gradients and optimizer state in host memory, the
optimizer step on the CPU).
Prints one JSON line on rank 0: tokens/s per GPU, MFU (989 TFLOP/s, 6N + 6LCT FLOPs/token), peak memory.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

PRESETS = {  # layers, heads, dim (vocab 50304, seq 1024), as in bmt-train
    "gpt2-124m": (12, 12, 768),
    "gpt2-350m": (24, 16, 1024),
    "gpt2-774m": (36, 20, 1280),
    "gpt2-1.5b": (48, 25, 1600),
}


class Block(nn.Module):
    def __init__(self, dim, heads, ffn=None):
        super().__init__()
        ffn = ffn or 4 * dim
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = nn.Linear(dim, 3 * dim)
        self.attn_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp_fc = nn.Linear(dim, ffn)
        self.mlp_proj = nn.Linear(ffn, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.mlp_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, vocab, seq, ffn=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, ffn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def shard(model, checkpoint=True, cpu_offload=False, blocks=None, lr=6e-4):
    """The baseline's wrapping, in place: per-block activation checkpointing, fully_shard on every
    block (`blocks`, by default model.blocks) and on the root with bf16 parameters and fp32
    gradient reduction (and CPUOffloadPolicy when asked). Returns the fused AdamW (on the CPU when
    offloaded; PyTorch's plain AdamW where its fused one does not take CPU tensors)."""
    blocks = model.blocks if blocks is None else blocks
    if checkpoint:
        for i, blk in enumerate(blocks):
            blocks[i] = checkpoint_wrapper(blk)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    extra = {"offload_policy": CPUOffloadPolicy()} if cpu_offload else {}
    for blk in blocks:
        fully_shard(blk, mp_policy=mp, **extra)
    fully_shard(model, mp_policy=mp, **extra)
    try:
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, fused=True)
    except RuntimeError:
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)


def print_result(result):
    """The run's JSON line, from rank 0; then the process group ends."""
    if dist.get_rank() == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def timed_steps(loss_of, model, opt, args, n_params, layers, dim):
    """Runs args.warmup + args.steps optimizer steps (loss_of() forward, backward, clipping at 1.0,
    AdamW) and returns the run and its median measured step's figures: its time, tokens/s per GPU,
    MFU (989 TFLOP/s, 6N + 6LCT FLOPs/token), the peak memory and the last loss."""
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    tok_per_gpu = args.batch * args.seq / step_s
    return {
        "system": "pytorch-fsdp2",
        "gpus": dist.get_world_size(),
        "batch_per_gpu": args.batch,
        "seq": args.seq,
        "params": n_params,
        "step_ms": step_s * 1e3,
        "tokens_per_s_per_gpu": tok_per_gpu,
        "mfu": tok_per_gpu * (6 * n_params + 6 * layers * dim * args.seq) / 989e12,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": float(loss.detach()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-1.5b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-checkpoint", action="store_true")
    ap.add_argument("--cpu-offload", action="store_true", help="CPUOffloadPolicy")
    for dim in ("layers", "dim", "heads", "ffn", "vocab"):
        ap.add_argument(f"--{dim}", type=int, help="overrides the preset")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    layers, heads, dim = PRESETS[args.model]
    layers, heads, dim = args.layers or layers, args.heads or heads, args.dim or dim
    ffn, vocab = args.ffn or 4 * dim, args.vocab or 50304
    with torch.device("cuda"):
        model = GPT(layers, heads, dim, vocab, args.seq, ffn)
    n_params = sum(p.numel() for p in model.parameters())  # tied embedding counted once
    opt = shard(model, checkpoint=not args.no_checkpoint, cpu_offload=args.cpu_offload)

    gen = torch.Generator(device="cuda").manual_seed(rank)
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device="cuda", generator=gen)
    x, y = tokens[:, :-1], tokens[:, 1:].contiguous()
    result = {
        "model": args.model,
        "shape": {"layers": layers, "dim": dim, "heads": heads, "ffn": ffn, "vocab": vocab},
        "cpu_offload": args.cpu_offload,
        **timed_steps(lambda: model(x, y), model, opt, args, n_params, layers, dim),
    }
    print_result(result)


if __name__ == "__main__":
    main()
