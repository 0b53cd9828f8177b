"""PyTorch reference for bench/gpu_gpt2.sh: the same GPT as gtrain's `gpt` (pre-LN blocks, fused QKV,
GELU-tanh MLP, tied embeddings, GPT-2 init), the same synthetic tokens (t[i+1] = t[i] + k mod vocab,
k in {1, 2, 3} per sample), AdamW, warmup + cosine LR and clipping at 1.0, trained in PyTorch eager
and with torch.compile. Prints one JSON line per mode: tokens/s over the timed steps, MFU, first and
last loss, torch.cuda.max_memory_allocated.

On CUDA: bf16 autocast (fp32 master weights), fused AdamW, scaled_dot_product_attention (flash).
Without CUDA (--device cpu, the CPU smoke run): CPU bf16 autocast, the default AdamW, explicit
attention where torch has no SDPA; torch.compile is skipped when torch lacks it (1.x).

  python3 bench/gpt2_reference.py --device cuda --modes eager,compile            # GPT-2 124M
  python3 bench/gpt2_reference.py --device cpu --layers 2 --heads 2 --width 64 --seq 64 --vocab 512 \\
      --batch 8 --steps 8 --warmup 3 --modes eager,compile                         # smoke
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s of an H100/H200 SXM


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10, help="steps before timing starts")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup-lr-steps", type=int, default=5)
    p.add_argument("--peak-flops", type=float, default=H200_BF16_PEAK)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    p.add_argument("--profile-steps", default="", help="eager mode: record steps A-B (1-based) with torch.profiler")
    p.add_argument("--profile-out", default="", help="where the profile's table goes (text)")
    return p.parse_args()


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, -1)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(a.vocab, a.width), nn.Embedding(a.seq, a.width)
        self.h = nn.ModuleList(Block(a.width, a.heads) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.width)
        resid_std = 0.02 / math.sqrt(2 * a.layers)  # gtrain's GPT-2 initialisation
        for name, p in self.named_parameters():
            if "ln" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, resid_std)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, target):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def synthetic_batch(a, gen, device):
    """gtrain's synthetic tokens: a random start and stride per sample."""
    start = torch.randint(0, a.vocab, (a.batch, 1), generator=gen)
    stride = torch.randint(1, 4, (a.batch, 1), generator=gen)
    seq = (start + stride * torch.arange(a.seq + 1)) % a.vocab
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def lr_at(a, step):
    """gtrain's warmup + cosine to 10% of the peak (runtime/train/lr_schedule.cpp)."""
    if step < a.warmup_lr_steps:
        return a.lr * (step + 1) / a.warmup_lr_steps
    decay = max(1, a.steps - a.warmup_lr_steps - 1)
    progress = min(max((step - a.warmup_lr_steps) / decay, 0.0), 1.0)
    floor = 0.1 * a.lr
    return floor + 0.5 * (a.lr - floor) * (1 + math.cos(math.pi * progress))


def flops_per_token(a, params):
    # 6 N for the matmuls of forward + backward, plus attention scores and values (nanoGPT's estimate).
    return 6 * params + 12 * a.layers * a.width * a.seq


def make_optimizer(model, a, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}]
    kw = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"
    return torch.optim.AdamW(groups, **kw), "default"


def start_profile(device):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    prof = torch.profiler.profile(activities=acts)
    prof.__enter__()
    return prof


def finish_profile(prof, device, path, steps, label):
    """Writes the recorded steps' top GPU kernels and host operators, as gtrain's profile does."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    prof.__exit__(None, None, None)
    try:
        avg = prof.key_averages()
        lines = [f"PyTorch eager, steps {label} ({steps} steps; totals over them, in ms)"]
        keys = ("self_device_time_total", "self_cuda_time_total") if device.type == "cuda" else ("self_cpu_time_total",)
        for key in keys:
            try:
                lines.append(avg.table(sort_by=key, row_limit=30))
                break
            except (AttributeError, KeyError, ValueError):
                continue
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    except Exception as e:  # the benchmark's figures matter more than its profile
        with open(path, "w") as f:
            f.write(f"profile failed: {type(e).__name__}: {e}\n")


def run(a, mode, device):
    torch.manual_seed(a.seed)
    model = GPT(a).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt, opt_kind = make_optimizer(model, a, device)
    step_fn = model
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return {"mode": mode, "skipped": f"torch {torch.__version__} has no torch.compile"}
        step_fn = torch.compile(model)
    gen = torch.Generator().manual_seed(a.seed)
    autocast_dtype = torch.bfloat16 if a.dtype == "bf16" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses = []  # device tensors: read once at the end, so no step waits for the GPU
    t_start = None
    prof, prof_range = None, None
    if mode == "eager" and a.profile_steps and a.profile_out:
        first, last = (int(v) for v in a.profile_steps.split("-"))
        prof_range = (first - 1, last - 1)  # 0-based step indices
    for step in range(a.steps):
        if prof_range and step == prof_range[0]:
            prof = start_profile(device)
        if step == a.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t_start = time.perf_counter()
        x, y = synthetic_batch(a, gen, device)
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        if autocast_dtype is not None:
            with torch.autocast(device_type=device.type, dtype=autocast_dtype):
                loss = step_fn(x, y)
        else:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if prof is not None and step == prof_range[1]:
            finish_profile(prof, device, a.profile_out, prof_range[1] - prof_range[0] + 1, a.profile_steps)
            prof = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t_start
    timed = a.steps - a.warmup
    tokens_per_s = timed * a.batch * a.seq / seconds
    fpt = flops_per_token(a, params)
    out = {
        "mode": mode,
        "device": str(device),
        "torch": torch.__version__,
        "params": params,
        "optimizer": opt_kind,
        "attention": "sdpa" if HAVE_SDPA else "explicit",
        "dtype": a.dtype,
        "timed_steps": timed,
        "seconds": seconds,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": fpt,
        "mfu": tokens_per_s * fpt / a.peak_flops,
        "first_loss": float(losses[0]),
        "last_loss": float(losses[-1]),
    }
    if device.type == "cuda":
        out["max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def main():
    a = parse_args()
    device = torch.device(a.device)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({"error": "torch.cuda.is_available() is False"}))
            return 1
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    for mode in a.modes.split(","):
        t0 = time.perf_counter()
        try:
            r = run(a, mode, device)
        except Exception as e:  # report and go on with the next mode
            r = {"mode": mode, "error": f"{type(e).__name__}: {e}"[:500]}
        r["wall_s"] = time.perf_counter() - t0
        print(json.dumps(r), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
