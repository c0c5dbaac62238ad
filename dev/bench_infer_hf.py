"""
transformers' side of dev/bench_infer_hf.sh: prefill and decode tokens/s of one model on the
CPU, fp32 or bf16 (weights and arithmetic), batch 1, with the thread count given, timed the way infer -B 1 times itself
(prefill: the whole prompt in one forward pass, to the first token's logits; decode: one token
per step from the KV cache; medians of several runs after a warm-up).

    python dev/bench_infer_hf.py gpt2|smollm2 THREADS PROMPT_LENGTHS GENERATED [fp32|bf16]
"""
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel


def main():
    which, threads, lengths, generated = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[5] if len(sys.argv) > 5 else "fp32"]
    torch.set_num_threads(threads)
    if which == "gpt2":  # GPT-2 124M's shapes; random weights (speed does not depend on them)
        model = GPT2LMHeadModel(GPT2Config()).to(dtype)
    else:  # SmolLM2-135M-Instruct from its GGUF, dequantized by transformers
        model = AutoModelForCausalLM.from_pretrained("data/smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                                     dtype=dtype)
    model.eval()
    V = model.config.vocab_size
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, {threads} threads, {which}, {dtype}")
    print("| prompt | generated | TTFT ms | prefill tok/s | decode tok/s | ms/step |")
    print("|-------:|----------:|--------:|--------------:|-------------:|--------:|")
    with torch.inference_mode():
        for P in lengths:
            prompt = torch.randint(0, V, (1, P), generator=torch.Generator().manual_seed(P))
            prefills, steps = [], []
            for run in range(4):  # run 0 warms up
                t0 = time.perf_counter()
                out = model(prompt, use_cache=True)
                t1 = time.perf_counter()
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                step_times = []
                for _ in range(generated - 1):
                    s0 = time.perf_counter()
                    out = model(token, past_key_values=cache, use_cache=True)
                    step_times.append(time.perf_counter() - s0)
                    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                if run > 0:
                    prefills.append(t1 - t0)
                    steps.append(statistics.median(step_times))
            prefill, step = statistics.median(prefills), statistics.median(steps)
            print(f"| {P:6d} | {generated:9d} | {1000 * prefill:7.1f} | {P / prefill:13.0f} | {1 / step:12.1f} | {1000 * step:7.2f} |")


if __name__ == "__main__":
    main()
