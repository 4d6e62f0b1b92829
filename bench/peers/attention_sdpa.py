#!/usr/bin/env python3
"""PyTorch's fused attention at bench_attention's shapes, for a kernel-level side by side.

Times F.scaled_dot_product_attention (causal, [B, H, T, D]) forward, and backward (dQ, dK, dV),
with PyTorch's own choice (what the FSDP2 baseline gets; its name is printed) and with each
backend PyTorch offers on the machine (flash, cuDNN, memory-efficient), and reports the
FLOP rate bench_attention reports: forward 4 B H T^2 D / 2, backward 2.5 times that.
Run: python3 attention_sdpa.py [--dtype bf16] [--iters 50]
Prints one line per shape, pass and backend.
"""
import argparse
import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(16, 12, 1024, 64), (16, 25, 1024, 64), (4, 16, 2048, 128)]  # GPT-2 124M, XL, a 128-wide head
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def milliseconds(fn, iters):
    fn()  # first call: kernel selection and workspace
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    for B, H, T, D in SHAPES:
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(B, H, T, D, device="cuda", dtype=dtype)
        forward_flops = 4.0 * B * H * T * T * D / 2.0
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=True)).name
        print(f"B={B} H={H} T={T} D={D}: PyTorch {torch.__version__} chooses {choice}")
        for name, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    fwd = milliseconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.iters)
                    bwd = milliseconds(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                       args.iters)
            except RuntimeError as error:  # this backend does not take these inputs here
                print(f"B={B} H={H} T={T} D={D} {name}: not available ({str(error).splitlines()[0][:80]})")
                continue
            print(f"B={B} H={H} T={T} D={D} {args.dtype} {name:9s} forward {fwd:.3f} ms "
                  f"{forward_flops / fwd * 1e-9:.1f} TFLOP/s  backward {bwd:.3f} ms "
                  f"{2.5 * forward_flops / bwd * 1e-9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
