"""make-chat-example.py: writes examples/chat_sft/, the data of examples/chat_sft.toml.

conversations.jsonl: 400 short conversations ({"messages": [...]}, one a line) a tiny llama learns
on CPU in a couple of minutes: capitals ("What is the capital of France?" -> "The capital of France
is Paris."), small sums and products, unit conversions, greetings; 119 with a system prompt (54
of them "Answer with the number only.", which changes the reply), 64 over two user turns. Seeded:
every run writes the same bytes.

tokenizer/: a byte-level BPE (512 ids: the 256 bytes, 253 merges learnt from these conversations,
then <|endoftext|>, <|im_start|>, <|im_end|>) made with Hugging Face's tokenizers library, and a
tokenizer_config.json as Qwen2.5-Instruct's: eos <|im_end|>, pad <|endoftext|>, no BOS, and
Qwen2.5's ChatML chat_template (its default system prompt shortened to "You are a helpful
assistant."), which gtrain recognises as chatml.

Run with the project venv:
  scripts/venv.sh run python3 scripts/make-chat-example.py [OUT]   (OUT: default examples/chat_sft)
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 50
CONVERSATIONS = 400
VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "Canada": "Ottawa", "Egypt": "Cairo", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo",
    "Greece": "Athens", "Poland": "Warsaw", "Ireland": "Dublin", "Austria": "Vienna", "Chile": "Santiago",
    "Cuba": "Havana",
}
UNITS = [  # (from, to, factor)
    ("metres", "centimetres", 100), ("kilometres", "metres", 1000), ("hours", "minutes", 60),
    ("minutes", "seconds", 60), ("days", "hours", 24), ("weeks", "days", 7),
]
OPS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b}
SYSTEMS = ["You are a helpful assistant.", "Answer in one short sentence.", "You are a patient tutor."]
NUMBER_ONLY = "Answer with the number only."

# Qwen2.5's chat template, its default system prompt shortened.
CHATML_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


def capital(rng):
    country = rng.choice(sorted(CAPITALS))
    return [f"What is the capital of {country}?", f"The capital of {country} is {CAPITALS[country]}."], country


def arithmetic(rng):
    op = rng.choice(sorted(OPS))
    a, b = rng.randint(1, 12), rng.randint(1, 9 if op == "times" else 12)
    if op == "minus" and b > a:
        a, b = b, a
    r = OPS[op](a, b)
    return f"What is {a} {op} {b}?", f"{a} {op} {b} is {r}.", str(r)


def conversion(rng):
    src, dst, factor = rng.choice(UNITS)
    n = rng.randint(2, 9)
    return f"How many {dst} are in {n} {src}?", f"{n} {src} are {n * factor} {dst}.", str(n * factor)


def greeting(rng):
    return rng.choice([
        ("Hello!", "Hello! How can I help you today?"),
        ("Hi there.", "Hello! How can I help you today?"),
        ("Who are you?", "I am a small assistant trained with gtrain."),
        ("What can you do?", "I can name capitals, add and multiply small numbers, and convert units."),
        ("Thank you!", "You are welcome!"),
    ])


def conversation(rng):
    """One conversation: messages with roles system (sometimes), user and assistant."""
    kind = rng.choices(["capital", "arithmetic", "conversion", "greeting"], [35, 30, 20, 15])[0]
    system = rng.choice(SYSTEMS) if rng.random() < 0.2 else None
    if kind == "capital":
        (q, a), country = capital(rng)
        turns = [(q, a)]
        if rng.random() < 0.3:  # a follow-up that leans on the first turn
            other = rng.choice(sorted(set(CAPITALS) - {country}))
            turns.append((f"And of {other}?", f"The capital of {other} is {CAPITALS[other]}."))
    elif kind in ("arithmetic", "conversion"):
        q, a, number = (arithmetic if kind == "arithmetic" else conversion)(rng)
        if rng.random() < 0.25:
            system, a = NUMBER_ONLY, number
        turns = [(q, a)]
        if rng.random() < 0.15:
            turns.append(("Thank you!", "You are welcome!"))
    else:
        turns = [greeting(rng)]
    messages = [{"role": "system", "content": system}] if system else []
    for q, a in turns:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages


def write_tokenizer(out, convs):
    """A byte-level BPE learnt from the conversations' text, ChatML's special tokens after it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    lines = [f"{m['role']}\n{m['content']}" for c in convs for m in c] + [SYSTEMS[0]]
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(SPECIALS)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": 512,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "examples", "chat_sft")
    rng = random.Random(SEED)
    convs = [conversation(rng) for _ in range(CONVERSATIONS)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "conversations.jsonl"), "w") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}) + "\n")
    write_tokenizer(os.path.join(out, "tokenizer"), convs)
    print(f"{out}: {len(convs)} conversations, a {VOCAB}-id tokenizer")


main()
