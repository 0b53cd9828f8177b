"""make-example-tokenizer.py: writes examples/tokenizer-bpe512/, a small byte-level BPE tokenizer
(512 ids: the 256 bytes, 255 merges learnt from the GPL-3 text, <|endoftext|>) in GPT-2's
configuration, with Hugging Face's tokenizers library. The docs' runnable blocks and the examples
use it so that they run without downloading a model. Run with the project venv:
  scripts/venv.sh run python scripts/make-example-tokenizer.py
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "examples", "tokenizer-bpe512")
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=511, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              special_tokens=[], show_progress=False)
tok.train(["/usr/share/common-licenses/GPL-3"], trainer)
tok.add_special_tokens(["<|endoftext|>"])
os.makedirs(out, exist_ok=True)
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"eos_token": "<|endoftext|>", "model_max_length": 1024}, f, indent=2)
    f.write("\n")
print(tok.get_vocab_size(), "ids")
