#!/usr/bin/python3
"""torch_peer.py: the PyTorch peer a user would otherwise pick, for Trident's shakespeare_char deck.

What it is for
    A self-contained nanoGPT (model.py semantics: pre-LayerNorm blocks, causal self-attention as an
    explicit matmul + mask, exact GELU, tied lm_head, N(0, 0.02) init with c_proj at
    0.02/sqrt(2 n_layer), optional biases) trained with torch.optim.AdamW (weight decay on params
    with dim >= 2 only, as nanoGPT's configure_optimizers) on the same data, tokenizer, split and
    learning-rate schedule as input/shakespeare_char.ini. It gives the throughput and loss a user
    would get from PyTorch on this CPU, to put next to Trident's (tools/compare_torch.sh runs both).

    Data: character tokenizer (sorted distinct characters of the file), first 90% train, last 10%
    val (n_train = int(n * (1 - 0.1)), as `trident prep`). Training batches are nanoGPT's get_batch
    (uniform random offsets). Validation covers the WHOLE val split as Trident does: window i holds
    inputs [i*T, i*T+T) and targets shifted by one, n = (n_val - 1) // T windows, mean token loss;
    at every --eval-interval steps and at the end. lr: nanoGPT's get_lr with lr_decay_iters =
    max_steps, iteration it = step - 1 (step 1 uses it = 0).

Threads
    OpenBLAS (torch's BLAS here) reads OPENBLAS_NUM_THREADS / OMP_NUM_THREADS once, when torch is
    imported; torch.set_num_threads does NOT limit it. Run with both set to --threads, e.g.
        OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 tools/torch_peer.py --threads 1 ...
    If they are unset, this script sets them to --threads before it imports torch (and warns);
    if they are set to something else, it warns and keeps them. The JSON records what was in effect.

How to run (Debian's torch 1.13 works only with /usr/bin/python3)
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/torch_peer.py \
        --data /work/shared/data/tinyshakespeare.txt --threads 1 --max-steps 2000 \
        --csv /tmp/peer.csv --json /tmp/peer.json
    Data parallel over 2 processes (gloo DDP, each with batch/2, 1 thread each):
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 tools/torch_peer.py --ddp 2 --threads 1 ...

Outputs
    --csv: one row per step: step,train_loss,val_loss,lr,tokens_per_sec,ms_per_step (val_loss empty
      except at evaluations; ms_per_step is the step alone, batch sampling included, eval excluded).
    --json: summary: train_loop_seconds (sum of step times, evaluation excluded), eval_seconds,
      tokens_per_sec_mean (arithmetic mean of the per-step tokens_per_sec over steps > 10, the same
      statistic compare_torch.sh takes from Trident's metrics.csv), tokens_per_sec_aggregate (tokens
      / time over steps > 10), tokens_per_sec_median, final_val_loss (whole split), thread settings,
      torch version, cpu_seconds_train_loop and foreign_cpu_seconds_train_loop (CPU time the rest of
      the machine used during the steps: clearly above 0 means the timing was disturbed), load average.

Caveat measured on the project's 2-core machine: with 2 threads (OPENBLAS_NUM_THREADS=2
OMP_NUM_THREADS=2) torch 1.13 can be SLOWER than with 1, because the spinning OpenMP and OpenBLAS
worker threads fight over 2 cores; OMP_WAIT_POLICY=PASSIVE helps. The JSON records OMP_WAIT_POLICY.
"""

import argparse
import ctypes
import json
import math
import os
import socket
import subprocess
import sys
import time


def str2bool(s):
    v = str(s).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError("expected true/false, got %r" % s)


def build_parser():
    p = argparse.ArgumentParser(
        prog="torch_peer.py",
        description="nanoGPT-style PyTorch peer of Trident's shakespeare_char deck (char-level GPT on a "
        "text file; whole-split validation like Trident). Defaults are input/shakespeare_char.ini's.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Set OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to --threads in the environment: "
        "torch.set_num_threads does not limit OpenBLAS. Run with /usr/bin/python3 (Debian's torch).")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="/work/shared/data/tinyshakespeare.txt",
                   help="text file; char tokenizer over its sorted distinct characters")
    g.add_argument("--val-fraction", type=float, default=0.1,
                   help="last fraction of the tokens that forms the validation split")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks")
    g.add_argument("--n-head", type=int, default=4, help="attention heads")
    g.add_argument("--n-embd", type=int, default=128, help="embedding width")
    g.add_argument("--block-size", type=int, default=64, help="sequence length T")
    g.add_argument("--bias", type=str2bool, default=False, help="biases in Linear and LayerNorm (true/false)")
    g = p.add_argument_group("training")
    g.add_argument("--batch-size", type=int, default=12,
                   help="global batch in sequences per step (split evenly over --ddp processes)")
    g.add_argument("--max-steps", type=int, default=2000, help="optimizer steps; also lr_decay_iters")
    g.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the end of the cosine decay")
    g.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    g.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decay on params with dim >= 2")
    g.add_argument("--beta1", type=float, default=0.9, help="AdamW beta1")
    g.add_argument("--beta2", type=float, default=0.99, help="AdamW beta2")
    g.add_argument("--eps", type=float, default=1e-8, help="AdamW epsilon")
    g.add_argument("--grad-clip", type=float, default=1.0, help="clip the global grad norm to this (0: off)")
    g.add_argument("--eval-interval", type=int, default=250,
                   help="validate on the whole val split every N steps (0: only at the end)")
    g.add_argument("--eval-windows", type=int, default=0,
                   help="validate on the first N windows of the val split only (0: the whole split); for speed "
                        "comparisons of large shapes, where a whole-split evaluation would dominate the run")
    g.add_argument("--eval-batch-size", type=int, default=64,
                   help="windows per forward pass during validation (does not change the result)")
    g.add_argument("--seed", type=int, default=1337, help="seed of the init and of the batch sampler")
    g.add_argument("--log-interval", type=int, default=50, help="print a line every N steps")
    g = p.add_argument_group("parallelism")
    g.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: forward (and so backward) under torch.autocast('cpu', dtype=torch.bfloat16), "
                        "PyTorch's CPU mixed precision (bf16 matmuls, fp32 weights and optimizer); off: fp32")
    g.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (intra-op) per process; OPENBLAS_NUM_THREADS and "
                   "OMP_NUM_THREADS must equal it in the environment (set before torch loads; a warning "
                   "is printed when they are unset or differ)")
    g.add_argument("--ddp", type=int, default=0,
                   help="N > 1: launch N processes with torch.distributed gloo DDP, each with "
                   "batch-size/N sequences and --threads threads; 0 or 1: one process")
    g = p.add_argument_group("output")
    g.add_argument("--csv", default=None,
                   help="per-step CSV: step,train_loss,val_loss,lr,tokens_per_sec,ms_per_step")
    g.add_argument("--json", default=None, help="summary JSON (timings, final val loss, threads, versions)")
    g.add_argument("--quiet", action="store_true", help="print only warnings and the final summary")
    # internal: set by the --ddp launcher for its children
    p.add_argument("--_rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--_world", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--_port", type=int, default=0, help=argparse.SUPPRESS)
    return p


def warn(msg):
    print("torch_peer: warning: " + msg, file=sys.stderr, flush=True)


def setup_thread_env(args):
    """Before torch is imported: make OpenBLAS/OpenMP see --threads, or warn. Returns a record."""
    rec = {"threads_arg": args.threads, "env_at_launch": {}}
    want = str(args.threads)
    launch = json.loads(os.environ.get("TORCH_PEER_LAUNCH_ENV", "{}"))  # the --ddp launcher's view
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        have = os.environ.get(var)
        rec["env_at_launch"][var] = launch.get(var, have)
        if have is None:
            if args._rank <= 0:
                warn("%s is unset; setting it to %s before importing torch (set it yourself to be sure "
                     "OpenBLAS uses --threads %s)" % (var, want, want))
            os.environ[var] = want
        elif have != want:
            if args._rank <= 0:
                warn("%s=%s differs from --threads %s; keeping it: BLAS will not run with %s thread(s)"
                     % (var, have, want, want))
    return rec


def openblas_threads():
    """Threads the loaded OpenBLAS will use (None when no OpenBLAS is mapped into this process)."""
    try:
        libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l and ".so" in l})
    except OSError:
        return None
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            f = getattr(lib, "openblas_get_num_threads", None)
            if f is not None:
                return int(f())
        except OSError:
            continue
    return None


_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_seconds():
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat; None if unknown."""
    try:
        with open("/proc/stat") as fh:
            f = fh.readline().split()
        return (int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7]) + int(f[8])) / _CLK
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_seconds():
    t = os.times()
    return t.user + t.system


def loadavg():
    try:
        return [float(v) for v in open("/proc/loadavg").read().split()[:3]]
    except (OSError, ValueError):
        return None


def load_text_tokens(path, val_fraction):
    with open(path, "r", encoding="utf-8") as fh:
        text = fh.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = [stoi[c] for c in text]
    n_train = int(float(len(ids)) * (1.0 - val_fraction))
    return ids[:n_train], ids[n_train:], len(chars)


def define_gpt():
    """The nanoGPT model (model.py), defined after torch is imported."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            assert c.n_embd % c.n_head == 0
            self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
            self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
            self.n_head, self.n_embd = c.n_head, c.n_embd
            # torch 1.13 has no F.scaled_dot_product_attention: explicit matmul + causal mask
            self.register_buffer("mask", torch.tril(torch.ones(c.block_size, c.block_size))
                                 .view(1, 1, c.block_size, c.block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            hs = C // self.n_head
            k = k.view(B, T, self.n_head, hs).transpose(1, 2)
            q = q.view(B, T, self.n_head, hs).transpose(1, 2)
            v = v.view(B, T, self.n_head, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
            self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))  # exact (erf) GELU

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = LayerNorm(c.n_embd, c.bias)
            self.attn = CausalSelfAttention(c)
            self.ln_2 = LayerNorm(c.n_embd, c.bias)
            self.mlp = MLP(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(c.vocab_size, c.n_embd),
                wpe=nn.Embedding(c.block_size, c.n_embd),
                h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
                ln_f=LayerNorm(c.n_embd, c.bias)))
            self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

        @staticmethod
        def _init_weights(m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets, reduction="mean"):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), reduction=reduction)

        def configure_optimizer(self, weight_decay, lr, betas, eps):
            params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay = [p for p in params.values() if p.dim() >= 2]
            nodecay = [p for p in params.values() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": weight_decay},
                      {"params": nodecay, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=False)

    return GPT


def get_lr(it, a):
    """nanoGPT's get_lr with lr_decay_iters = max_steps."""
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if it > a.max_steps or a.max_steps <= a.warmup:
        return a.min_lr
    ratio = (it - a.warmup) / (a.max_steps - a.warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return a.min_lr + coeff * (a.lr - a.min_lr)


def launch_ddp(args):
    """Run this script N times as ranks 0..N-1 of a gloo group on 127.0.0.1; return 0 when all succeed.

    If a rank fails, the others are terminated (they would wait forever in a collective); ranks that
    are still alive 120 s after the first clean exit are killed as hung."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:]]
    procs = []
    for r in range(args.ddp):
        cmd = [sys.executable, os.path.abspath(__file__)] + argv + \
              ["--_rank", str(r), "--_world", str(args.ddp), "--_port", str(port)]
        procs.append(subprocess.Popen(cmd))
    first_done, failed = None, False
    while any(p.poll() is None for p in procs):
        rcs = [p.poll() for p in procs]
        if any(rc not in (None, 0) for rc in rcs) and not failed:
            failed = True
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if first_done is None and any(rc == 0 for rc in rcs):
            first_done = time.time()
        if first_done is not None and time.time() - first_done > 120:
            warn("ddp ranks still running 120 s after another finished: killing them as hung")
            for p in procs:
                if p.poll() is None:
                    p.kill()
            failed = True
        time.sleep(0.1)
    bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        print("torch_peer: ddp ranks failed (rank, exit status): %s" % bad, file=sys.stderr)
        return 1
    return 0


def main():
    args = build_parser().parse_args()
    if args.ddp > 1 and args._rank < 0:
        if args.batch_size % args.ddp != 0:
            sys.exit("torch_peer: --batch-size %d is not divisible by --ddp %d" % (args.batch_size, args.ddp))
        os.environ["TORCH_PEER_LAUNCH_ENV"] = json.dumps(
            {v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")})
        setup_thread_env(args)  # warn once, children inherit the environment
        sys.exit(launch_ddp(args))
    rank, world = max(args._rank, 0), max(args._world, 1)
    thread_rec = setup_thread_env(args)

    try:
        import torch
    except ImportError as e:
        sys.exit("torch_peer: cannot import torch (%s); run with /usr/bin/python3 (Debian python3-torch)" % e)
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    thread_rec.update({
        "env_in_effect": {v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                          "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")},
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "openblas_num_threads": openblas_threads(),
        "processes": world,
    })
    log = (lambda *a: print(*a, flush=True)) if (rank == 0 and not args.quiet) else (lambda *a: None)

    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args._port, rank=rank,
                                world_size=world)

    t_setup = time.perf_counter()
    load_start = loadavg()
    train_ids, val_ids, vocab = load_text_tokens(args.data, args.val_fraction)
    train_data = torch.tensor(train_ids, dtype=torch.long)
    val_data = torch.tensor(val_ids, dtype=torch.long)
    T = args.block_size
    if len(train_ids) < T + 1:
        sys.exit("torch_peer: the train split is shorter than one sequence")

    class Cfg:
        pass
    c = Cfg()
    c.n_layer, c.n_head, c.n_embd, c.block_size = args.n_layer, args.n_head, args.n_embd, T
    c.vocab_size, c.bias = vocab, args.bias

    torch.manual_seed(args.seed)  # same init on every rank
    GPT = define_gpt()
    model = GPT(c)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = model.configure_optimizer(args.weight_decay, args.lr, (args.beta1, args.beta2), args.eps)
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model)
    B = args.batch_size // world
    gen = torch.Generator()
    gen.manual_seed(args.seed * 1000 + rank)

    def get_batch():
        ix = torch.randint(len(train_data) - T, (B,), generator=gen)
        x = torch.stack([train_data[i:i + T] for i in ix])
        y = torch.stack([train_data[i + 1:i + 1 + T] for i in ix])
        return x, y

    n_win = (len(val_ids) - 1) // T if len(val_ids) >= T + 1 else 0
    if args.eval_windows > 0:
        n_win = min(n_win, args.eval_windows)
    w_begin, w_end = n_win * rank // world, n_win * (rank + 1) // world

    @torch.no_grad()
    def evaluate():
        t0 = time.perf_counter()
        model.eval()
        loss_sum = 0.0
        for i in range(w_begin, w_end, args.eval_batch_size):
            j = min(i + args.eval_batch_size, w_end)
            starts = torch.arange(i, j) * T
            idx = starts[:, None] + torch.arange(T)[None, :]
            x, y = val_data[idx], val_data[idx + 1]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                loss_sum += float(model(x, y, reduction="sum"))
        model.train()
        if world > 1:
            t = torch.tensor([loss_sum], dtype=torch.float64)
            dist.all_reduce(t)
            loss_sum = float(t[0])
        loss = loss_sum / (n_win * T) if n_win > 0 else float("nan")
        return loss, time.perf_counter() - t0

    log("torch_peer: torch %s | %d process(es) x %d thread(s) (OPENBLAS_NUM_THREADS=%s OMP_NUM_THREADS=%s, "
        "OpenBLAS reports %s)" % (torch.__version__, world, args.threads, os.environ.get("OPENBLAS_NUM_THREADS"),
                                  os.environ.get("OMP_NUM_THREADS"), thread_rec["openblas_num_threads"]))
    log("torch_peer: model %d layers, %d heads, %d embd, block %d, vocab %d, bias %s | %.2fM params" %
        (c.n_layer, c.n_head, c.n_embd, T, vocab, c.bias, n_params / 1e6))
    log("torch_peer: data %s: %d train / %d val tokens, %d val windows | batch %d x %d = %d tokens/step" %
        (args.data, len(train_ids), len(val_ids), n_win, args.batch_size, T, args.batch_size * T))

    csv = open(args.csv, "w") if (args.csv and rank == 0) else None
    if csv:
        csv.write("step,train_loss,val_loss,lr,tokens_per_sec,ms_per_step\n")
    tokens_per_step = args.batch_size * T
    step_secs, rates = [], []
    eval_secs, val_loss, evals = 0.0, float("nan"), []
    setup_seconds = time.perf_counter() - t_setup
    loop_t0 = time.perf_counter()
    cpu_own, cpu_machine = 0.0, 0.0
    for step in range(1, args.max_steps + 1):
        c0, m0 = process_cpu_seconds(), machine_busy_seconds()
        t0 = time.perf_counter()
        lr = get_lr(step - 1, args)
        for g in optimizer.param_groups:
            g["lr"] = lr
        x, y = get_batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = net(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        lossf = loss.detach()
        if world > 1:
            dist.all_reduce(lossf)
            lossf /= world
        lossf = float(lossf)
        dt = time.perf_counter() - t0
        m1 = machine_busy_seconds()
        cpu_own += process_cpu_seconds() - c0
        if m0 is not None and m1 is not None:
            cpu_machine += m1 - m0
        step_secs.append(dt)
        rates.append(tokens_per_step / dt)
        vl = None
        if (args.eval_interval > 0 and step % args.eval_interval == 0) or step == args.max_steps:
            vl, es = evaluate()
            eval_secs += es
            val_loss = vl
            evals.append({"step": step, "val_loss": vl, "seconds": es})
        if csv:
            csv.write("%d,%.9g,%s,%.9g,%.6g,%.6g\n" % (step, lossf, "" if vl is None else "%.9g" % vl, lr,
                                                      tokens_per_step / dt, dt * 1e3))
        if step % args.log_interval == 0 or step == 1 or step == args.max_steps:
            log("step %5d/%d | loss %.4f | lr %.3e | %.1f ms | %.0f tok/s" %
                (step, args.max_steps, lossf, lr, dt * 1e3, tokens_per_step / dt))
        if vl is not None:
            log("step %5d | val loss %.4f | %d tokens | %.2f s" % (step, vl, n_win * T, es))
    loop_wall = time.perf_counter() - loop_t0
    if csv:
        csv.close()

    tail_secs, tail_rates = step_secs[10:], rates[10:]
    summary = {
        "tool": "torch_peer.py",
        "torch_version": torch.__version__,
        "autocast": args.autocast,
        "python": sys.version.split()[0],
        "data": os.path.abspath(args.data),
        "model": {"n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd, "block_size": T,
                  "vocab_size": vocab, "bias": c.bias, "params": n_params},
        "batch_size": args.batch_size, "tokens_per_step": tokens_per_step, "max_steps": args.max_steps,
        "threads": thread_rec,
        "train_loop_seconds": sum(step_secs),
        "train_loop_seconds_note": "sum of per-step times (batch sampling, forward, backward, clip, AdamW); "
                                   "evaluation excluded",
        "loop_wall_seconds_incl_eval": loop_wall,
        "eval_seconds": eval_secs,
        "setup_seconds": setup_seconds,
        "tokens_per_sec_mean": (sum(tail_rates) / len(tail_rates)) if tail_rates else None,
        "tokens_per_sec_mean_note": "arithmetic mean of per-step tokens_per_sec over steps > 10",
        "tokens_per_sec_aggregate": (tokens_per_step * len(tail_secs) / sum(tail_secs)) if tail_secs else None,
        "tokens_per_sec_per_process_mean": ((sum(tail_rates) / len(tail_rates)) / world) if tail_rates else None,
        "ms_per_step_median": sorted(step_secs)[len(step_secs) // 2] * 1e3 if step_secs else None,
        "tokens_per_sec_median": sorted(tail_rates)[len(tail_rates) // 2] if tail_rates else None,
        "loadavg_start": load_start, "loadavg_end": loadavg(),
        "cpu_seconds_train_loop": cpu_own,
        "foreign_cpu_seconds_train_loop": cpu_machine - cpu_own,
        "foreign_cpu_note": "busy CPU time of the whole machine during the training steps minus this "
                            "process's (with --ddp: includes the other ranks); clearly above 0 means other "
                            "work shared the cores and the timing is disturbed",
        "final_train_loss": lossf if args.max_steps > 0 else None,
        "final_val_loss": val_loss,
        "val_windows": n_win, "val_tokens": n_win * T,
        "evals": evals,
    }
    if rank == 0:
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(summary, fh, indent=2)
                fh.write("\n")
        print("torch_peer: done | %d steps | train loop %.2f s (eval %.2f s excluded) | %.0f tok/s mean over "
              "steps > 10 | final val loss %.4f" % (args.max_steps, summary["train_loop_seconds"], eval_secs,
                                                   summary["tokens_per_sec_mean"] or float("nan"), val_loss),
              flush=True)
    if world > 1:
        # torch 1.13 + gloo can deadlock in interpreter teardown (~ProcessGroupGloo joins a worker that
        # waits for the GIL) and then spin on the vanished TCPStore: meet, flush, and leave without it.
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
