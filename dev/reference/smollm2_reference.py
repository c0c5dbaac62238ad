"""
What transformers makes of the real SmolLM2-135M-Instruct GGUF (make smollm2 fetches it),
for test_infer.c and test_infer.cu: float64 logits at every position of a chat prompt and
its greedy continuation, and each position's top-2 margin.

transformers (with the gguf package) dequantizes the GGUF's Q4_1 / Q8_0 tensors to float32
itself, so it computes on the very values ./convert writes into our fp32 file; we run its
model in float64, so what remains between the two is our fp32 arithmetic. The prompt is the
ChatML question of fixtures/bpe_smollm2.txt's "chat" line (tokenized by SmolLM2's own
tokenizer rule there), so the continuation is the model's answer.

The logits are 49152 wide: we keep, per row, 1024 columns (a fixed random sample plus the
row's top 8 in the reference), and each row's argmax and top-2 gap, in
fixtures/smollm2_logits.bin (little endian):
    header 256 x int32 [20261201, 1, T prompt tokens, G generated, K columns, V, 0...]
    (T + G) int32 tokens: the prompt, then transformers' greedy tokens
    K int32 columns
    (T + G) x K float32 logits at those columns (row t: the logits after token t)
    (T + G) int32 argmax, (T + G) float32 top-2 gap
The greedy tokens come from a manual loop over the whole sequence (no cache), cross-checked
against generate().

    python dev/reference/smollm2_reference.py        # after make smollm2; ~30 s
"""
import os
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GGUF_DIR = os.path.join(ROOT, "data", "smollm2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(HERE, "fixtures", "smollm2_logits.bin")
MAGIC, G, K_RANDOM, K_TOP = 20261201, 24, 1016, 8


@torch.no_grad()
def main():
    if not os.path.exists(os.path.join(GGUF_DIR, GGUF_NAME)):
        sys.exit("make smollm2 first")
    with open(os.path.join(HERE, "fixtures", "bpe_smollm2.txt")) as f:
        chat = next(line for line in f if line.startswith("chat "))
    prompt = [int(x) for x in chat.split()[3:]]
    model = AutoModelForCausalLM.from_pretrained(GGUF_DIR, gguf_file=GGUF_NAME, torch_dtype=torch.float32)
    model = model.double().eval()
    V = model.config.vocab_size
    tokens = list(prompt)
    for _ in range(G):
        tokens.append(int(torch.argmax(model(torch.tensor([tokens])).logits[0, -1])))
    model.generation_config.eos_token_id = None
    via_generate = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                  max_new_tokens=G, do_sample=False, pad_token_id=0)[0].tolist()
    assert via_generate == tokens, "generate() differs from the manual loop"
    logits = model(torch.tensor([tokens])).logits[0].numpy()  # (T + G, V)
    top2 = np.sort(logits, axis=1)[:, -2:]
    gaps = (top2[:, 1] - top2[:, 0]).astype(np.float32)
    argmax = np.argmax(logits, axis=1).astype(np.int32)
    rng = np.random.default_rng(20261201)
    columns = set(rng.choice(V, size=K_RANDOM, replace=False).tolist())
    for row in logits:
        columns.update(np.argsort(row)[-K_TOP:].tolist())
    columns = sorted(columns)[:K_RANDOM + K_TOP]
    while len(columns) < K_RANDOM + K_TOP:  # (a fixed K: pad with unused ids)
        columns.append(next(c for c in range(V) if c not in columns))
        columns.sort()
    cols = np.array(columns, dtype=np.int32)
    head = np.zeros(256, dtype="<i4")
    head[:6] = [MAGIC, 1, len(prompt), G, len(cols), V]
    with open(OUT, "wb") as f:
        f.write(head.tobytes())
        f.write(np.array(tokens, dtype="<i4").tobytes())
        f.write(cols.astype("<i4").tobytes())
        f.write(logits[:, cols].astype("<f4").tobytes())
        f.write(argmax.astype("<i4").tobytes())
        f.write(gaps.astype("<f4").tobytes())
    print(f"wrote {OUT}: {len(prompt)} prompt tokens, {G} greedy: {tokens[len(prompt):]}")
    print(f"smallest top-2 gap: prompt rows {gaps[:len(prompt)].min():.3g}, generated rows {gaps[len(prompt) - 1:-1].min():.3g}")
    # what dev/test/test_infer_cli.sh expects of ./infer on this model (its ids from our tokenizer,
    # which test_tokenizer holds to SmolLM2's): transformers' greedy tokens must say the same
    cli = {(1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198,
            1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198):  # -a 1 -i "What is the capital of France?"
           [504, 3575, 282, 4649, 314, 7042, 30, 2],  # "The capital of France is Paris." then <|im_end|>
           (33, 28, 216, 34, 28, 216, 35, 28): [216, 36, 28, 216, 37, 28]}  # -i "1, 2, 3," -> " 4, 5,"
    for ids, want in cli.items():
        got = model.generate(torch.tensor([list(ids)]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=len(want), do_sample=False, pad_token_id=0)[0].tolist()[len(ids):]
        assert got == want, f"transformers' greedy tokens {got}, test_infer_cli.sh expects {want}"
    print("test_infer_cli.sh's SmolLM2 answers are transformers' greedy tokens")


if __name__ == "__main__":
    main()
