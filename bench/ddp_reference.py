"""PyTorch DDP reference for bench/bench_dp.sh: the same GPT as gtrain's `gpt`, the same global
batch and optimizer, on CPU with gloo. Prints JSON: samples/s over timed steps and the wall time of
the first finished step. Launch: python3 -m torch.distributed.run --nproc_per_node 2 ddp_reference.py"""
import json, math, os, sys, time

T0 = time.time()
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

L, H, C, T, V = 4, 4, 128, 64, 256
GLOBAL_BATCH, STEPS, WARMUP = 32, int(os.environ.get("STEPS", "30")), 5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).split(C, -1)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Gpt())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_rank = GLOBAL_BATCH // world
    g = torch.Generator().manual_seed(rank)
    first_step_time, timed = None, 0.0
    for step in range(STEPS):
        x = torch.randint(0, V, (per_rank, T + 1), generator=g)
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.time() - t0
        if first_step_time is None:
            first_step_time = time.time()
        if step >= WARMUP:
            timed += dt
    if rank == 0:
        print(json.dumps({"samples_per_s": GLOBAL_BATCH * (STEPS - WARMUP) / timed,
                          "first_step_wall": first_step_time, "process_start": T0}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
