#!/usr/bin/env python3
"""torch_gpu_peer.py: the PyTorch speed peer on one GPU, for the device check (tools/device_check.sh).

What it measures
    The tokens/s a PyTorch user gets for a GPT-2-shaped model on the same device, in the same run
    as Trident: nanoGPT's model (pre-LayerNorm blocks, fused causal attention through
    F.scaled_dot_product_attention where torch has it, exact GELU, tied lm_head, optional biases),
    AdamW (fused where available), bf16 autocast with fp32 master weights (what nanoGPT and llm.c
    do on GPUs), random token batches (throughput only, no data loading). It runs the model eager
    and, where torch.compile exists, compiled, and also measures the bf16 GEMM peak of the device
    (a large square matmul), the number MFU is quoted against.

    MFU here uses the same model FLOPs per token as Trident's log (PaLM appendix B, nanoGPT's
    estimate_mfu): 6 N + 12 L C T, N = parameters without the position embedding.

How to run
    python3 tools/torch_gpu_peer.py --device cuda --n-layer 12 --n-head 12 --n-embd 768 \
        --block-size 1024 --vocab-size 50304 --batch 8 --steps 30 --warmup 10 --json peer.json
    On a CPU (a smoke test of the script itself): --device cpu with a tiny shape; torch 1.13 has no
    torch.compile, which is then reported as unavailable.

Output
    One line per measurement on stdout and, with --json, a summary: gemm_peak_tflops (bf16),
    eager/compiled tokens_per_sec (median over the timed steps), ms_per_step, mfu, peak device
    memory (MiB), torch version and device name.
"""

import argparse
import json
import math
import statistics
import sys
import time


def build_parser():
    p = argparse.ArgumentParser(description="PyTorch GPT speed peer on one device (see the module docstring)")
    p.add_argument("--device", default="cuda", help="cuda | cpu (default cuda)")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--block-size", type=int, default=1024, help="context length T")
    p.add_argument("--vocab-size", type=int, default=50304)
    p.add_argument("--bias", type=int, default=1, help="1: biases in Linear and LayerNorm (GPT-2), 0: none")
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--steps", type=int, default=30, help="timed optimizer steps per mode")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    p.add_argument("--dtype", default="bf16", help="bf16 (autocast, fp32 master weights) | fp32")
    p.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    p.add_argument("--gemm-size", type=int, default=8192, help="side of the square bf16 GEMM of the peak probe (0: skip)")
    p.add_argument("--json", default="", help="write the summary here")
    return p


def define_gpt(torch):
    nn, F = torch.nn, torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def layer_norm(n, bias):
        try:
            return nn.LayerNorm(n, bias=bool(bias))  # torch >= 2.1
        except TypeError:
            return nn.LayerNorm(n)  # older torch: always with a bias

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = layer_norm(c.n_embd, c.bias)
            self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=bool(c.bias))
            self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=bool(c.bias))
            self.ln_2 = layer_norm(c.n_embd, c.bias)
            self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=bool(c.bias))
            self.mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=bool(c.bias))
            self.n_head = c.n_head
            if sdpa is None:
                self.register_buffer("mask", torch.tril(torch.ones(c.block_size, c.block_size)).view(
                    1, 1, c.block_size, c.block_size), persistent=False)

        def attn(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            hs = C // self.n_head
            q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
                att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
                y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.wte = nn.Embedding(c.vocab_size, c.n_embd)
            self.wpe = nn.Embedding(c.block_size, c.n_embd)
            self.h = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
            self.ln_f = layer_norm(c.n_embd, c.bias)
            self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
            self.wte.weight = self.lm_head.weight  # tied, as GPT-2 and Trident
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            t = idx.size(1)
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))

    return GPT


def flops_per_token(a, n_params_no_wpe):
    return 6.0 * n_params_no_wpe + 12.0 * a.n_layer * a.n_embd * a.block_size


def sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gemm_peak(torch, a):
    """bf16 (CUDA) or fp32 (CPU) square matmul throughput in TFLOP/s: mean of 10 after 3 warm-ups."""
    if a.gemm_size <= 0:
        return 0.0
    n = a.gemm_size if a.device.startswith("cuda") else min(a.gemm_size, 512)
    dt = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    x = torch.randn(n, n, device=a.device, dtype=dt)
    y = torch.randn(n, n, device=a.device, dtype=dt)
    for _ in range(3):
        x @ y
    sync(torch, a.device)
    t0 = time.perf_counter()
    for _ in range(10):
        x @ y
    sync(torch, a.device)
    return 2.0 * n ** 3 * 10 / (time.perf_counter() - t0) / 1e12


def run_mode(torch, a, mode, GPT):
    torch.manual_seed(1337)
    model = GPT(a).to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    n_no_wpe = n_params - model.wpe.weight.numel()
    fwd = model
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return {"mode": mode, "available": False, "reason": "torch %s has no torch.compile" % torch.__version__}
        fwd = torch.compile(model)
    kw = {"lr": 6e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    try:
        opt = torch.optim.AdamW(model.parameters(), fused=a.device.startswith("cuda"), **kw)
    except TypeError:
        opt = torch.optim.AdamW(model.parameters(), **kw)
    use_bf16 = a.dtype == "bf16"
    dev_type = "cuda" if a.device.startswith("cuda") else "cpu"
    if a.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device="cpu").manual_seed(0)
    times = []
    for it in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab_size, (a.batch, a.block_size + 1), generator=gen)
        x, y = idx[:, :-1].to(a.device, non_blocking=True), idx[:, 1:].to(a.device, non_blocking=True)
        sync(torch, a.device)
        t0 = time.perf_counter()
        if use_bf16:
            with torch.autocast(device_type=dev_type, dtype=torch.bfloat16):
                loss = fwd(x, y)
        else:
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(torch, a.device)
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    tps = a.batch * a.block_size / (ms / 1e3)
    out = {"mode": mode, "available": True, "params": n_params, "ms_per_step": ms, "tokens_per_sec": tps,
           "flops_per_token": flops_per_token(a, n_no_wpe), "final_loss": float(loss.item())}
    if a.device.startswith("cuda"):
        out["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
    return out


def main():
    a = build_parser().parse_args()
    import torch
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_gpu_peer: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    GPT = define_gpt(torch)
    name = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    summary = {"torch": torch.__version__, "device": name, "shape": vars(a).copy()}
    peak = gemm_peak(torch, a)
    summary["gemm_peak_tflops"] = peak
    print("torch_gpu_peer: %s, torch %s, %s GEMM peak %.2f TFLOP/s" %
          (name, torch.__version__, "bf16" if a.device.startswith("cuda") else "fp32", peak))
    for mode in [m for m in a.modes.split(",") if m]:
        r = run_mode(torch, a, mode, GPT)
        if r.get("available") and peak > 0:
            r["mfu"] = r["flops_per_token"] * r["tokens_per_sec"] / (peak * 1e12)
        summary[mode] = r
        if r.get("available"):
            print("torch_gpu_peer: %-7s %.1f ms/step | %.0f tok/s | MFU %s | peak mem %s" % (
                mode, r["ms_per_step"], r["tokens_per_sec"],
                "%.1f%%" % (100 * r["mfu"]) if "mfu" in r else "-",
                "%.0f MiB" % r["peak_mem_mib"] if "peak_mem_mib" in r else "-"))
        else:
            print("torch_gpu_peer: %-7s unavailable: %s" % (mode, r["reason"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
