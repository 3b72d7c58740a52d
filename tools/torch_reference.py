#!/usr/bin/python3
"""PyTorch reference for Trident's models (GPT-2 and Llama families): the numerical oracle of the
whole model.

Run with Debian's torch (/usr/bin/python3; the python3 first on PATH has no torch):

    /usr/bin/python3 tools/torch_reference.py --checkpoint CKPT.h5 --dump DUMP.h5

CKPT.h5 is a Trident checkpoint, DUMP.h5 what `trident_gpt_dump` wrote for it (tokens, targets, loss,
logits, grad/<tensor>). This script reads the checkpoint through its documented file layout only
(tools/trident_ckpt.py, h5py), never through Trident code, so a bug in Trident's checkpoint
reader cannot hide a bug in its model. It rebuilds nanoGPT's GPT (model.py) or, for
model_arch = llama, a Llama decoder written from Hugging Face's modeling_llama.py (RMSNorm,
rotate_half rotary embedding, repeat_kv grouped-query attention, SwiGLU) in PyTorch, runs the
dumped batch and compares loss, logits and every parameter gradient:

    max |trident - torch| <= tol * max |torch|      per tensor, tol = 1e-5 for fp32

The bound is relative to the tensor's largest entry rather than elementwise: fp32 sums of a few
hundred terms carry ~1e-7 relative rounding error of their largest term, and near-zero entries
would make an elementwise relative test meaningless. A real bug (a missing term, a wrong index,
tanh-GELU instead of erf-GELU) shows up as a ratio of 1e-3 or more. Exit status: 0 when every
tensor passes, 1 when any fails or is missing, 2 for unreadable input.
"""

import argparse
import configparser
import math
import sys

import os

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_ckpt  # noqa: E402  (the documented checkpoint reader, beside this script)


# --------------------------------------------------------------------------------------------
# Checkpoint reading, from the file layout alone
# --------------------------------------------------------------------------------------------

def load_checkpoint(path):
    """Returns (model hyperparameters, {tensor name: numpy array (float64) of its global shape}),
    read through the documented reader tools/trident_ckpt.py (h5py only; any layout)."""
    ck = trident_ckpt.load(path, "param", dtype=np.float64)
    a = ck.attrs
    hp = {k: int(a["model_" + k]) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")}
    hp["bias"] = bool(hp["bias"])
    hp["dropout"] = float(a["model_dropout"]) if "model_dropout" in a else 0.0
    arch = a["model_arch"] if "model_arch" in a else "gpt2"
    hp["arch"] = arch.decode() if isinstance(arch, bytes) else str(arch)
    if hp["arch"] == "llama":
        hp["n_kv_head"] = int(a["model_n_kv_head"])
        hp["ffn_hidden"] = int(a["model_ffn_hidden"])
        hp["tie"] = bool(int(a["model_tie_embeddings"]))
        hp["norm_eps"] = float(a["model_norm_eps"])
        hp["rope_theta"] = float(a["model_rope_theta"])
    check_deck(ck.config, hp, path)
    return hp, ck.tensors


def load_hf(path):
    """Returns (hyperparameters, {reference name: float64 array}) from a Hugging Face model
    directory, read by the safetensors format's documentation (8-byte header length, JSON header,
    raw little-endian data) and transformers' config keys, never through Trident. GPT-2's
    GPT2Model names gain nanoGPT's "transformer." prefix and its Conv1D weights (in, out) are
    transposed to nn.Linear's (out, in); Llama's names are the reference's own."""
    import json
    import struct
    with open(os.path.join(path, "config.json")) as f:
        c = json.load(f)
    files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    raw = {}
    for name in files:
        with open(os.path.join(path, name), "rb") as f:
            b = f.read()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8:8 + n])
        header.pop("__metadata__", None)
        for k, v in header.items():
            lo, hi = v["data_offsets"]
            data = b[8 + n + lo:8 + n + hi]
            if v["dtype"] == "F32":
                a = np.frombuffer(data, dtype="<f4")
            elif v["dtype"] == "BF16":
                a = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                raise ValueError(f"{name}: dtype {v['dtype']} is not handled here")
            raw[k] = a.astype(np.float64).reshape(v["shape"])
    if c["model_type"] == "gpt2":
        hp = {"arch": "gpt2", "n_layer": c["n_layer"], "n_head": c["n_head"], "n_embd": c["n_embd"],
              "block_size": c["n_positions"], "vocab_size": c["vocab_size"], "bias": c.get("bias", True), "dropout": 0.0}
        conv1d = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
        weights = {"transformer." + k: (v.T.copy() if k.endswith(conv1d) else v) for k, v in raw.items()}
    elif c["model_type"] == "llama":
        hp = {"arch": "llama", "n_layer": c["num_hidden_layers"], "n_head": c["num_attention_heads"],
              "n_embd": c["hidden_size"], "block_size": c["max_position_embeddings"], "vocab_size": c["vocab_size"],
              "bias": False, "dropout": 0.0, "n_kv_head": c["num_key_value_heads"], "ffn_hidden": c["intermediate_size"],
              "tie": c["tie_word_embeddings"], "norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"]}
        weights = raw
    else:
        raise ValueError(f"{path}: model_type {c['model_type']} is not handled here")
    return hp, weights


def check_deck(text, hp, path):
    """The /config deck and the root attributes must describe the same model."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    cp.read_string(text)
    if not cp.has_section("model"):
        raise ValueError(f"{path}: /config has no [model] section")
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        if cp.has_option("model", key) and int(cp.get("model", key)) not in (0, hp[key]):
            raise ValueError(f"{path}: /config says {key} = {cp.get('model', key)}, the attributes {hp[key]}")
    if cp.has_option("model", "bias") and cp.getboolean("model", "bias") != hp["bias"]:
        raise ValueError(f"{path}: /config and the model_bias attribute disagree")


# --------------------------------------------------------------------------------------------
# nanoGPT's GPT (karpathy/nanoGPT model.py), without dropout and without flash attention
# --------------------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's nn.LayerNorm always has one)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C = hp["n_embd"]
        self.n_head = hp["n_head"]
        self.c_attn = nn.Linear(C, 3 * C, bias=hp["bias"])
        self.c_proj = nn.Linear(C, C, bias=hp["bias"])
        T = hp["block_size"]
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # the [q|k|v] row blocks of c_attn.weight
        NH, HS = self.n_head, C // self.n_head
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C = hp["n_embd"]
        self.c_fc = nn.Linear(C, 4 * C, bias=hp["bias"])
        self.gelu = nn.GELU()  # exact (erf) GELU, as in nanoGPT; not the tanh approximation
        self.c_proj = nn.Linear(4 * C, C, bias=hp["bias"])

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.ln_1 = LayerNorm(hp["n_embd"], hp["bias"])
        self.attn = CausalSelfAttention(hp)
        self.ln_2 = LayerNorm(hp["n_embd"], hp["bias"])
        self.mlp = MLP(hp)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C = hp["n_embd"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(hp["vocab_size"], C),
            wpe=nn.Embedding(hp["block_size"], C),
            h=nn.ModuleList([Block(hp) for _ in range(hp["n_layer"])]),
            ln_f=LayerNorm(C, hp["bias"]),
        ))
        self.lm_head = nn.Linear(C, hp["vocab_size"], bias=False)
        # Weight tying (Press & Wolf 2017): one tensor, so its gradient sums both uses, which is
        # what Trident's single wte gradient must equal.
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# --------------------------------------------------------------------------------------------
# A Llama decoder (Hugging Face transformers' models/llama/modeling_llama.py, eager attention)
# --------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, ndim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C, NH, NKV = hp["n_embd"], hp["n_head"], hp["n_kv_head"]
        self.NH, self.NKV, self.HS = NH, NKV, C // NH
        self.q_proj = nn.Linear(C, NH * self.HS, bias=False)
        self.k_proj = nn.Linear(C, NKV * self.HS, bias=False)
        self.v_proj = nn.Linear(C, NKV * self.HS, bias=False)
        self.o_proj = nn.Linear(NH * self.HS, C, bias=False)
        self.theta = hp["rope_theta"]

    def forward(self, x):
        B, T, C = x.size()
        q = self.q_proj(x).view(B, T, self.NH, self.HS).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.NKV, self.HS).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.NKV, self.HS).transpose(1, 2)
        # rotary embedding (HF's LlamaRotaryEmbedding with default rope_type, then apply_rotary_pos_emb)
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.HS, 2, dtype=torch.float64) / self.HS))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: each key/value head serves NH / NKV consecutive query heads
        k = k.repeat_interleave(self.NH // self.NKV, dim=1)
        v = v.repeat_interleave(self.NH // self.NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.HS)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.NH * self.HS)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C, Fh = hp["n_embd"], hp["ffn_hidden"]
        self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.input_layernorm = RMSNorm(hp["n_embd"], hp["norm_eps"])
        self.self_attn = LlamaAttention(hp)
        self.post_attention_layernorm = RMSNorm(hp["n_embd"], hp["norm_eps"])
        self.mlp = LlamaMLP(hp)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, hp):
        super().__init__()
        C = hp["n_embd"]
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(hp["vocab_size"], C)
        self.model.layers = nn.ModuleList([LlamaLayer(hp) for _ in range(hp["n_layer"])])
        self.model.norm = RMSNorm(C, hp["norm_eps"])
        self.lm_head = nn.Linear(C, hp["vocab_size"], bias=False)
        if hp["tie"]:
            self.lm_head.weight = self.model.embed_tokens.weight  # named once, as embed_tokens

    def forward(self, idx):
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------

def compare(name, trident, ref, tol, rows):
    """Appends a table row; returns True when max|trident - ref| <= tol * max|ref|."""
    trident = np.asarray(trident, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if trident.shape != ref.shape:
        rows.append((name, "shape", f"{trident.shape} vs {ref.shape}", "", "", "FAIL"))
        return False
    diff = float(np.max(np.abs(trident - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    ok = bool(np.all(np.isfinite(trident))) and diff <= tol * scale
    if scale == 0.0:
        ratio = 0.0 if diff == 0.0 else math.inf
        ok = ok and diff == 0.0
    else:
        ratio = diff / scale
    rows.append((name, "x".join(str(s) for s in ref.shape) or "scalar", f"{diff:.3e}", f"{scale:.3e}",
                 f"{ratio:.3e}", "ok" if ok else "FAIL"))
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Compare Trident's loss, logits and gradients (a trident_gpt_dump file) with a PyTorch "
                    "GPT built from the same checkpoint. Passes when, for every tensor, "
                    "max|trident - torch| <= tol * max|torch|.",
        epilog="Exit status: 0 all tensors pass, 1 a tensor differs or is missing, 2 unreadable input.")
    p.add_argument("--checkpoint", help="Trident checkpoint file (.h5) holding the weights")
    p.add_argument("--hf", help="instead of --checkpoint: a Hugging Face model directory (`trident ckpt export "
                                "--format hf` of the dumped checkpoint), read by the format's documentation")
    p.add_argument("--dump", required=True, help="trident_gpt_dump output for that checkpoint (.h5)")
    p.add_argument("--tol", type=float, default=1e-5,
                   help="relative tolerance per tensor (default 1e-5, for Trident in fp32)")
    p.add_argument("--double", action="store_true",
                   help="run the reference in float64 (then the differences are Trident's own fp32 error)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="print only failing rows and the verdict")
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.double else torch.float32

    try:
        if (args.checkpoint is None) == (args.hf is None):
            raise ValueError("give exactly one of --checkpoint and --hf")
        hp, weights = load_hf(args.hf) if args.hf else load_checkpoint(args.checkpoint)
        with h5py.File(args.dump, "r") as f:
            dump = {"tokens": f["tokens"][()], "targets": f["targets"][()], "loss": f["loss"][()],
                    "logits": f["logits"][()]}
            grads = {}
            if "grad" in f:
                f["grad"].visititems(lambda n, o: grads.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    except (OSError, KeyError, ValueError) as e:
        print(f"torch_reference: error: {e}", file=sys.stderr)
        return 2

    torch.manual_seed(0)  # the weights are all overwritten; this only makes construction repeatable
    model = (LlamaForCausalLM(hp) if hp["arch"] == "llama" else GPT(hp)).to(dtype)
    params = dict(model.named_parameters())  # the tied lm_head.weight appears once, as wte
    failed = []
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        for n in missing:
            failed.append(f"checkpoint lacks tensor {n}")
        for n in extra:
            failed.append(f"checkpoint tensor {n} has no counterpart in the reference GPT")
    with torch.no_grad():
        for n, prm in params.items():
            if n in weights:
                if tuple(prm.shape) != weights[n].shape:
                    failed.append(f"{n}: checkpoint shape {weights[n].shape}, reference {tuple(prm.shape)}")
                    continue
                prm.copy_(torch.from_numpy(weights[n]).to(dtype))

    tokens = torch.from_numpy(dump["tokens"].astype(np.int64))
    targets = torch.from_numpy(dump["targets"].astype(np.int64))
    B, T = tokens.shape
    if T > hp["block_size"] or tokens.min() < 0 or tokens.max() >= hp["vocab_size"]:
        print("torch_reference: error: the dump's tokens do not fit the checkpoint's model", file=sys.stderr)
        return 2
    model.zero_grad(set_to_none=False)
    logits = model(tokens)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # mean over B*T tokens
    loss.backward()

    rows = []
    tol = args.tol
    if not compare("loss", dump["loss"], loss.item(), tol, rows):
        failed.append("loss")
    if not compare("logits", dump["logits"], logits.detach().view(B * T, -1).double().numpy(), tol, rows):
        failed.append("logits")
    for n, prm in params.items():
        key = n  # the dump names gradients after the checkpoint's tensors: grad/<name>
        if key not in grads:
            failed.append(f"dump lacks grad/{n}")
            rows.append(("grad/" + n, "", "missing", "", "", "FAIL"))
            continue
        if not compare("grad/" + n, grads[key], prm.grad.double().numpy(), tol, rows):
            failed.append("grad/" + n)
    for n in sorted(set(grads) - set(params)):
        failed.append(f"dump has grad/{n}, which the reference GPT lacks")

    header = ("tensor", "shape", "max|diff|", "max|torch|", "ratio", "")
    shown = [r for r in rows if not args.quiet or r[5] != "ok"]
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(6)]
    print(f"torch reference ({'float64' if args.double else 'float32'}, torch {torch.__version__}): "
          f"{hp['arch']}, {hp['n_layer']} layers, {hp['n_head']} heads, C={hp['n_embd']}, V={hp['vocab_size']}, "
          f"bias={hp['bias']}, batch B={B} T={T}; tol {tol:g} x max|torch| per tensor")
    for r in [header] + shown:
        print("  ".join(str(c).ljust(w) if i in (0, 1, 5) else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    worst = max((float(r[4]) for r in rows if r[4] not in ("",)), default=0.0)
    print(f"loss: trident {float(dump['loss']):.8f}, torch {loss.item():.8f}; worst ratio {worst:.3e}")
    if failed:
        print("FAIL: " + "; ".join(failed))
        return 1
    print(f"PASS: loss, logits and {len(params)} gradients agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
