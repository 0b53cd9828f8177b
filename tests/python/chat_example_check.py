"""chat_example_check.py: examples/chat_sft/ (the data of examples/chat_sft.toml) is what
scripts/make-chat-example.py writes, byte for byte, and gtrain reads it as transformers does: every
shipped conversation through `gtrain tokenize examples/chat_sft/tokenizer --chat` (the template
recognised from tokenizer_config.json, no --chat-template) gives apply_chat_template(tokenize=True)'s
ids, and the assistant mask of tokenizing the text up to the start and the end of each assistant turn.

Usage: chat_example_check.py GTRAIN SOURCE_DIR
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_masks import assistant_mask  # noqa: E402

GTRAIN, SOURCE = sys.argv[1], sys.argv[2]
EXAMPLE = os.path.join(SOURCE, "examples", "chat_sft")


def main():
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "make-chat-example.py"), work], check=True,
                       stdout=subprocess.DEVNULL)
        for name in ["conversations.jsonl", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"]:
            if not filecmp.cmp(os.path.join(work, name), os.path.join(EXAMPLE, name), shallow=False):
                print(f"examples/chat_sft/{name} is not what scripts/make-chat-example.py writes")
                failed += 1
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(EXAMPLE, "tokenizer"))
    specials = [tok.convert_tokens_to_ids(t) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]]
    if len(tok) != 512 or specials != [509, 510, 511] or tok.eos_token != "<|im_end|>":
        print(f"tokenizer: {len(tok)} ids, specials at {specials}, eos {tok.eos_token!r}")
        failed += 1
    conv_file = os.path.join(EXAMPLE, "conversations.jsonl")
    convs = [json.loads(line)["messages"] for line in open(conv_file)]
    r = subprocess.run([GTRAIN, "tokenize", os.path.join(EXAMPLE, "tokenizer"), "--file", conv_file, "--chat"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"gtrain tokenize --chat exited {r.returncode}: {r.stderr}")
        sys.exit(1)
    got = [json.loads(line) for line in r.stdout.splitlines()]
    bad_ids = bad_mask = 0
    for i, c in enumerate(convs):
        ids = tok.apply_chat_template(c, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        rendered = tok.apply_chat_template(c, tokenize=False)
        if got[i]["ids"] != list(ids):
            bad_ids += 1
            print(f"conversation {i + 1}: ids differ\n  transformers {list(ids)}\n  gtrain       {got[i]['ids']}")
        elif got[i]["train"] != assistant_mask(tok, rendered, len(ids)):
            bad_mask += 1
            print(f"conversation {i + 1}: masks differ")
    print(f"examples/chat_sft: {len(convs)} conversations, {sum(len(g['ids']) for g in got)} ids "
          f"({sum(sum(g['train']) for g in got)} trained on), {bad_ids} mismatched ids, {bad_mask} mismatched masks")
    sys.exit(1 if failed + bad_ids + bad_mask else 0)


main()
