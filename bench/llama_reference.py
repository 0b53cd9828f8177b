"""PyTorch reference for bench/bench_llama.sh (CPU) and bench/gpu_llama.sh (GPU): transformers'
LlamaForCausalLM with the shape gtrain trains (grouped-query attention, llama3 rope scaling, SwiGLU,
tied or untied head), gtrain's synthetic tokens, and torch.optim.AdamW (fused on CUDA). On the CPU in fp32 with
the given intra-op threads; on CUDA in bf16 autocast over fp32 weights, in eager mode and compiled.
Prints one JSON line per mode: the median step time (forward, backward, optimizer step) after the
warm-up steps, tokens/s and MFU (CUDA: the mean over the timed steps, the GPU synchronised only at
their ends), the losses and, on CUDA, torch's max allocated memory.

  python3 bench/llama_reference.py --layers 4 --heads 8 --kv-heads 2 --width 256 --mlp 704 --seq 128 \\
      --vocab 512 --batch 8 --steps 12 --threads 2
  python3 bench/llama_reference.py --device cuda --dtype bf16 --modes eager,compile --layers 16 ...
"""
import argparse
import json
import statistics
import time

import torch
import transformers

H200_BF16_PEAK = 989e12


def parse_args():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("heads", 8), ("kv-heads", 2), ("width", 256), ("mlp", 704), ("seq", 128),
                          ("vocab", 512), ("batch", 8), ("steps", 12), ("warmup", 3), ("threads", 2), ("tied", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--rope-factor", type=float, default=8.0, help="llama3 rope scaling factor")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--modes", default="eager", help="eager and/or compile, comma-separated")
    p.add_argument("--peak-flops", type=float, default=H200_BF16_PEAK)
    return p.parse_args()


def synthetic_tokens(a, gen):
    """gtrain's synthetic data: each sample a random start and stride (mod vocab), so there is
    something to learn and the loss falls from ln(vocab) as it does in gtrain's run."""
    start = torch.randint(0, a.vocab, (a.batch, 1), generator=gen)
    stride = torch.randint(1, 4, (a.batch, 1), generator=gen)
    return (start + stride * torch.arange(a.seq + 1)) % a.vocab


def flops_per_token(a, matmul_params):
    # 6 N over the parameters that take part in a product (the input embedding is a lookup unless
    # it is tied to the output layer), plus attention's scores and values.
    return 6 * matmul_params + 12 * a.layers * a.width * a.seq


def run(a, mode, device):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.width, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        num_hidden_layers=a.layers, intermediate_size=a.mlp, max_position_embeddings=131072, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": a.rope_factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        tie_word_embeddings=bool(a.tied), attention_dropout=0.0)
    if device.type == "cuda":
        cfg._attn_implementation = "sdpa"
    with torch.device(device):  # on CUDA the weights are made (and initialised) on the GPU
        model = transformers.LlamaForCausalLM(cfg).float().train()
    params = sum(p.numel() for p in model.parameters())
    matmul_params = params if a.tied else params - a.vocab * a.width
    kw = dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    opt = torch.optim.AdamW(model.parameters(), fused=True, **kw) if device.type == "cuda" else \
        torch.optim.AdamW(model.parameters(), **kw)
    forward = model
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return {"mode": mode, "skipped": f"torch {torch.__version__} has no torch.compile"}
        forward = torch.compile(model)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times, losses, t_start = [], [], None
    gen = torch.Generator().manual_seed(1234)
    for step in range(a.steps):
        tokens = synthetic_tokens(a, gen).to(device, non_blocking=True)
        if cuda and step == a.warmup:
            torch.cuda.synchronize(device)
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = forward(tokens[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if not cuda:
            losses[-1] = losses[-1].item()
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize(device)
        step_s = (time.perf_counter() - t_start) / (a.steps - a.warmup)
    else:
        step_s = statistics.median(times)
    tokens_per_s = a.batch * a.seq / step_s
    fpt = flops_per_token(a, matmul_params)
    out = {"mode": mode, "device": str(device), "dtype": a.dtype, "step_s": step_s, "tokens_per_s": tokens_per_s,
           "params": params, "flops_per_token": fpt, "first_loss": float(losses[0]), "last_loss": float(losses[-1]),
           "threads": a.threads, "transformers": transformers.__version__, "torch": torch.__version__}
    if cuda:
        out["mfu"] = tokens_per_s * fpt / a.peak_flops
        out["max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def main():
    a = parse_args()
    device = torch.device(a.device)
    torch.set_num_threads(a.threads)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({"error": "torch.cuda.is_available() is False"}))
            return 1
        torch.backends.cuda.matmul.allow_tf32 = True
    for mode in a.modes.split(","):
        t0 = time.perf_counter()
        try:
            r = run(a, mode, device)
        except Exception as e:  # one mode failing (a compile error, memory) leaves the other's figures
            r = {"mode": mode, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
        r["wall_s"] = time.perf_counter() - t0
        print(json.dumps(r), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
