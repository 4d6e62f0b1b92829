#!/usr/bin/env python3
"""bmt-train against transformers on Hugging Face checkpoints that transformers itself wrote.

For a GPT-2 (GPT2LMHeadModel, vocabulary 50257) and two Llamas with grouped-query attention
(LlamaForCausalLM, vocabulary 32000: one with its own head, one with a tied head and Llama 3's
rope_scaling), randomly initialized and saved with save_pretrained in bf16 and in f32 (the f32
ones sharded, so the index path is taken too):

  1. loaded:  `bmt-train --init-from DIR --eval-only` on a fixed token file against transformers'
              loss on the same sequences, and the first sequence's logits (--eval-logits);
  2. trained: `bmt-train --init-from DIR` trains a few steps, saves its checkpoint and exports with
              --export-hf (f32 sharded); transformers loads the export, and its loss and logits are
              compared with bmt-train's evaluation of its own checkpoint (--resume, --eval-only).

Loss tolerances: 2e-3 in bf16, 1e-5 in f32 (absolute). Logits: the largest difference over the
first sequence is printed, held to 1e-4 (f32) or 2^-4 (bf16) of the largest logit's size. Prints
one table; exits 1 if a row fails.

    python3 bench/hf_check.py --bmt-train build-cuda/apps/bmt-train/bmt-train
    python3 bench/hf_check.py --bmt-train ... --launcher "mpirun -np 2 --allow-run-as-root"

Needs python3 with torch, transformers, safetensors and numpy; no network. About two minutes on
one H200 (most of it bmt-train's start-up, 18 runs).
"""
import argparse
import copy
import inspect
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

SEQ = 128          # tokens per sequence
SEQUENCES = 16     # evaluated sequences, one global batch
TRAIN_STEPS = 3
TOLERANCE = {"bf16": 2e-3, "f32": 1e-5}
LOGIT_TOLERANCE = {"bf16": 2.0 ** -4, "f32": 1e-4}  # relative to max(1, largest |logit|)
TORCH_DTYPE = {"bf16": torch.bfloat16, "f32": torch.float32}
# transformers 5 takes rope_theta and the scaling as rope_parameters; earlier versions as
# rope_theta and rope_scaling.
ROPE_PARAMETERS = "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters


def llama_config(rope_theta, rope_scaling, **sizes):
    if ROPE_PARAMETERS:
        rope = dict(rope_scaling or {"rope_type": "default"}, rope_theta=rope_theta)
        return LlamaConfig(rope_parameters=rope, **sizes)
    return LlamaConfig(rope_theta=rope_theta, rope_scaling=rope_scaling, **sizes)


def models():
    """name -> an untrained transformers model (f32), small enough for seconds, shaped as released."""
    gpt2 = GPT2Config(vocab_size=50257, n_positions=256, n_embd=256, n_layer=3, n_head=4,
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      layer_norm_epsilon=1e-5)
    llama = llama_config(10000.0, None, vocab_size=32000, hidden_size=256, intermediate_size=688,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         hidden_act="silu", attention_bias=False)
    llama3 = llama_config(500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
                          vocab_size=32000, hidden_size=256, intermediate_size=768, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=1024,
                          rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu", attention_bias=False)
    return {"gpt2": GPT2LMHeadModel(gpt2), "llama-gqa": LlamaForCausalLM(llama),
            "llama3-tied": LlamaForCausalLM(llama3)}


def randomize(model, seed):
    """Weights far from the initializer's near-uniform predictions, so that the loss and logits
    depend on every tensor: matrices N(0, 0.08^2), norm weights 1 + N(0, 0.2^2), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() >= 2:
                p.copy_(0.08 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(1.0 + 0.2 * noise)


def write_tokens(path, tokens):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def hf_eval(directory, dtype, tokens, device, attention):
    """transformers' mean next-token loss over the token file's windows (window k: tokens
    [k T, k T + T + 1), as bmt-train cuts them) and the first window's logits, in f32."""
    m = None
    for keyword in ("dtype", "torch_dtype"):  # the name from 4.56 on, and before
        try:
            m = AutoModelForCausalLM.from_pretrained(directory, attn_implementation=attention,
                                                     **{keyword: TORCH_DTYPE[dtype]})
            break
        except TypeError:
            if keyword == "torch_dtype":
                raise
    assert next(m.parameters()).dtype == TORCH_DTYPE[dtype], "from_pretrained ignored the dtype"
    m.to(device).eval()
    windows = torch.tensor(np.stack([tokens[k * SEQ:k * SEQ + SEQ + 1] for k in range(SEQUENCES)]).astype(np.int64))
    with torch.no_grad():
        logits = m(windows[:, :-1].to(device)).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1).to(device))
    return loss.item(), logits[0].cpu().numpy()


class BmtTrain:
    def __init__(self, exe, launcher, log):
        self.exe, self.launcher, self.log = exe, shlex.split(launcher), log

    def run(self, *args):
        cmd = self.launcher + [self.exe, "--no-progress", *args]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + out.stdout + "\n")
        if out.returncode != 0:
            raise RuntimeError(f"bmt-train failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-2000:]}")
        return out.stdout

    def eval(self, dtype, val, logits_path, *model_args):
        out = self.run(*model_args, "--dtype", dtype, "--eval-only", "--val-data", val, "--batch", str(SEQUENCES),
                       "--seq", str(SEQ), "--eval-logits", logits_path)
        found = re.search(r"^eval: loss ([0-9.]+)", out, re.M)
        if not found:
            raise RuntimeError("bmt-train printed no eval loss:\n" + out[-2000:])
        return float(found.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bmt-train", required=True, help="path to a built bmt-train")
    ap.add_argument("--launcher", default="", help='prefix for bmt-train, e.g. "mpirun -np 2 --allow-run-as-root"')
    ap.add_argument("--work", default="", help="directory for checkpoints and logs (default: a temporary one)")
    ap.add_argument("--attention", default="sdpa", help="transformers' attn_implementation (sdpa or eager)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 GEMMs in f32, as bmt-train's
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.work or tempfile.mkdtemp(prefix="hf_check.")
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(work, "bmt-train.log"), "w")
    bmt = BmtTrain(os.path.abspath(args.bmt_train), args.launcher, log)
    start = time.time()

    rows = []
    failed = False
    rng = np.random.default_rng(20240520)
    for seed, (name, model) in enumerate(models().items()):
        vocab = model.config.vocab_size
        val = os.path.join(work, f"{name}.val.bin")
        train = os.path.join(work, f"{name}.train.bin")
        val_tokens = rng.integers(0, vocab, SEQUENCES * SEQ + 1)
        write_tokens(val, val_tokens)
        write_tokens(train, rng.integers(0, vocab, 4 * SEQUENCES * SEQ + 1))
        randomize(model, seed)
        for dtype in ("bf16", "f32"):
            src = os.path.join(work, f"{name}-{dtype}")
            # f32: sharded at 10 MB (an index and several files); bf16: one file.
            copy.deepcopy(model).to(TORCH_DTYPE[dtype]).save_pretrained(
                src, safe_serialization=True, max_shard_size="10MB" if dtype == "f32" else "5GB")
            tol, ltol = TOLERANCE[dtype], LOGIT_TOLERANCE[dtype]

            def compare(stage, bmt_loss, bmt_logits_path, hf_dir):
                nonlocal failed
                hf_loss, hf_logits = hf_eval(hf_dir, dtype, val_tokens, device, args.attention)
                bmt_logits = np.fromfile(bmt_logits_path, dtype=np.float32).reshape(hf_logits.shape)
                logit_diff = float(np.abs(bmt_logits - hf_logits).max())
                scale = max(1.0, float(np.abs(hf_logits).max()))
                ok = abs(bmt_loss - hf_loss) <= tol and logit_diff <= ltol * scale
                failed |= not ok
                rows.append((name, dtype, stage, bmt_loss, hf_loss, abs(bmt_loss - hf_loss), tol, logit_diff,
                             ltol * scale, "ok" if ok else "FAIL"))

            # 1. The checkpoint transformers wrote, loaded.
            logits = os.path.join(work, f"{name}-{dtype}.loaded.logits")
            loss = bmt.eval(dtype, val, logits, "--init-from", src)
            compare("loaded", loss, logits, src)
            # 2. Trained a few steps, exported (f32 sharded at 10 MB), loaded by transformers.
            ckpt, export = os.path.join(work, f"{name}-{dtype}.ckpt"), os.path.join(work, f"{name}-{dtype}.export")
            bmt.run("--init-from", src, "--dtype", dtype, "--data", train, "--batch", str(SEQUENCES), "--seq", str(SEQ),
                    "--steps", str(TRAIN_STEPS), "--lr", "1e-3", "--warmup", "0", "--log-every", "1", "--save", ckpt,
                    "--export-hf", export, "--export-shard-gb", "0.01" if dtype == "f32" else "5")
            logits = os.path.join(work, f"{name}-{dtype}.trained.logits")
            loss = bmt.eval(dtype, val, logits, "--init-from", src, "--resume", ckpt)
            compare(f"trained {TRAIN_STEPS} steps, exported", loss, logits, export)

    print(f"bmt-train vs transformers {__import__('transformers').__version__} (torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, attn_implementation={args.attention}; "
          f"{SEQUENCES} sequences of {SEQ} tokens; {time.time() - start:.0f} s)")
    print("| model | dtype | weights | bmt-train loss | transformers loss | abs diff | tolerance "
          "| logits max abs diff | logits tolerance | |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.7f} | {r[4]:.7f} | {r[5]:.2e} | {r[6]:.0e} | {r[7]:.2e} "
              f"| {r[8]:.2e} | {r[9]} |")
    print(f"logs and checkpoints: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
