#!/usr/bin/env python3
"""hf_peer.py: gtrain against transformers on Hugging Face checkpoints (ctest label hf).

Each case makes a small random model with transformers (2 layers, width 64, vocabulary 256, context
32), saves it with save_pretrained, starts `gtrain run` from it (checkpoint.init_from, model.name =
"hf") for one step, and compares gtrain's step-1 loss (logged before the update) with transformers'
loss on the same batch in fp32: within 1e-5 relative, on one rank and on the layouts the case names.
`export` cases train a few steps, export with `gtrain ckpt export --format hf`, load the directory
with AutoModelForCausalLM (no missing, unexpected or mismatched keys, no warning) and compare the
run's final eval loss with transformers' on the held-out windows.

Usage: hf_peer.py GTRAIN CASE [CASE...]   (cases: see CASES; run in the project venv)
"""
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

T = 40  # the jobs' seq_len: a prompt of 4 and 32 generated tokens fit
CONTEXT = 2 * T  # the models' own context (n_positions, max_position_embeddings)
V = 256  # vocabulary
B = 8  # global batch
MASK = (1 << 64) - 1
REL_TOL = 1e-5


# gtrain's sample order (runtime/data/rng.h, runtime/data/sampler.cpp): training window of global
# sample g = hash(seed, 0x3d0, g) % windows, splitmix64-based. Batch 1 is samples 0..B-1.
def _mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def _hash2(a, b):
    return _mix(_mix(a) ^ ((b * 0xD1B54A32D192ED03) & MASK))


def window_index(seed, g, windows):
    return _hash2(_hash2(seed, 0x3D0), g) % windows


def perturb(model, seed):
    """Weights far from the init (std 0.02 gives a loss of ln V whatever the wiring), ties kept."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight") or ".ln_" in name or "ln_f.weight" in name or "layernorm" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(0.2 * noise)


def make_model(family, tied, seed=1):
    torch.manual_seed(seed)
    common = dict(vocab_size=V, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    # A context longer than the jobs' seq_len T: gtrain trains on the first T positions (GPT-2's
    # position table keeps all its rows) and carries the length through export.
    llama_like = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=96,
                      max_position_embeddings=CONTEXT, rms_norm_eps=1e-5, **common)
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=CONTEXT, **common)
    elif family == "llama":  # grouped-query attention, Llama 3 rope scaling
        cfg = transformers.LlamaConfig(num_key_value_heads=2, rope_theta=500000.0,
                                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
                                       **llama_like)
    elif family == "qwen3":  # q/k norms, a head width other than hidden / heads
        cfg = transformers.Qwen3Config(num_key_value_heads=2, head_dim=32, rope_theta=1000000.0, **llama_like)
    elif family == "qwen2":  # q/k/v biases
        cfg = transformers.Qwen2Config(num_key_value_heads=1, rope_theta=10000.0, **llama_like)
    else:
        raise ValueError(family)
    cls = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
           "qwen3": transformers.Qwen3ForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}[family]
    model = cls(cfg)
    perturb(model, seed)
    return model.eval()


def load(directory):
    """The directory as transformers loads it, in fp32; fails on any missing/unexpected/mismatched key."""
    model, info = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            raise AssertionError(f"{directory}: transformers reports {kind}: {info[kind]}")
    return model.eval()


def hf_loss(model, windows):
    """Mean over samples of each sample's mean token loss, as gtrain reports it."""
    x = torch.as_tensor(windows, dtype=torch.long)
    with torch.no_grad():
        logits = model(x[:, :-1]).logits.double()
        ce = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1), reduction="none").view(len(x), T)
    return ce.mean(1).mean().item()


def job_toml(path, init_from, tokens, eval_tokens, steps, extra=""):
    with open(path, "w") as f:
        f.write(f"""[model]
name = "hf"
seq_len = {T}
[data]
kind = "tokens"
path = "{tokens}"
eval_path = "{eval_tokens}"
token_dtype = "uint16"
[optimizer]
learning_rate = 0.01
[train]
global_batch = {B}
steps = {steps}
warmup_steps = 0
seed = 1234
threads = 1
[checkpoint]
interval = 0
init_from = "{init_from}"
[log]
progress = "none"
{extra}""")


def run_gtrain(gtrain, job, run_dir, ranks=1, sets=(), extra=()):
    cmd = [gtrain, "run", job, "--run-dir", run_dir, "--ranks", str(ranks), *extra]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    return records, r.stdout


def close(got, want, what, names=("gtrain", "transformers")):
    rel = abs(got - want) / abs(want)
    status = "ok" if rel <= REL_TOL else "FAILED"
    print(f"  {what}: {names[0]} {got:.8f}  {names[1]} {want:.8f}  rel {rel:.2e}  {status}", flush=True)
    return rel <= REL_TOL


class Data:
    """A token file for training (its batch-1 windows known) and a held-out one (in order)."""

    def __init__(self, tmp, seed=5):
        rng = np.random.default_rng(seed)
        self.tokens = rng.integers(0, V, size=6 * T, dtype=np.uint16)
        self.eval_tokens = rng.integers(0, V, size=3 * T + 1, dtype=np.uint16)
        self.path, self.eval_path = os.path.join(tmp, "train.bin"), os.path.join(tmp, "eval.bin")
        self.tokens.tofile(self.path)
        self.eval_tokens.tofile(self.eval_path)

    def batch1(self, seed=1234):
        windows = len(self.tokens) - T  # random windows of T + 1 tokens, stride 1
        return np.stack([self.tokens[i:i + T + 1] for i in (window_index(seed, g, windows) for g in range(B))])

    def eval_windows(self):
        n = (len(self.eval_tokens) - 1) // T  # held-out windows do not overlap
        return np.stack([self.eval_tokens[i * T:i * T + T + 1] for i in range(n)])


def import_case(gtrain, tmp, family, tied=True, layouts=((1, ()),), save=None):
    """transformers saves; gtrain starts from it; step 1's loss agrees on every layout."""
    save = save or {}
    tmp = tempfile.mkdtemp(dir=tmp)
    model = make_model(family, tied)
    src = os.path.join(tmp, "hf")
    if save.get("dtype") == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(src, max_shard_size=save.get("max_shard_size", "5GB"))
    files = sorted(os.listdir(src))
    data = Data(tmp)
    want = hf_loss(load(src), data.batch1())
    job = os.path.join(tmp, "job.toml")
    job_toml(job, src, data.path, data.eval_path, 1)
    ok = True
    print(f"{family} tied={tied} {save or ''} files {files}", flush=True)
    for ranks, sets in layouts:
        records, out = run_gtrain(gtrain, job, os.path.join(tmp, f"run-{ranks}-{'-'.join(sets)}"), ranks, sets)
        step1 = [r for r in records if r.get("kind") == "train" and r.get("step") == 1]
        if not step1:
            raise AssertionError(f"no step-1 train record:\n{out}")
        ok &= close(step1[0]["loss"], want, f"step-1 loss, {ranks} rank(s) {' '.join(sets)}")
    return ok


def export_case(gtrain, tmp, family, tied, dtype="float32", shard=None):
    """gtrain imports, trains 3 steps, exports --format hf; transformers loads it with no warning and
    computes the run's final eval loss."""
    tmp = tempfile.mkdtemp(dir=tmp)
    model = make_model(family, tied, seed=2)
    src = os.path.join(tmp, "hf")
    model.save_pretrained(src)
    data = Data(tmp, seed=6)
    job = os.path.join(tmp, "job.toml")
    job_toml(job, src, data.path, data.eval_path, 3)
    records, _ = run_gtrain(gtrain, job, os.path.join(tmp, "run"))
    evals = [r for r in records if r.get("kind") == "eval"]
    out = os.path.join(tmp, "exported")
    cmd = [gtrain, "ckpt", "export", os.path.join(tmp, "run"), out, "--format", "hf", "--dtype", dtype]
    if shard:
        cmd += ["--max-shard-size", shard]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    print(f"{family} tied={tied} export: {r.stdout.strip()}; files {sorted(os.listdir(out))}", flush=True)
    # No warning from transformers while loading (missing keys, tied weights, config keys, dtypes).
    seen = []
    handler = logging.Handler()
    handler.emit = lambda rec: seen.append(rec.getMessage()) if rec.levelno >= logging.WARNING else None
    logging.getLogger("transformers").addHandler(handler)
    try:
        loaded = load(out)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    if seen:
        raise AssertionError(f"transformers warned while loading {out}: {seen}")
    # What generation needs is carried through: special tokens, generation config, context length.
    with open(os.path.join(src, "config.json")) as f:
        src_cfg = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        out_cfg = json.load(f)
    length_key = "n_positions" if family == "gpt2" else "max_position_embeddings"
    for key in ("bos_token_id", "eos_token_id", length_key):
        if out_cfg.get(key) != src_cfg.get(key):
            raise AssertionError(f"{out}/config.json: {key} = {out_cfg.get(key)}, the source's is {src_cfg.get(key)}")
    gen = transformers.GenerationConfig.from_pretrained(out)
    if (gen.bos_token_id, gen.eos_token_id) != (0, 1):
        raise AssertionError(f"{out}/generation_config.json: bos {gen.bos_token_id}, eos {gen.eos_token_id}, want 0, 1")
    if dtype != "float32":  # the run's weights rounded to dtype: compare transformers with gtrain on that
        job2 = os.path.join(tmp, "job2.toml")
        job_toml(job2, out, data.path, data.eval_path, 1)
        records, _ = run_gtrain(gtrain, job2, os.path.join(tmp, "run2"))
        step1 = [r for r in records if r.get("kind") == "train" and r.get("step") == 1][0]["loss"]
        return close(step1, hf_loss(loaded, data.batch1()), f"exported ({dtype}) and imported again: step-1 loss")
    ok = close(evals[-1]["loss"], hf_loss(loaded, data.eval_windows()), "final eval loss after 3 steps, exported")
    prompt = [int(t) for t in data.eval_tokens[:4]]
    for source in (os.path.join(tmp, "run"), out):
        ok &= same_greedy_tokens(gtrain, source, loaded, prompt, 32)
    # Stopping at EOS, for real: make the 6th greedy token the end-of-sequence token of the exported
    # directory; gtrain sample and transformers' generate() both stop there, keeping it.
    free = greedy_tokens(gtrain, out, prompt, 32)
    eos = free[min(5, len(free) - 1)]
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(out, name)
        with open(path) as f:
            j = json.load(f)
        j["eos_token_id"] = eos
        with open(path, "w") as f:
            json.dump(j, f)
    stopped = greedy_tokens(gtrain, out, prompt, 32)
    if stopped != free[:free.index(eos) + 1]:
        raise AssertionError(f"gtrain sample with eos {eos}: {stopped}, want {free[:free.index(eos) + 1]}")
    ok &= same_greedy_tokens(gtrain, out, load(out), prompt, 32)
    return ok


def greedy_tokens(gtrain, source, prompt, n):
    cmd = [gtrain, "sample", source, "--prompt-ids", ",".join(map(str, prompt)), "--tokens", str(n),
           "--temperature", "0", "--json"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    return json.loads(r.stdout)["tokens"]


def same_greedy_tokens(gtrain, source, model, prompt, n):
    """gtrain sample --temperature 0 (a run, or a Hugging Face directory) against transformers'
    generate(do_sample=False), token for token, both stopping at the model's end-of-sequence token."""
    got = greedy_tokens(gtrain, source, prompt, n)
    with torch.no_grad():  # the model's own generation config: it stops at its eos_token_id
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    want = out[0, len(prompt):].tolist()
    same = got == want
    print(f"  greedy {n} tokens from {os.path.basename(source)}: {'equal' if same else 'DIFFERENT'}"
          + ("" if same else f"\n    gtrain       {got}\n    transformers {want}"), flush=True)
    return same


def staged_case(gtrain, tmp, family):
    """A fine-tune from a Hugging Face directory stopped after 3 steps on 2 ranks and resumed on 1
    equals the same 6 steps in one stage (constant learning rate): every step's loss within 1e-5."""
    tmp = tempfile.mkdtemp(dir=tmp)
    src = os.path.join(tmp, "hf")
    make_model(family, False, seed=3).save_pretrained(src)
    data = Data(tmp, seed=7)
    job = os.path.join(tmp, "job.toml")
    job_toml(job, src, data.path, data.eval_path, 6)
    constant = ("train.lr_schedule=constant",)
    ref, _ = run_gtrain(gtrain, job, os.path.join(tmp, "unstaged"), 1, constant)
    staged_dir = os.path.join(tmp, "staged")
    run_gtrain(gtrain, job, staged_dir, 2, constant + ("train.steps=3",))
    staged, out = run_gtrain(gtrain, job, staged_dir, 1, constant)
    if "resumed from" not in out:
        raise AssertionError(f"the second stage did not resume:\n{out}")
    losses = lambda recs: [r["loss"] for r in recs if r.get("kind") == "train"]
    a, b = losses(ref), losses(staged)
    if len(a) != 6 or len(b) != 6:
        raise AssertionError(f"expected 6 train records each, got {len(a)} and {len(b)}")
    ok = True
    for i, (want, got) in enumerate(zip(a, b)):
        ok &= close(got, want, f"step {i + 1} loss", ("staged 2 -> 1 ranks", "unstaged"))
    return ok


TWO_RANKS = ((2, ("parallel.mode=explicit", "parallel.dp=2", "parallel.zero=2")),
             (2, ("parallel.mode=explicit", "parallel.tp=2")),
             (2, ("parallel.mode=explicit", "parallel.pp=2")))

CASES = {  # one rank each; *_layouts need MPI (2 ranks)
    "gpt2_tied": lambda g, t: import_case(g, t, "gpt2", True),
    "gpt2_layouts": lambda g, t: import_case(g, t, "gpt2", True, TWO_RANKS),
    "gpt2_untied_sharded": lambda g, t: import_case(g, t, "gpt2", False, save={"max_shard_size": "200KB"}),
    "gpt2_bf16": lambda g, t: import_case(g, t, "gpt2", True, save={"dtype": "bfloat16"}),
    "gpt2_export": lambda g, t: (export_case(g, t, "gpt2", True) and
                                 export_case(g, t, "gpt2", False, "bfloat16", "100KB")),
    "llama": lambda g, t: import_case(g, t, "llama", False),
    "llama_layouts": lambda g, t: import_case(g, t, "llama", False, TWO_RANKS),
    "qwen3_sharded": lambda g, t: import_case(g, t, "qwen3", True, save={"max_shard_size": "100KB"}),
    "qwen2_bf16": lambda g, t: import_case(g, t, "qwen2", False, save={"dtype": "bfloat16"}),
    "qwen_layouts": lambda g, t: (import_case(g, t, "qwen3", True, (TWO_RANKS[1],)) and
                                  import_case(g, t, "qwen2", False, (TWO_RANKS[2],))),
    "llama_staged": lambda g, t: staged_case(g, t, "llama"),
    "llama_export": lambda g, t: (export_case(g, t, "llama", False) and export_case(g, t, "qwen3", True) and
                                  export_case(g, t, "qwen2", False, "bfloat16")),
}


def main():
    if len(sys.argv) < 3 or any(c not in CASES for c in sys.argv[2:]):
        print(f"usage: {sys.argv[0]} GTRAIN CASE... (cases: {', '.join(CASES)})", file=sys.stderr)
        return 2
    transformers.logging.set_verbosity_warning()
    failed = []
    for case in sys.argv[2:]:
        start = time.time()
        with tempfile.TemporaryDirectory(prefix="gtrain-hf-") as tmp:
            passed = bool(CASES[case](sys.argv[1], tmp))
        print(f"{case}: {'passed' if passed else 'FAILED'} ({time.time() - start:.1f} s)", flush=True)
        if not passed:
            failed.append(case)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
