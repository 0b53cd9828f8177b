"""PyTorch reference for bench/bench_llama.sh: transformers' LlamaForCausalLM with the shape gtrain
trains (grouped-query attention, llama3 rope scaling, SwiGLU, untied head), random tokens, and
torch.optim.AdamW, in PyTorch eager on the CPU with the given intra-op threads. Prints one JSON line:
the median step time (forward, backward, optimizer step) after the warm-up steps, and the losses.

  python3 bench/llama_reference.py --layers 4 --heads 8 --kv-heads 2 --width 256 --mlp 704 --seq 128 \\
      --vocab 512 --batch 8 --steps 12 --threads 2
"""
import argparse
import json
import statistics
import time

import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("heads", 8), ("kv-heads", 2), ("width", 256), ("mlp", 704), ("seq", 128),
                          ("vocab", 512), ("batch", 8), ("steps", 12), ("warmup", 3), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.width, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        num_hidden_layers=a.layers, intermediate_size=a.mlp, max_position_embeddings=131072, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, attention_dropout=0.0)
    model = transformers.LlamaForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times, losses = [], []
    for step in range(a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        t0 = time.perf_counter()
        logits = model(tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    print(json.dumps({"step_s": statistics.median(times), "first_loss": losses[0], "last_loss": losses[-1],
                      "threads": a.threads, "transformers": transformers.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
