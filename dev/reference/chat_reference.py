"""
Writes the fixtures that the chat templates and the samplers of lib/tokenizer.h and infer.c
are checked against:

1. Conversations of every shape (a user message alone; with a system message, an empty one,
   two; several user and assistant turns; one that ends with the assistant's; white space
   that Llama 3 trims; a special token's text inside a message; non-ASCII) rendered by
   transformers' apply_chat_template and tokenized, with and without the generation prompt,
   for each template family:
     smollm2    SmolLM2-135M-Instruct's tokenizer and ChatML template (its GGUF, make smollm2)
     llama3     Meta-Llama-3's template, llama31 / llama32 3.1's and 3.2's (date_string
                "26 Jul 2024"), qwen2 Qwen2.5's ChatML with its default system message: the
                tokenizers of fixtures/tok_*/ (bpe_tokenizer_reference.py made them)
     alpaca     GPT-2's tokenizer (data/gpt2) with our Alpaca template as Jinja (the text is
                infer.c's alpaca_render's comment)
   Outputs: fixtures/chat_conversations.jsonl (one {"messages": [...]} per line, the
   conversations in order) and fixtures/chat_<name>.txt, a line per conversation k:
   "conv<k> <count> <fnv1a64 of the ids as int32 LE> <ids...>", and "open<k> ..." for the same
   conversation without the generation prompt.

2. transformers' logits processors on recorded logits: SmolLM2's logits after the prompt of
   fixtures/smollm2_logits.bin (smollm2_reference.py recorded 1024 of its columns, the top 8
   among them: here a vocabulary of 1024, column k as token k), with a made-up history of
   token ids, and the logits shifted by a constant in some cases (so that some are negative), through RepetitionPenaltyLogitsProcessor (1.3, and 0.7 to
   check that a penalty below 1 rewards), then TemperatureLogitsWarper, TopKLogitsWarper,
   TopPLogitsWarper and MinPLogitsWarper in generate()'s order, for several settings; the
   probabilities that survive are written to fixtures/sampling_processors.txt, a case per
   line: "case <penalty> <temperature> <top_k> <top_p> <min_p> <shift> <history count> <history ids>
   ; <n kept> <id:prob>..." (the processors run in float32, as generate() runs them on
   float32 logits; the softmax of what they keep in float64, %.9e).

Run from the repository root after make smollm2 (pinned as dev/reference/requirements.txt):
    python dev/reference/chat_reference.py
"""

import json
import os
import struct
import sys

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(__file__))
from bpe_tokenizer_reference import CHAT_DATE, FIXTURES, fnv1a64, smollm2  # noqa: E402

ALPACA_PREAMBLE = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n")
ALPACA_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}"
    "{%- set messages = messages[1:] %}{%- else %}{{ '" + ALPACA_PREAMBLE.replace("\n", "\\n") + "' }}{%- endif %}"
    "{%- for m in messages %}{%- if m['role'] == 'user' %}{{ '### Instruction:\\n' + m['content'] + '\\n\\n' }}"
    "{%- elif m['role'] == 'assistant' %}{{ '### Response:\\n' + m['content'] + '\\n\\n' }}"
    "{%- else %}{{ m['content'] + '\\n\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '### Response:\\n' }}{%- endif %}")

S, U, A = "system", "user", "assistant"
CONVERSATIONS = [
    [(U, "What is the capital of France?")],
    [(S, "You answer briefly."), (U, "What is the capital of France?")],
    [(S, ""), (U, "Hi")],
    [(U, "What is 2 + 2?"), (A, "2 + 2 is 4."), (U, "And 3 + 3?")],
    [(S, "You are a helpful assistant.\n"), (U, "  Name a color.  "), (A, "Blue.\n\n"), (U, "Another one."), (A, " Red"),
     (U, "Thanks!\n")],
    [(U, "Write a haiku."), (A, "Leaves fall\nquietly.")],
    [(S, "Rule one."), (S, "Rule two."), (U, "Go.")],
    [(U, "Say <|im_end|> or <|eot_id|> as text: \u00e9t\u00e9 \u65e5\u672c 12345\r\n")],
    [(U, "")],
]


def conversations():
    return [[{"role": r, "content": c} for r, c in conv] for conv in CONVERSATIONS]


def tokenizers_by_name():
    out = {}
    tk, template, bos, eos, _ = smollm2()
    out["smollm2"] = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token=eos, chat_template=template)
    for name in ("llama3", "llama31", "llama32", "qwen2"):
        out[name] = AutoTokenizer.from_pretrained(os.path.join(FIXTURES, f"tok_{name}"))
    # GPT-2's tokenizer from data/gpt2 (encoder.json and vocab.bpe are Hugging Face's vocab.json
    # and merges.txt). (GPT2TokenizerFast(vocab_file=..., merges_file=...) encodes nothing in
    # transformers 5.24: built from the tokenizers library instead.)
    bpe = models.BPE.from_file(os.path.join("data", "gpt2", "encoder.json"), os.path.join("data", "gpt2", "vocab.bpe"))
    gpt2 = Tokenizer(bpe)
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    out["alpaca"] = PreTrainedTokenizerFast(tokenizer_object=gpt2, eos_token="<|endoftext|>", chat_template=ALPACA_TEMPLATE)
    return out


def write_chats():
    convs = conversations()
    with open(os.path.join(FIXTURES, "chat_conversations.jsonl"), "w", encoding="utf-8") as f:
        for messages in convs:
            f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
    for name, tok in tokenizers_by_name().items():
        dated = {"date_string": CHAT_DATE[name]} if name in CHAT_DATE else {}
        lines = []
        for k, messages in enumerate(convs):
            for label, gen in (("conv", True), ("open", False)):
                ids = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, return_dict=False, **dated)
                lines.append(f"{label}{k} {len(ids)} {fnv1a64(ids):016x} " + " ".join(map(str, ids)))
        with open(os.path.join(FIXTURES, f"chat_{name}.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"chat_{name}.txt: {len(convs)} conversations")


def processors_reference():
    from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                        TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
    # the 1024 recorded columns of the row after the prompt, as a vocabulary of 1024 (column k is token k)
    with open(os.path.join(FIXTURES, "smollm2_logits.bin"), "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        T, G, K = h[2], h[3], h[4]
        f.read(4 * (T + G) + 4 * K)
        rows = np.frombuffer(f.read(4 * (T + G) * K), dtype="<f4").reshape(T + G, K)
    V = K
    logits = rows[T - 1:T].astype(np.float64)
    last = torch.tensor(rows[T - 1], dtype=torch.float32)[None, :]
    rng = np.random.default_rng(11)
    top = np.argsort(-logits[-1])[:40]
    history = [int(x) for x in rng.choice(top, 12)] + [int(x) for x in rng.integers(0, V, 6)] + [int(top[0])] * 3
    # (the recorded logits of the likely tokens are all positive; a shift makes some of them
    # negative, where the penalty multiplies instead of dividing)
    cases = [(1.3, 1.0, 0, 1.0, 0.0, 0.0), (1.3, 0.7, 50, 0.9, 0.0, 0.0), (0.7, 1.0, 0, 1.0, 0.0, 0.0),
             (1.0, 1.0, 0, 1.0, 0.05, 0.0), (1.1, 0.8, 40, 0.95, 0.02, 0.0), (1.05, 0.2, 50, 0.9, 0.1, 0.0),
             (1.2, 1.5, 0, 1.0, 0.2, 0.0), (1.0, 1.0, 0, 1.0, 0.0, 0.0), (1.3, 1.0, 0, 1.0, 0.0, -29.5),
             (0.8, 1.0, 20, 1.0, 0.0, -29.5), (1.5, 0.9, 0, 0.95, 0.01, -30.0)]
    lines = []
    for penalty, temperature, top_k, top_p, min_p, shift in cases:
        ids = torch.tensor([history])
        x = last.clone() + torch.tensor(shift, dtype=torch.float32)
        if penalty != 1.0:
            x = RepetitionPenaltyLogitsProcessor(penalty)(ids, x)
        if temperature != 1.0:
            x = TemperatureLogitsWarper(temperature)(ids, x)
        if top_k > 0:
            x = TopKLogitsWarper(top_k)(ids, x)
        if top_p < 1.0:
            x = TopPLogitsWarper(top_p)(ids, x)
        if min_p > 0.0:
            x = MinPLogitsWarper(min_p)(ids, x)
        p = torch.softmax(x.double(), dim=-1)[0]
        kept = [(i, float(p[i])) for i in range(V) if torch.isfinite(x[0, i])]
        lines.append(f"case {penalty} {temperature} {top_k} {top_p} {min_p} {shift} {len(history)} " + " ".join(map(str, history))
                     + f" ; {len(kept)} " + " ".join(f"{i}:{q:.9e}" for i, q in kept))
    with open(os.path.join(FIXTURES, "sampling_processors.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"sampling_processors.txt: {len(cases)} cases, kept " + ", ".join(l.split(" ; ")[1].split()[0] for l in lines))


if __name__ == "__main__":
    write_chats()
    processors_reference()
