#!/usr/bin/env python3
"""PyTorch FSDP2 baseline on transformers' own Llama, for the side-by-side benchmark of the released
Llama shapes (bench/side_by_side.sh with PEER=hf-llama).

LlamaForCausalLM with attn_implementation="sdpa", shaped as bmt-train's preset of the same name,
randomly initialized; fully_shard on every decoder layer and on the root with
MixedPrecisionPolicy(bf16 params, fp32 reduce), transformers' per-layer gradient checkpointing,
fused AdamW, random tokens. This is how a user trains a released Llama with FSDP2.
Run: python3 -m torch.distributed.run --nproc_per_node=N fsdp2_hf_llama.py --model llama3.2-1b --seq 2048
Prints one JSON line on rank 0, as fsdp2_gpt.py does: tokens/s per GPU, MFU (989 TFLOP/s,
6N + 6LCT FLOPs/token), peak memory.
"""
import argparse
import inspect
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from fsdp2_gpt import print_result, shard, timed_steps

# bmt-train's presets (bmt::models::preset), as the hub's config.json files give them:
# vocab, hidden, layers, heads, kv heads, intermediate, context, rope theta, rope scaling, tied.
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
PRESETS = {
    "tinyllama-1.1b": (32000, 2048, 22, 32, 4, 5632, 2048, 10000.0, None, False),
    "llama3.2-1b": (128256, 2048, 16, 32, 8, 8192, 131072, 500000.0, LLAMA3_SCALING, True),
    "llama2-7b": (32000, 4096, 32, 32, 32, 11008, 4096, 10000.0, None, False),
    "llama3-8b": (128256, 4096, 32, 32, 8, 14336, 8192, 500000.0, None, False),
}


def config(name, seq):
    vocab, hidden, layers, heads, kv_heads, ffn, context, theta, scaling, tied = PRESETS[name]
    sizes = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                 num_key_value_heads=kv_heads, intermediate_size=ffn, max_position_embeddings=max(seq, context),
                 rms_norm_eps=1e-5, tie_word_embeddings=tied, hidden_act="silu", attention_bias=False)
    # transformers 5 takes rope_theta and the scaling as rope_parameters; earlier versions apart.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        return LlamaConfig(rope_parameters=dict(scaling or {"rope_type": "default"}, rope_theta=theta), **sizes)
    return LlamaConfig(rope_theta=theta, rope_scaling=scaling, **sizes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-checkpoint", action="store_true")
    ap.add_argument("--cpu-offload", action="store_true", help="CPUOffloadPolicy")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    cfg = config(args.model, args.seq)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa").float()
    n_params = sum(p.numel() for p in model.parameters())  # a tied embedding counted once
    if not args.no_checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    # Checkpointing as transformers does it (above); FSDP2's wrapping as the GPT baseline's.
    opt = shard(model, checkpoint=False, cpu_offload=args.cpu_offload, blocks=model.model.layers, lr=3e-4)

    gen = torch.Generator(device="cuda").manual_seed(rank)
    tokens = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), device="cuda", generator=gen)
    x, y = tokens[:, :-1], tokens[:, 1:].contiguous()
    model.train()

    def loss_of():
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))

    result = {
        "model": args.model,
        "implementation": "transformers LlamaForCausalLM (sdpa)",
        "cpu_offload": args.cpu_offload,
        **timed_steps(loss_of, model, opt, args, n_params, cfg.num_hidden_layers, cfg.hidden_size),
    }
    print_result(result)


if __name__ == "__main__":
    main()
