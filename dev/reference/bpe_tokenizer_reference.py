"""
Writes the fixtures that test_tokenizer.c checks the Llama family's tokenizers against (our
tokenizer files, made by ./convert, encoded by data/tokenizer.c): what Hugging Face's
`tokenizers` library, running each model's own tokenizer definition, makes of Tiny
Shakespeare, the UTF-8 stress text (fixtures/utf8_stress.txt, from tokenizer_reference.py)
and a chat with special tokens; and what transformers' apply_chat_template makes of a
question, with and without a system message.

The tokenizers:
  smollm2   SmolLM2-135M-Instruct's, from its GGUF file (make smollm2 fetches it). The GGUF
            holds the vocabulary, the merges and the pre-tokenizer's name, "smollm"; the rule
            behind that name is SmolLM2's tokenizer.json pre_tokenizer, which we rebuild here:
            Digits(individual_digits=True), then ByteLevel(add_prefix_space=False). (transformers
            5.24, loading a GGUF, has no rule for "smollm" and falls back to GPT-2's split: it
            differs on a run of spaces before a digit, "a  1". We do not use that path.) The
            chat template is the GGUF's own Jinja text.
  llama3    a small byte-level BPE trained here with Llama 3's tokenizer.json definition: its
            Split regex, ByteLevel without a regex, ignore_merges, <|begin_of_text|> added in
            front by the post-processor, Llama 3's special tokens and chat template
            (Meta-Llama-3-8B-Instruct's).
  llama31   llama3's tokenizer with Llama 3.1's chat layout: a system turn always, opening with
  llama32   "Cutting Knowledge Date: December 2023" and "Today Date: " + date_string, which is
            "26 Jul 2024" in 3.1's template and today's date (strftime_now) in 3.2's. The
            templates are ours, written to give Meta's 3.1 and 3.2 templates' text for chats
            without tools; 3.2's prompts here are made with date_string="26 Jul 2024" (and
            test_tokenizer sets the same date), so that the fixture does not change daily.
  qwen2     the same with Qwen2's definition: its regex (single digits), the NFC normalizer,
            ChatML with Qwen2.5's default system message; merges written as "a b" strings (the
            older tokenizer.json form; llama3's use pairs, the newer).
The trained vocabularies are then shuffled (every ordinary token gets a random new id), so
that a token's id says nothing about its merge's rank: Hugging Face's BPE ranks merges by
their place in the list, not by id, and the C code must too.

Outputs in dev/reference/fixtures/:
  tok_llama3/, tok_llama31/, tok_llama32/, tok_qwen2/
                             tokenizer.json + tokenizer_config.json (./convert's input)
  bpe_<name>.txt             one line per text: "<label> <count> <fnv1a64 of the ids as
                             int32 LE> <ids...>" (Tiny Shakespeare: no ids, only count and hash)
  tokenizer_export.sha256    ./convert's export of our tokenizer files (from the fixtures; SmolLM2's
                             from make smollm2) back to Hugging Face tokenizer.json +
                             tokenizer_config.json, which transformers' AutoTokenizer loaded and
                             which gave the same ids on every text and the same chat prompts
                             (asserted here); test_convert_cli.sh holds the export to these hashes
  nfc_cases.txt              Unicode NFC (Qwen2's normalizer, done by hand in lib/tokenizer.h)
                             from unicodedata2 16.0.0 (the version of lib/unicode_tables.h):
                             every code point NFC changes, and sequences that exercise the
                             ordering of marks and the composition rules; "input ; NFC" in hex

Run from the repository root after make smollm2 (pinned: tokenizers==0.23.3,
transformers==5.24.0, gguf==0.19.0, numpy):
    python dev/reference/bpe_tokenizer_reference.py
"""

import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

PINNED_TOKENIZERS = "0.23.3"
FIXTURES = os.path.join("dev", "reference", "fixtures")
SMOLLM2_GGUF = os.path.join("data", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHAKESPEARE = os.path.join("data", "tinyshakespeare", "input.txt")
STRESS = os.path.join(FIXTURES, "utf8_stress.txt")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA31_DATE = '{%- set date_string = "26 Jul 2024" %}'
LLAMA32_DATE = ('{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}'
                '{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}')
LLAMA31_TEMPLATE = (
    "{{- bos_token }}{%- if not date_string is defined %}DATE{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
CHAT_DATE = {"llama32": "26 Jul 2024"}  # the date_string the fixture's chat prompts are made with
QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# the chats: a question (with spaces and digits that the rules split differently) and a system message
UNREACHABLE = "\u0120zyzzyva"  # " zyzzyva" in the byte-level alphabet
# text after the special tokens in the "specials" line (test_tokenizer.c writes the same)
TAIL = "'S 12345 a  1\r\n zyzzyva 2024 31415926 a\r\r  b\r \r\n it'\u017f x'\u017fy\n"  # (U+017F: (?i) folds it to s)
QUESTION = "What is the ISO 3166 two-letter code of Germany?  Answer in 2 words. "
SYSTEM = "You answer briefly.\u3000\n"  # (Llama 3's template trims it: Python's str.strip, U+3000 included)


def fnv1a64(ids):
    h = 14695981039346656037
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def read(path):
    with open(path, encoding="utf-8", newline="") as f:  # newline="": keep every \r
        return f.read()


def smollm2():
    from gguf import GGUFReader
    r = GGUFReader(SMOLLM2_GGUF)
    f = r.fields

    def strings(key):
        return [bytes(f[key].parts[i]).decode("utf-8") for i in f[key].data]

    def number(key):
        return int(f[key].parts[f[key].data[0]][0])

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    template = bytes(f["tokenizer.chat_template"].parts[f["tokenizer.chat_template"].data[0]]).decode("utf-8")
    unk = tokens[number("tokenizer.ggml.unknown_token_id")]
    bpe = models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ")) for m in merges], unk_token=unk)
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in range(len(tokens)) if types[i] == 3])
    specials = [tokens[i] for i in range(len(tokens)) if types[i] == 3]
    return tk, template, tokens[number("tokenizer.ggml.bos_token_id")], tokens[number("tokenizer.ggml.eos_token_id")], specials


def train(pre, normalizer, ignore_merges, specials, texts, seed):
    tk = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre
    if normalizer is not None:
        tk.normalizer = normalizer
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=specials, show_progress=False)
    tk.train_from_iterator(texts, trainer)
    # shuffle the ordinary tokens' ids (the special ones keep theirs: 0..k-1)
    spec = json.loads(tk.to_str())
    vocab = spec["model"]["vocab"]
    ordinary = sorted((i, t) for t, i in vocab.items() if i >= len(specials))
    new_ids = [i for i, _ in ordinary]
    random.Random(seed).shuffle(new_ids)
    for (_, t), new in zip(ordinary, new_ids):
        vocab[t] = new
    return spec


def nfc_cases():
    import unicodedata2 as ud
    assert ud.unidata_version == "16.0.0", "pip install unicodedata2==16.0.0"
    cases = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and ud.normalize("NFC", chr(c)) != chr(c)]
    rng = random.Random(7)
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u05B0", "\u0591", "\u093C", "\u0E38", "\u302A", "\u1DCE", "\U0001D165"]
    bases = ["a", "e", "o", "u", "A", "\u0391", "\u0430", "\u05D0", "\u0915", "\u00e9", "\u1100", "\uAC00", "\u0B47"]
    for _ in range(3000):  # a base, then marks in any order, sometimes a second base
        text = rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randrange(0, 4)))
        if rng.random() < 0.3:
            text += rng.choice(["\u0B3E", "\u1161", "\u11A8", "\u3099", "b"]) + rng.choice(marks)
        cases.append(text)
    cases += ["\u1100\u1161\u11A8", "\u1100\u1161", "\uAC00\u11A8", "\u0301e", "e\u0301\u0301", "A\u030A\u0323",
              "\u0958", "\u2126", "\u0344", "\U0001D1C0", "e\u0327\u0301", "\u0B47\u0300\u0B3E"]
    with open(os.path.join(FIXTURES, "nfc_cases.txt"), "w") as f:
        for text in cases:
            f.write(" ".join(f"{ord(c):X}" for c in text) + " ; " + " ".join(f"{ord(c):X}" for c in ud.normalize("NFC", text)) + "\n")
    return len(cases)


def check_export(name, tk, hf, texts):
    """our tokenizer file of `name` (./convert from the fixture) exported by ./convert to a
    Hugging Face folder: transformers must load it and give tk's ids and hf's chat prompts.
    Returns sha256sum lines of the two files, for test_convert_cli.sh"""
    from transformers import AutoTokenizer
    ours = (os.path.join("data", "smollm2", "SmolLM2-135M-Instruct_tokenizer.bin") if name == "smollm2"
            else os.path.join("build", f"tok_{name}_tokenizer.bin"))
    with tempfile.TemporaryDirectory() as tmp:
        if name != "smollm2":
            subprocess.run(["./convert", "-i", os.path.join(FIXTURES, f"tok_{name}", "tokenizer.json"), "-o", ours], check=True,
                           capture_output=True)
        out = os.path.join(tmp, name)
        subprocess.run(["./convert", "-i", ours, "-o", out], check=True, capture_output=True)
        back = AutoTokenizer.from_pretrained(out)
        for text in texts:
            assert back(text, add_special_tokens=False)["input_ids"] == tk.encode(text, add_special_tokens=False).ids, name
        assert back(QUESTION)["input_ids"] == tk.encode(QUESTION).ids, name  # the start token where the original adds it
        for messages in ([{"role": "user", "content": QUESTION}],
                         [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]):
            assert (back.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                    == hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)), name
        lines = ""
        for f in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(out, f), "rb") as fp:
                lines += f"{hashlib.sha256(fp.read()).hexdigest()}  {name}/{f}\n"
        print(f"{name}: our export loads in transformers with the same ids and chat prompts")
        return lines


def main():
    if not os.path.exists("convert"):
        sys.exit("build ./convert first (make convert)")
    print(f"nfc_cases.txt: {nfc_cases()} cases")
    if tokenizers.__version__ != PINNED_TOKENIZERS:
        print(f"WARNING: tokenizers {tokenizers.__version__}, the fixtures were made with {PINNED_TOKENIZERS}")
    if not os.path.exists(SMOLLM2_GGUF):
        sys.exit(f"{SMOLLM2_GGUF} is missing: run make smollm2 first")
    from transformers import PreTrainedTokenizerFast
    shakespeare, stress = read(SHAKESPEARE), read(STRESS)
    # numbers, so that the vocabularies have tokens of several digits (how a rule groups
    # digits then changes the tokens, not only the pieces)
    numbers = " ".join(str(random.Random(5).randrange(10 ** (k % 7))) for k in range(20000))
    train_texts = [shakespeare[:200000], stress, numbers]

    outputs, exports = {}, []
    tk, template, bos, eos, specials = smollm2()
    outputs["smollm2"] = (tk, template, bos, eos, specials)

    split = pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    spec = train(pre_tokenizers.Sequence([split, byte_level]), None, True, LLAMA3_SPECIALS, train_texts, 3)
    # a token that no merge makes: with ignore_merges a piece that is exactly this token is
    # taken whole (Llama 3's vocabulary has such tokens); merging would never reach it
    spec["model"]["vocab"][UNREACHABLE] = len(spec["model"]["vocab"])
    # and one that only a wrong split makes a piece: "\r\r " (the rule cuts a run of white
    # space after its last line break, CR or LF: "\r\r", " ")
    spec["model"]["vocab"]["\u010d\u010d\u0120"] = len(spec["model"]["vocab"])
    tk = Tokenizer.from_str(json.dumps(spec))
    tk.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                      special_tokens=[("<|begin_of_text|>", 0)])
    outputs["llama3"] = (tk, LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>", LLAMA3_SPECIALS)
    for name, date in (("llama31", LLAMA31_DATE), ("llama32", LLAMA32_DATE)):
        outputs[name] = (tk, LLAMA31_TEMPLATE.replace("DATE", date), "<|begin_of_text|>", "<|eot_id|>", LLAMA3_SPECIALS)

    split = pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False)
    spec = train(pre_tokenizers.Sequence([split, byte_level]), normalizers.NFC(), False, QWEN2_SPECIALS, train_texts, 4)
    spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]  # the older form
    tk = Tokenizer.from_str(json.dumps(spec))
    assert tk.encode(" zyzzyva").ids != [spec["model"]["vocab"].get(UNREACHABLE, -1)]
    outputs["qwen2"] = (tk, QWEN2_TEMPLATE, None, "<|im_end|>", QWEN2_SPECIALS)

    for name, (tk, template, bos, eos, specials) in outputs.items():
        if name != "smollm2":
            folder = os.path.join(FIXTURES, f"tok_{name}")
            os.makedirs(folder, exist_ok=True)
            tk.save(os.path.join(folder, "tokenizer.json"))
            with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": bos, "eos_token": eos, "chat_template": template,
                           "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
                f.write("\n")
        # a text naming every special token, and some that are almost special tokens
        chat = "".join(f"{s}x {s}{s}\n" for s in specials[:6]) + f"<|{specials[0][2:]} {specials[-1][:-1]}> " + TAIL
        hf = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token=eos, chat_template=template)
        lines = []
        for label, text in [("utf8_stress", stress), ("specials", chat), ("tiny_shakespeare", shakespeare)]:
            ids = tk.encode(text, add_special_tokens=False).ids
            shown = "" if label == "tiny_shakespeare" else " " + " ".join(map(str, ids))
            lines.append(f"{label} {len(ids)} {fnv1a64(ids):016x}{shown}")
        for label, messages in [("chat", [{"role": "user", "content": QUESTION}]),
                                ("chat_system", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])]:
            dated = {"date_string": CHAT_DATE[name]} if name in CHAT_DATE else {}
            ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False, **dated)
            lines.append(f"{label} {len(ids)} {fnv1a64(ids):016x} " + " ".join(map(str, ids)))
        # a prompt as the model's tokenizer encodes it (Llama 3's adds <|begin_of_text|>)
        ids = tk.encode(QUESTION).ids
        lines.append(f"prompt {len(ids)} {fnv1a64(ids):016x} " + " ".join(map(str, ids)))
        with open(os.path.join(FIXTURES, f"bpe_{name}.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        exports.append(check_export(name, tk, hf, [stress, chat, shakespeare]))
        print(f"{name}: {tk.get_vocab_size()} tokens; " + ", ".join(l.split()[0] + " " + l.split()[1] for l in lines))
    with open(os.path.join(FIXTURES, "tokenizer_export.sha256"), "w") as f:
        f.write("".join(exports))


if __name__ == "__main__":
    main()
