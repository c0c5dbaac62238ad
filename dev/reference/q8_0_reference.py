"""
The independent reference for infer.c's -Q q8_0 (llama.cpp's 8-bit blocks): the gguf
package's own quantizer (gguf.quants, numpy: the same arithmetic as ggml's
quantize_row_q8_0_ref), and transformers' logits on models whose linear layers hold its
dequantized values.

fixtures/q8_0_cases.safetensors:
    c<i>.input      float32 (rows, 32k), a case: random rows, a block of zeros, blocks whose
                    values fall exactly halfway between two codes, scales that are fp16
                    subnormals, large values
    c<i>.qs         int8 (rows, 32k): the codes, as gguf.quants.quantize(input, Q8_0) stores them
    c<i>.d          float16 (rows, k): each block's scale
    c<i>.dequant    float32: gguf.quants.dequantize of those
    fp16.input, fp16.output   float32 values and numpy's float16 of each (round to nearest,
                    ties to even): ties, subnormals, overflow
fixtures/infer_q8_0_<name>.safetensors, for the tiny models of lora_reference.py (gpt2, llama,
qwen2): every linear layer of the blocks and the output head (infer -Q q8_0,q8_0) replaced
by its dequantized Q8_0 values (GPT-2's Conv1D weights as (out, in), as llama.cpp stores
them); the embedding stays as it is (a tied head is quantized as the head only):
    tokens (2, T) int32        two random sequences
    logits0 (2, T, V) float32  the model's float64 logits on them, rounded once

Run from the repository root (pinned: gguf 0.19.0, torch 2.9.1, transformers 5.24.0):
    python dev/reference/q8_0_reference.py
"""

import json
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

FIXTURES = os.path.join("dev", "reference", "fixtures")
SEED = 20261203
T = 20
MODELS = {"gpt2": "hf_tiny_fp32", "llama": "llama_gqa3", "qwen2": "qwen2_gqa4"}


def q8_0(x):
    """gguf's Q8_0 of a float32 (rows, 32k) array: codes (rows, 32k) int8, scales (rows, k) float16."""
    blocks = quantize(x.astype(np.float32), GGMLQuantizationType.Q8_0).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).reshape(x.shape[0], -1)
    qs = blocks[:, 2:].copy().view(np.int8).reshape(x.shape)
    return qs, d, dequantize(blocks.reshape(x.shape[0], -1), GGMLQuantizationType.Q8_0).astype(np.float32).reshape(x.shape)


def cases(rng):
    out = [rng.standard_normal((7, 64)).astype(np.float32) * 0.02]
    b = rng.standard_normal((3, 96)).astype(np.float32)
    b[0, 32:64] = 0.0  # a block of zeros: scale 0, codes 0
    b[1, :32] = np.arange(32, dtype=np.float32) - 15.5  # a block of halves: d = 16.5/127; x/d ties? (see the next)
    b[2, :32] = (np.arange(32, dtype=np.float32) - 16.0) * 0.5 + 0.25  # d = 7.75/127 ...
    b[2, 32:64] = 0.0
    b[2, 32] = 63.5  # d = 0.5 exactly (fp16 too), id = 2: the others x * 2 = k + 0.5, halves away from zero
    b[2, 33:64] = (np.arange(31, dtype=np.float32) - 15.0) * 0.5 + 0.25
    out.append(b)
    out.append(rng.standard_normal((2, 64)).astype(np.float32) * 1e-3)  # scales below fp16's smallest normal
    out.append(rng.standard_normal((2, 32)).astype(np.float32) * 1000.0)
    return out


def fp16_values(rng):
    v = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 70000.0, -65520.0, 6.103515625e-05, 6.0e-05, 5.96e-08, 2.98e-08,
         2.99e-08, 1e-9, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1.0 + 2.0**-11 + 2.0**-20, 2.0**-15 + 2.0**-25, 0.333333]
    v += list((rng.standard_normal(200) * np.exp(rng.uniform(-20, 12, 200))).astype(np.float32))
    return np.array(v, dtype=np.float32)


def model_logits(name, folder, rng):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.join(FIXTURES, folder), torch_dtype=torch.float32)
    head = model.get_output_embeddings().weight.detach().float().numpy()
    count = 0
    with torch.no_grad():
        for module_name, module in model.named_modules():
            conv1d = type(module).__name__ == "Conv1D"
            if not (isinstance(module, torch.nn.Linear) or conv1d) or "lm_head" in module_name:
                continue
            w = module.weight.detach().float().numpy()
            w = w.T.copy() if conv1d else w
            deq = q8_0(w)[2]
            module.weight.copy_(torch.from_numpy(deq.T.copy() if conv1d else deq))
            count += 1
    model = model.double().eval()
    V = model.config.vocab_size
    tokens = rng.integers(0, V, size=(2, T)).astype(np.int32)
    with torch.no_grad():
        out = model(torch.from_numpy(tokens).long(), output_hidden_states=True)
    hidden = out.hidden_states[-1].numpy()  # after the final norm
    logits = hidden @ q8_0(head)[2].astype(np.float64).T
    print(f"{name}: {count} linear layers and the head in q8_0, dequantized")
    return {"tokens": tokens, "logits0": logits.astype(np.float32)}


def main():
    rng = np.random.default_rng(SEED)
    tensors = {}
    for i, x in enumerate(cases(rng)):
        qs, d, deq = q8_0(x)
        tensors.update({f"c{i}.input": x, f"c{i}.qs": qs, f"c{i}.d": d, f"c{i}.dequant": deq})
    v = fp16_values(rng)
    tensors["fp16.input"], tensors["fp16.output"] = v, v.astype(np.float16)
    settings = json.dumps({"seed": SEED, "gguf": "0.19.0", "numpy": np.__version__})
    save_file(tensors, os.path.join(FIXTURES, "q8_0_cases.safetensors"), metadata={"settings": settings})
    for name, folder in MODELS.items():
        save_file(model_logits(name, folder, rng), os.path.join(FIXTURES, f"infer_q8_0_{name}.safetensors"),
                  metadata={"settings": json.dumps({"base": folder, "T": T, "seed": SEED, "quant": "q8_0, the head too"})})
    print("wrote", os.path.join(FIXTURES, "q8_0_cases.safetensors"), "and infer_q8_0_*.safetensors")


if __name__ == "__main__":
    main()
