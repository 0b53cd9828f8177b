"""The project venv imports torch and transformers (and the other pinned packages) at the pinned
versions; prints them into the test log. Run through scripts/venv.sh run (ctest: Python.versions)."""
import importlib
import pathlib
import sys

REQ = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "venv-requirements.txt"
pins = {}
for line in REQ.read_text().splitlines():
    line = line.split("#")[0].strip()
    if "==" in line:
        name, version = line.split("==")
        pins[name.lower().replace("_", "-")] = version

failures = []
for module, dist in [("torch", "torch"), ("transformers", "transformers"), ("safetensors", "safetensors"),
                     ("tensorboard", "tensorboard"), ("numpy", "numpy"), ("tokenizers", "tokenizers"),
                     ("tiktoken", "tiktoken"), ("peft", "peft")]:
    try:
        m = importlib.import_module(module)
    except Exception as e:  # an import that fails is the finding
        failures.append(f"import {module}: {e}")
        continue
    version = m.__version__
    print(f"{module} {version} from {pathlib.Path(m.__file__).parent}")
    if version.split("+")[0] != pins.get(dist):
        failures.append(f"{module} {version} is not the pinned {pins.get(dist)} of {REQ.name}")

import torch  # noqa: E402

print(f"torch: cuda {torch.version.cuda}, cxx11 abi {torch._C._GLIBCXX_USE_CXX11_ABI}, "
      f"cuda available {torch.cuda.is_available()}, python {sys.version.split()[0]} at {sys.executable}")
if torch.version.cuda is None:
    failures.append("the venv's torch has no CUDA (the default Linux wheel does)")
# A real use, not only an import: a tiny transformers model runs forward on CPU.
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=8,
                                  bos_token_id=0, eos_token_id=0))
logits = model(torch.zeros(1, 4, dtype=torch.long)).logits
print(f"transformers GPT2LMHeadModel forward: logits {tuple(logits.shape)}")
if tuple(logits.shape) != (1, 4, 32):
    failures.append(f"GPT2LMHeadModel logits shape {tuple(logits.shape)}, expected (1, 4, 32)")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
