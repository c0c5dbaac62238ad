"""
The independent reference for ./convert's Hugging Face *-bnb-4bit folders (checkpoints
saved by transformers with bitsandbytes' 4-bit layers, as unsloth's and others' are) and for
our programs running them.

For two tiny models among the fixtures we let transformers quantize them as people do,
BitsAndBytesConfig(load_in_4bit=True, ...) on the CPU, and save_pretrained:
    fixtures/bnb4_llama/   llama_gqa3, NF4 with double quantization, the other weights bf16
    fixtures/bnb4_qwen2/   qwen2_gqa4 (tied head), FP4 without it, the other weights fp32
(config.json with its quantization_config; model.safetensors with bitsandbytes' keys: each
quantized weight's packed codes as uint8 (n/2, 1), .absmax, .quant_map, .nested_absmax,
.nested_quant_map, .quant_state.bitsandbytes__<type> (a JSON blob: type, blocksize, shape,
the nested offset)). Then fixtures/bnb4_<name>.safetensors: two random sequences (tokens
(2, T) int32) and the model's float64 logits on them (logits0 (2, T, V), rounded to float32),
each 4-bit weight dequantized with bitsandbytes' portable dequantizer (nf4_reference.py says
why not its C++ CPU kernel: C = 96 is one of the shapes it gets wrong on AVX-512).

    python dev/reference/bnb4_reference.py                       # the folders and the logits
    python dev/reference/bnb4_reference.py --check-ours DIR NAME # transformers loads ./convert's
                                                                 # export DIR and gives NAME's logits

Pinned: torch 2.9.1, transformers 5.24.0, bitsandbytes 0.50.2.
"""

import json
import os
import sys

os.environ["TORCHDYNAMO_DISABLE"] = "1"  # bitsandbytes compiles its fallbacks with torch.compile: the same arithmetic, without the wait

import numpy as np
import torch
from safetensors.numpy import save_file
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join("dev", "reference", "fixtures")
SEED = 20261204
T = 20
MODELS = {"llama": ("llama_gqa3", "nf4", True, torch.bfloat16), "qwen2": ("qwen2_gqa4", "fp4", False, torch.float32)}


def dequantized_model(model):
    """The 4-bit model with each Linear4bit replaced by a float64 Linear of its dequantized weight."""
    import bitsandbytes as bnb
    from nf4_reference import dequantize
    for name, module in list(model.named_modules()):
        if not isinstance(module, bnb.nn.Linear4bit):
            continue
        w = dequantize(module.weight.data, module.weight.quant_state).reshape(module.out_features, module.in_features)
        lin = torch.nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(w.double())
            if module.bias is not None:
                lin.bias.copy_(module.bias.double())
        parent = model.get_submodule(name.rsplit(".", 1)[0])
        setattr(parent, name.rsplit(".", 1)[1], lin)
    return model.double().eval()


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens).long()).logits.numpy().astype(np.float32)


def load_4bit(path, quant_type=None, nested=None, dtype=None):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    if quant_type is None:  # a saved 4-bit folder: its own quantization_config
        return AutoModelForCausalLM.from_pretrained(path, device_map="cpu")
    cfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=nested,
                             bnb_4bit_compute_dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(path, quantization_config=cfg, device_map="cpu", dtype=dtype)


def main():
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    for name, (folder, quant_type, nested, dtype) in MODELS.items():
        model = load_4bit(os.path.join(FIXTURES, folder), quant_type, nested, dtype)
        out = os.path.join(FIXTURES, f"bnb4_{name}")
        model.save_pretrained(out)
        for extra in ("generation_config.json",):  # (the folder: config.json and model.safetensors only)
            if os.path.exists(os.path.join(out, extra)):
                os.remove(os.path.join(out, extra))
        tokens = rng.integers(0, model.config.vocab_size, size=(2, T)).astype(np.int32)
        ref = logits(dequantized_model(model), tokens)
        settings = json.dumps({"base": folder, "quant_type": quant_type, "double_quant": nested, "dtype": str(dtype), "T": T, "seed": SEED})
        save_file({"tokens": tokens, "logits0": ref}, os.path.join(FIXTURES, f"bnb4_{name}.safetensors"), metadata={"settings": settings})
        print(f"{name}: {out} ({quant_type}, double quantization {nested}) and its logits")


def check_ours(folder, name):
    """transformers loads our export and its dequantized model gives the fixture's logits"""
    with safe_open(os.path.join(FIXTURES, f"bnb4_{name}.safetensors"), "np") as f:
        tokens, ref = f.get_tensor("tokens"), f.get_tensor("logits0")
    model = load_4bit(folder)
    ours = logits(dequantized_model(model), tokens)
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    print(f"{folder}: transformers loads it; logits against bnb4_{name}: max abs err / max |ref| {err:.2e}")
    sys.exit(0 if err < 1e-5 else 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check-ours"]:
        check_ours(sys.argv[2], sys.argv[3])
    else:
        main()
