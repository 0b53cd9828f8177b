"""PyTorch + PEFT reference for bench/bench_lora.sh: transformers' LlamaForCausalLM (the shape gtrain
trains: grouped-query attention, llama3 rope scaling, SwiGLU, untied head) wrapped by
peft.get_peft_model with a LoRA adapter of the given rank and alpha on the given projections (no
dropout, B at zero as PEFT starts it), gtrain's synthetic tokens, torch.optim.AdamW over the adapters
only and the gradient norm clipped to 1 as gtrain clips it. fp32 on the CPU with the given intra-op
threads. Prints one JSON line: the median step time (forward, backward, clipping, optimizer step)
after the warm-up steps, the trainable and total parameter counts, the first and last losses.

  python3 bench/lora_reference.py --layers 4 --heads 8 --kv-heads 2 --width 256 --mlp 704 --seq 512 \\
      --vocab 512 --batch 8 --rank 16 --alpha 32 --targets q,k,v,o,gate,up,down --steps 10 --threads 2
"""
import argparse
import json
import os
import statistics
import sys
import time

import peft
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import synthetic_tokens  # noqa: E402

# gtrain's target names against the module names transformers gives the llama's projections.
MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
           "down": "down_proj"}


def parse_args():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("heads", 8), ("kv-heads", 2), ("width", 256), ("mlp", 704), ("seq", 512),
                          ("vocab", 512), ("batch", 8), ("rank", 16), ("steps", 10), ("warmup", 3), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--targets", default="q,k,v,o,gate,up,down", help="gtrain's names, comma-separated")
    return p.parse_args()


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.width, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        num_hidden_layers=a.layers, intermediate_size=a.mlp, max_position_embeddings=131072, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, attention_dropout=0.0)
    base = transformers.LlamaForCausalLM(cfg).float()
    lora = peft.LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0, bias="none",
                           target_modules=[MODULES[t] for t in a.targets.split(",")])
    model = peft.get_peft_model(base, lora).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1234)
    times, losses = [], []
    for step in range(a.steps):
        tokens = synthetic_tokens(a, gen)
        t0 = time.perf_counter()
        logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times), "trainable": sum(p.numel() for p in params),
                      "params": sum(p.numel() for p in model.parameters()), "first_loss": losses[0],
                      "last_loss": losses[-1], "threads": a.threads, "torch": torch.__version__,
                      "transformers": transformers.__version__, "peft": peft.__version__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
