#!/usr/bin/env python3
"""lora_peer.py: gtrain's LoRA fine-tune against PyTorch + PEFT (ctest label hf).

A random Llama (or GPT-2) made by transformers (tests/hf/hf_peer.py's) is the frozen base of
`gtrain run` with [adapter] kind = "lora" (checkpoint.init_from). Cases:

  llama_peft, gpt2_peft: 10 steps on 1 rank against a PyTorch loop over peft.PeftModel on the same
    base, the same batches (gtrain's sample order), AdamW on the adapters only and the same clipping.
    The reference starts from gtrain's initial adapters: B is zero, and with weight_decay = 0 the
    first step leaves A as it was (its gradient is zero while B is), so the step-1 checkpoint exported
    with --format peft holds A's initial values. Every step's loss agrees within 1e-5; the last
    checkpoint's PEFT export loads in peft with no missing or unexpected key, its adapters equal the
    reference's and its logits the reference model's within 1e-4; the merged Hugging Face export
    (--format hf --merge) loads in transformers with logits equal to the PEFT model's within 1e-4.
  llama_layouts: dp2 with ZeRO-3, tp2, pp2 and dp2 ZeRO-2 with recompute train the same 10 steps as
    1 rank within 1e-5, and so does dp2 ZeRO-3 with the base held in bf16; in bitwise mode 1 and 2 ranks are bitwise equal; a run staged over 2, then 3
    (uneven shares), then 1 ranks equals the unstaged one; a resume onto another base is refused by
    name.
  qwen3_chat: LoRA on packed conversations (data.format = "chat", the chat example's tokenizer): dp2
    and pp2 train 5 steps as 1 rank within 1e-5.

Usage: lora_peer.py GTRAIN CASE   (run in the project venv)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402
from hf_peer import B, T, V  # noqa: E402

import peft  # noqa: E402

GTRAIN, CASE = sys.argv[1], sys.argv[2]
STEPS = 10
LR = 0.01
TARGETS = {"llama": ["q", "k", "v", "o", "gate", "up", "down"], "gpt2": ["qkv", "o", "up", "down"]}


def adapter_toml(family):
    targets = ", ".join(f'"{t}"' for t in TARGETS[family])
    return f"""[adapter]
kind = "lora"
rank = 4
alpha = 8.0
targets = [{targets}]
"""


def setup(tmp, family, seed):
    src = os.path.join(tmp, "hf")
    hf_peer.make_model(family, tied=family == "gpt2", seed=seed).save_pretrained(src)
    data = hf_peer.Data(tmp, seed=seed + 4)
    job = os.path.join(tmp, "job.toml")
    hf_peer.job_toml(job, src, data.path, data.eval_path, STEPS, adapter_toml(family))
    return src, data, job


COMMON = ("optimizer.weight_decay=0", "train.lr_schedule=constant", f"optimizer.learning_rate={LR}")


def losses(records):
    return [r["loss"] for r in records if r.get("kind") == "train"]


def export(run, out, *args):
    cmd = [GTRAIN, "ckpt", "export", run, out, *args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    print(f"  {r.stdout.strip()}", flush=True)


def peft_model(src, adapter_dir, trainable):
    """The adapter loaded the way users load it; fails on any missing or unexpected key."""
    base = hf_peer.load(src)
    model = peft.PeftModel.from_pretrained(base, adapter_dir, is_trainable=trainable)
    state = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    result = peft.set_peft_model_state_dict(model, state)
    if result.unexpected_keys:
        raise AssertionError(f"{adapter_dir}: peft reports unexpected keys {result.unexpected_keys}")
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing:
        raise AssertionError(f"{adapter_dir}: peft reports missing adapter keys {missing[:4]}")
    return model


def batch(data, step):
    windows = len(data.tokens) - T
    idx = [hf_peer.window_index(1234, step * B + b, windows) for b in range(B)]
    return torch.as_tensor([data.tokens[i:i + T + 1] for i in idx], dtype=torch.long)


def reference(src, data, init_dir):
    model = peft_model(src, init_dir, trainable=True)
    params = [p for n, p in model.named_parameters() if p.requires_grad]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.zero_()
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    out = []
    for step in range(STEPS):
        x = batch(data, step)
        logits = model(x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return model, out


def logits_close(a, b, what, tol=1e-4):
    diff = (a - b).abs().max().item() / max(b.abs().max().item(), 1e-12)
    status = "ok" if diff <= tol else "FAILED"
    print(f"  {what}: max |diff| / max |value| {diff:.2e}  {status}", flush=True)
    return diff <= tol


def peft_case(family):
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        src, data, job = setup(tmp, family, seed=11)
        run = os.path.join(tmp, "run")
        records, out = hf_peer.run_gtrain(GTRAIN, job, run, 1, COMMON + ("checkpoint.interval=1", "checkpoint.keep=20"))
        if "LoRA rank 4" not in out:
            raise AssertionError(f"the run does not say it trains LoRA adapters:\n{out}")
        got = losses(records)
        init_dir = os.path.join(tmp, "init-adapter")
        export(os.path.join(run, "checkpoints", "step_00000001"), init_dir, "--format", "peft")
        model, want = reference(src, data, init_dir)
        print(f"{family}: {STEPS} steps, targets {TARGETS[family]}", flush=True)
        for i, (g, w) in enumerate(zip(got, want)):
            ok &= hf_peer.close(g, w, f"step {i + 1} loss", ("gtrain", "peft"))
        ok &= len(got) == STEPS
        # The last checkpoint as PEFT loads it: the same adapters and logits as the reference.
        final = os.path.join(tmp, "final-adapter")
        export(run, final, "--format", "peft")
        with open(os.path.join(final, "adapter_config.json")) as f:
            cfg = json.load(f)
        if (cfg["r"], cfg["lora_alpha"], cfg["peft_type"]) != (4, 8.0, "LORA"):
            raise AssertionError(f"adapter_config.json: {cfg}")
        loaded = peft_model(src, final, trainable=False).eval()
        mine = {n: p for n, p in model.named_parameters() if "lora_" in n}
        theirs = {n: p for n, p in loaded.named_parameters() if "lora_" in n}
        if sorted(mine) != sorted(theirs):
            raise AssertionError(f"adapter names differ: {sorted(set(mine) ^ set(theirs))[:4]}")
        worst = max((mine[n] - theirs[n]).abs().max().item() / max(mine[n].abs().max().item(), 1e-12) for n in mine)
        print(f"  adapters after {STEPS} steps, gtrain vs peft: worst relative difference {worst:.2e}", flush=True)
        ok &= worst <= 1e-4
        x = torch.as_tensor(data.eval_windows(), dtype=torch.long)[:, :-1]
        model.eval()
        with torch.no_grad():
            ref_logits, peft_logits = model(x).logits, loaded(x).logits
        ok &= logits_close(peft_logits, ref_logits, "logits of the PEFT export vs the reference")
        merged = os.path.join(tmp, "merged")
        export(run, merged, "--format", "hf", "--merge")
        with torch.no_grad():
            merged_logits = hf_peer.load(merged)(x).logits
        ok &= logits_close(merged_logits, peft_logits, "logits of the merged export vs the PEFT model")
        # gtrain sample on the LoRA run (its base with the adapters folded in) generates as the merged model.
        prompt = [int(t) for t in data.eval_tokens[:4]]
        ok &= hf_peer.same_greedy_tokens(GTRAIN, run, hf_peer.load(merged), prompt, 16)
    return ok


def layouts_case():
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        src, data, job = setup(tmp, "llama", seed=12)
        one, out = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "one"), 1, COMMON)
        want = losses(one)
        explicit = ("parallel.mode=explicit",)
        for name, sets in (("dp2 zero3", ("parallel.dp=2", "parallel.zero=3")), ("tp2", ("parallel.tp=2",)),
                           ("pp2", ("parallel.pp=2",)),
                           ("dp2 zero2 recompute", ("parallel.dp=2", "parallel.zero=2", "parallel.recompute=true"))):
            recs, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, name.replace(" ", "-")), 2,
                                         COMMON + explicit + sets)
            got = losses(recs)
            ok &= len(got) == STEPS
            ok &= all(hf_peer.close(g, w, f"{name} step {i + 1}", (name, "1 rank")) for i, (g, w) in
                      enumerate(zip(got, want)))
        # The base held in bf16: sharded by ZeRO-3 in bf16 and gathered per block, as 1 rank computes it.
        bf16 = COMMON + ("adapter.base_dtype=bf16",)
        h1, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "bf16-1"), 1, bf16)
        h2, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "bf16-z3"), 2,
                                   bf16 + explicit + ("parallel.dp=2", "parallel.zero=3"))
        ok &= len(losses(h2)) == STEPS
        ok &= all(hf_peer.close(g, w, f"bf16 base, dp2 zero3 step {i + 1}", ("dp2 zero3", "1 rank")) for i, (g, w) in
                  enumerate(zip(losses(h2), losses(h1))))
        bitwise = COMMON + ("train.reproducible=bitwise",)
        b1, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "bit1"), 1, bitwise)
        # The same run's identity on any layout in bitwise mode: --force trains it again.
        b2, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "bit2"), 2, bitwise, ("--force",))
        same = losses(b1) == losses(b2) and len(losses(b1)) == STEPS
        print(f"  bitwise mode, 1 vs 2 ranks: {'bitwise equal' if same else 'DIFFERENT'}", flush=True)
        ok &= same
        staged = os.path.join(tmp, "staged")
        hf_peer.run_gtrain(GTRAIN, job, staged, 2, COMMON + ("train.steps=3",))
        _, out3 = hf_peer.run_gtrain(GTRAIN, job, staged, 3, COMMON + ("train.steps=6",))
        recs, out1 = hf_peer.run_gtrain(GTRAIN, job, staged, 1, COMMON)
        if "resumed from" not in out3 or "resumed from" not in out1:
            raise AssertionError(f"a stage did not resume:\n{out3}\n{out1}")
        got = losses(recs)
        ok &= len(got) == STEPS
        ok &= all(hf_peer.close(g, w, f"staged 2 -> 3 -> 1 step {i + 1}", ("staged", "unstaged")) for i, (g, w) in
                  enumerate(zip(got, want)))
        # Another base under the same path: the adapters do not carry over; the resume says so.
        hf_peer.make_model("llama", tied=False, seed=13).save_pretrained(src)
        r = subprocess.run([GTRAIN, "run", job, "--run-dir", staged, "--ranks", "1", "--set", "train.steps=12"]
                           + [a for s in COMMON for a in ("--set", s)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        refused = r.returncode == 2 and "trained on base model" in r.stdout
        print(f"  resume onto a changed base: exit {r.returncode}, {'refused by name' if refused else 'NOT REFUSED'}"
              + ("" if refused else f"\n{r.stdout}"), flush=True)
        ok &= refused
    return ok


def chat_case():
    """LoRA on packed conversations (data.format = "chat"): dp2 and pp2 train as 1 rank."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    example = os.path.join(source, "examples", "chat_sft")
    hf_peer.V = 512  # the example tokenizer's vocabulary
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "hf")
        hf_peer.make_model("qwen3", tied=True, seed=14).save_pretrained(src)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(example, "tokenizer", name), src)
        data = os.path.join(tmp, "convs.jsonl")
        with open(os.path.join(example, "conversations.jsonl")) as f, open(data, "w") as out:
            out.writelines(f.readlines()[:64])
        job = os.path.join(tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f"""[model]
name = "hf"
seq_len = 96
[data]
kind = "jsonl"
format = "chat"
path = "{data}"
eval_fraction = 0
[optimizer]
learning_rate = 0.01
weight_decay = 0
[train]
global_batch = 8
steps = 5
warmup_steps = 0
threads = 1
[checkpoint]
interval = 0
init_from = "{src}"
[log]
progress = "none"
{adapter_toml("llama")}""")
        one, out = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, "one"), 1)
        if "LoRA rank 4" not in out:
            raise AssertionError(f"no LoRA line:\n{out}")
        want = losses(one)
        print(f"qwen3 LoRA on packed conversations: {len(want)} steps", flush=True)
        for name, sets in (("dp2", ("parallel.dp=2",)), ("pp2", ("parallel.pp=2",))):
            recs, _ = hf_peer.run_gtrain(GTRAIN, job, os.path.join(tmp, name), 2, ("parallel.mode=explicit",) + sets)
            got = losses(recs)
            ok &= len(got) == len(want) == 5
            ok &= all(hf_peer.close(g, w, f"{name} step {i + 1}", (name, "1 rank")) for i, (g, w) in
                      enumerate(zip(got, want)))
        ok &= want[-1] < want[0]
    return ok


CASES = {"llama_peft": lambda: peft_case("llama"), "gpt2_peft": lambda: peft_case("gpt2"),
         "llama_layouts": layouts_case, "qwen3_chat": chat_case}

if __name__ == "__main__":
    sys.exit(0 if CASES[CASE]() else 1)
